"""Where a run's per-step records go: ``metrics.jsonl``, ``rollouts/step_N.jsonl``, the console,
and TensorBoard / Weights & Biases when asked for (RL runs and ``rstar2 sft`` runs alike).

    log = RunLog(run_dir, config.logging, total_steps, resume_step=0)
    log.step(step, metrics)                  # one JSON line, a console line, TB/wandb scalars
    log.rollouts(step, rows)                 # the step's sampled trajectories with RoC verdicts
    log.close()

``missing_logger`` names a logger the config asks for whose package is not installed, so that a
command refuses the run in one line before it loads a model, rather than when the trainer opens
its logs.

``metrics.jsonl`` holds one object per completed step (``{"step": N, ...metrics}``), appended
and flushed as each step ends, and, in an RL run with a ``validation:`` section, one of step 0:
the held-out probe of the policy before its first step (``rstar2.rl.validation``), which
``read_metrics`` leaves out unless asked. A run resumed from the checkpoint of step s first
drops any line of a later step (written by the killed run after its last checkpoint), and a run
started afresh drops every line, so the file always describes one run.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.console import Console

from rstar2.training.config import LoggingConfig

LOGGER_PACKAGES = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb_project": ("wandb", "wandb"),
}
"""Per logging field: the package it needs and the rstar2 extra that installs it."""

CONSOLE_FIELDS = (
    ("reward/accuracy", "acc", "{:.2f}"),
    ("val/accuracy", "val", "{:.2f}"),
    ("reward/groups_with_signal", "signal", "{:.2f}"),
    ("reward/mean", "reward", "{:.2f}"),
    ("tools/call_rate", "calls", "{:.2f}"),
    ("tools/error_ratio_in_positives", "err+", "{:.3f}"),
    ("roc/dropped_share", "dropped", "{:.2f}"),
    ("response/length_mean", "len", "{:.0f}"),
    ("loss/entropy", "ent", "{:.2f}"),
    ("train/grad_norm", "|g|", "{:.2f}"),
    ("sft/loss", "loss", "{:.3f}"),
    ("sft/lr", "lr", "{:.1e}"),
    ("sft/sequences_per_s", "seq/s", "{:.2f}"),
    ("time/step", "s", "{:.1f}"),
)


class RunLog:
    def __init__(self, run_dir: Path, config: LoggingConfig, total_steps: int, resume_step: int = 0,
                 console: Console | None = None, run_config: Mapping | None = None):
        self.run_dir = Path(run_dir)
        self.total_steps = total_steps
        self.console = console or Console()
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.rollouts_dir = self.run_dir / "rollouts"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        keep_steps_before(self.metrics_path, resume_step)
        self.metrics_file = self.metrics_path.open("a", encoding="utf-8")
        self.tensorboard = open_tensorboard(self.run_dir) if config.tensorboard else None
        self.wandb = open_wandb(config.wandb_project, self.run_dir, run_config) if config.wandb_project else None

    def step(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record the metrics of completed step ``step`` (1-based)."""
        self.metrics_file.write(json.dumps({"step": step, **metrics}) + "\n")
        self.metrics_file.flush()
        os.fsync(self.metrics_file.fileno())
        if self.tensorboard is not None:
            for name, value in metrics.items():
                self.tensorboard.add_scalar(name, value, step)
        if self.wandb is not None:
            self.wandb.log(dict(metrics), step=step)
        self.console.print(console_line(step, self.total_steps, metrics), soft_wrap=True, highlight=False)

    def rollouts(self, step: int, rows: Sequence[Mapping]) -> Path:
        self.rollouts_dir.mkdir(exist_ok=True)
        path = self.rollouts_dir / f"step_{step}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        return path

    def close(self) -> None:
        self.metrics_file.close()
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb is not None:
            self.wandb.finish()


def console_line(step: int, total: int, metrics: Mapping[str, float]) -> str:
    """``step 3/20 ▕███░░░░▏ acc 0.41 reward 0.50 ...``: progress and the headline numbers."""
    width = 20
    filled = round(width * step / max(total, 1))
    bar = "█" * filled + "░" * (width - filled)
    shown = [f"{label} {fmt.format(metrics[key])}" for key, label, fmt in CONSOLE_FIELDS if key in metrics]
    return f"step {step}/{total} ▕{bar}▏ " + "  ".join(shown)


def keep_steps_before(path: Path, resume_step: int) -> None:
    """Drop the lines of steps after ``resume_step`` (all of them, step 0's too, when starting
    afresh)."""
    if not path.is_file():
        return
    lines = path.read_text(encoding="utf-8").splitlines() if resume_step else []
    kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= resume_step]
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")


def read_metrics(run_dir: str | Path, before_training: bool = False) -> list[dict]:
    """The rows of a run's completed steps in ``metrics.jsonl``, in step order; with
    ``before_training`` also the row of step 0 (the validation probe before the first step),
    which holds none of a step's own metrics."""
    path = Path(run_dir) / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return sorted((row for row in rows if before_training or row["step"] > 0), key=lambda row: row["step"])


def missing_logger(config: LoggingConfig) -> str | None:
    """Why a logger ``config`` asks for cannot run (its package is not installed), else None."""
    for field, (package, extra) in LOGGER_PACKAGES.items():
        if getattr(config, field) and importlib.util.find_spec(package) is None:
            return logger_package_error(field)
    return None


def logger_package_error(field: str) -> str:
    package, extra = LOGGER_PACKAGES[field]
    return f"logging.{field} needs the {package} package: pip install -e '.[{extra}]' in the rstar2 clone"


def open_tensorboard(run_dir: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:
        raise RuntimeError(logger_package_error("tensorboard")) from error
    return SummaryWriter(str(run_dir / "tensorboard"))


def open_wandb(project: str, run_dir: Path, run_config: Mapping | None):
    try:
        import wandb
    except ImportError as error:
        raise RuntimeError(logger_package_error("wandb_project")) from error
    return wandb.init(project=project, name=run_dir.name, dir=str(run_dir), config=dict(run_config or {}),
                      resume="allow", id=run_dir.name)
