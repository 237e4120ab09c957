"""The validator's schedule and numbers, and the metrics file's row of step 0 (the probe before
the first step): a resume keeps it, a fresh start drops it, readers of the steps skip it."""

from rich.console import Console

from rstar2.reward import Score
from rstar2.rl.roc import RolloutSummary, TextFacts
from rstar2.rl.rollout import Rollout
from rstar2.rl.validation import Validator, validation_metrics
from rstar2.training.config import LoggingConfig
from rstar2.training.runlog import RunLog, console_line, read_metrics


def rollout(reward: float, calls: int = 0, errors: int = 0, failure: str | None = None) -> Rollout:
    text = TextFacts(0, 0, 0, 0, 0, 0)
    return Rollout(None, RolloutSummary(reward, calls, errors, 1, 1, text), score=Score(reward, failure=failure))


def test_probes_are_due_before_the_first_step_every_k_steps_and_after_the_last():
    validator = Validator(None, [], every_steps=4, seed=0)
    assert [step for step in range(0, 11) if validator.due(step, last_step=10)] == [0, 4, 8, 10]
    assert [step for step in range(0, 9) if validator.due(step, last_step=8)] == [0, 4, 8]


def test_a_probes_numbers_are_over_its_answers():
    metrics = validation_metrics([rollout(1.0, calls=2, errors=1), rollout(0.0, calls=2), rollout(0.0),
                                  rollout(0.0, failure="error")])
    assert metrics == {"val/accuracy": 0.25, "val/problems": 4.0, "val/tool_call_rate": 0.5,
                       "val/tool_error_ratio": 0.25, "val/reward_failures": 1.0}


def test_the_row_of_step_0_is_kept_by_a_resume_dropped_by_a_fresh_start_and_read_when_asked(tmp_path):
    quiet = Console(file=open("/dev/null", "w"))
    log = RunLog(tmp_path, LoggingConfig(), total_steps=4, console=quiet)
    log.step(0, {"val/accuracy": 0.25})
    for step in (1, 2):
        log.step(step, {"reward/accuracy": step / 10})
    log.close()
    assert [row["step"] for row in read_metrics(tmp_path)] == [1, 2]
    RunLog(tmp_path, LoggingConfig(), total_steps=4, resume_step=1, console=quiet).close()
    assert [row["step"] for row in read_metrics(tmp_path, before_training=True)] == [0, 1]
    RunLog(tmp_path, LoggingConfig(), total_steps=4, console=quiet).close()  # a fresh start probes again
    assert read_metrics(tmp_path, before_training=True) == []


def test_the_console_line_of_a_probe_shows_its_accuracy():
    assert console_line(0, 12, {"val/accuracy": 0.5, "val/problems": 12.0}).endswith("▏ val 0.50")
