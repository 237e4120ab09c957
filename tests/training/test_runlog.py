"""The run's metrics file describes one run: a resume drops the lines of steps it will redo."""

from rich.console import Console

from rstar2.training.config import LoggingConfig
from rstar2.training.runlog import RunLog, console_line, read_metrics


def test_resume_drops_lines_after_the_checkpoint_and_appends(tmp_path):
    quiet = Console(file=open("/dev/null", "w"))
    log = RunLog(tmp_path, LoggingConfig(), total_steps=5, console=quiet)
    for step in (1, 2, 3):
        log.step(step, {"reward/mean": step / 10})
    log.close()
    resumed = RunLog(tmp_path, LoggingConfig(), total_steps=5, resume_step=2, console=quiet)
    resumed.step(3, {"reward/mean": 0.9})
    resumed.rollouts(3, [{"rollout": 0}])
    resumed.close()
    assert [(row["step"], row["reward/mean"]) for row in read_metrics(tmp_path)] == [(1, 0.1), (2, 0.2), (3, 0.9)]
    assert (tmp_path / "rollouts" / "step_3.jsonl").read_text() == '{"rollout": 0}\n'
    RunLog(tmp_path, LoggingConfig(), total_steps=5, console=quiet).close()  # a fresh start
    assert read_metrics(tmp_path) == []


def test_console_line_shows_progress_and_headline_numbers():
    line = console_line(3, 12, {"reward/accuracy": 0.5, "tools/error_ratio_in_positives": 0.125, "time/step": 41.0})
    assert line.startswith("step 3/12 ▕█████░") and "acc 0.50" in line and "err+ 0.125" in line and "s 41.0" in line
