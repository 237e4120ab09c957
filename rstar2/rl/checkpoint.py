"""Atomic, resumable training checkpoints.

    save_checkpoint(root, step, model, optimizer, scheduler, data_position, keep_last=2)
    state = load_checkpoint(resolve_checkpoint(root), model, optimizer, scheduler)
    state.step, state.data_position

A checkpoint is a directory ``root/step_00000012/`` holding

* ``model.pt``     -- the *trainable* parameters: every weight under full fine-tuning, only the
  adapter under LoRA (frozen weights come back from the base model); tied weights once;
* ``optimizer.pt`` -- the optimizer state (AdamW moments and step counts);
* ``scheduler.pt`` -- the learning-rate schedule's position;
* ``rng.pt``       -- the global RNG states of python, numpy and torch (and CUDA when present);
* ``state.json``   -- the step and the caller's JSON data position (e.g. ``PromptOrder.position()``).

Other random streams should be derived from (seed, step), e.g. RoC's generator, so that they
need no saving.

Atomicity: the files are written into ``root/.tmp-step_00000012-<pid>/``, each fsynced, then
the directory is renamed to its final name (atomic on POSIX) and ``root`` fsynced. A process
killed at any moment leaves either the complete new checkpoint or none of it, beside a stale
temporary directory that the next save removes; older checkpoints are deleted only after the
new one is in place (and renamed out of the ``step_*`` namespace before being removed), so the
previous one always survives and a half-deleted one is never mistaken for a checkpoint. Only
directories named ``step_*`` are ever loaded. One writer per ``root``. Saving step s deletes
checkpoints of steps after s (left by a run that was resumed from an earlier one), so "latest"
is always this run's.

Files are read with ``torch.load(weights_only=True)``: a checkpoint cannot run code on load.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

STEP_DIR = re.compile(r"^step_(\d{8})$")
TEMP_PREFIX = ".tmp-"


class CheckpointError(RuntimeError):
    """A checkpoint is missing, or does not fit the model it is loaded into."""


@dataclass(frozen=True)
class TrainingState:
    """What a loaded checkpoint tells the trainer beyond the restored objects."""

    step: int
    """The number of completed steps when it was written; training resumes at this index."""
    data_position: dict[str, Any]
    """The caller's data position, as saved."""


def step_dir_name(step: int) -> str:
    return f"step_{step:08d}"


def save_checkpoint(
    root: str | Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    data_position: dict[str, Any],
    keep_last: int = 2,
) -> Path:
    """Write the checkpoint of ``step`` atomically; keep the newest ``keep_last``; return its path."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(root)
    final = root / step_dir_name(step)
    temp = root / f"{TEMP_PREFIX}{final.name}-{os.getpid()}"
    temp.mkdir()
    write_durably(temp / "model.pt", trainable_state(model))
    write_durably(temp / "optimizer.pt", optimizer.state_dict())
    write_durably(temp / "scheduler.pt", scheduler.state_dict())
    write_durably(temp / "rng.pt", rng_state())
    write_durably(temp / "state.json", {"step": step, "data_position": data_position})
    fsync_directory(temp)
    replace_directory(temp, final)
    fsync_directory(root)
    prune(root, step, keep_last)
    return final


def load_checkpoint(
    path: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    restore_rng: bool = True,
) -> TrainingState:
    """Restore ``model`` (and ``optimizer``/``scheduler``/RNGs unless None/False) from a
    ``step_*`` directory. Leaving the optimizer out starts it afresh (stage 3's reset)."""
    path = Path(path)
    if not (path / "state.json").is_file():
        raise CheckpointError(f"{path} is not a complete checkpoint (no state.json)")
    load_trainable_state(model, read(path / "model.pt"), path)
    if optimizer is not None:
        optimizer.load_state_dict(read(path / "optimizer.pt"))
    if scheduler is not None:
        scheduler.load_state_dict(read(path / "scheduler.pt"))
    if restore_rng:
        set_rng_state(read(path / "rng.pt"))
    state = json.loads((path / "state.json").read_text())
    return TrainingState(step=state["step"], data_position=state["data_position"])


def latest_checkpoint(root: str | Path) -> Path | None:
    """The newest complete checkpoint under ``root``, or None."""
    root = Path(root)
    if not root.is_dir():
        return None
    complete = [p for p in root.iterdir() if STEP_DIR.match(p.name) and (p / "state.json").is_file()]
    return max(complete, key=lambda p: p.name, default=None)


def resolve_checkpoint(path: str | Path) -> Path:
    """``path`` itself if it is a checkpoint, else the latest checkpoint under it."""
    path = Path(path)
    if (path / "state.json").is_file():
        return path
    latest = latest_checkpoint(path)
    if latest is None:
        raise CheckpointError(f"no checkpoint at or under {path}")
    return latest


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The parameters that training changes, by name (each shared tensor once)."""
    return {name: p.detach() for name, p in model.named_parameters() if p.requires_grad}


def load_trainable_state(model: torch.nn.Module, saved: dict[str, torch.Tensor], path: Path) -> None:
    """Copy saved trainable parameters into ``model``; every trainable one must be there."""
    wanted = set(trainable_state(model))
    missing, unexpected = wanted - saved.keys(), saved.keys() - wanted
    if missing or unexpected:
        raise CheckpointError(
            f"{path} does not fit this model: {len(missing)} trainable parameters missing "
            f"(e.g. {sorted(missing)[:3]}), {len(unexpected)} unknown (e.g. {sorted(unexpected)[:3]}); "
            "was it written with the same model and LoRA settings?"
        )
    model.load_state_dict(saved, strict=False)


def rng_state() -> dict[str, Any]:
    name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (name, keys.tolist(), position, has_gauss, cached_gaussian),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    name, keys, position, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), position, has_gauss, cached_gaussian))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def write_durably(path: Path, payload: Any) -> None:
    """Write a file (JSON for .json, torch.save otherwise) and fsync it."""
    with open(path, "wb") as f:
        if path.suffix == ".json":
            f.write(json.dumps(payload).encode())
        else:
            torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())


def read(path: Path) -> Any:
    return torch.load(path, map_location="cpu", weights_only=True)


def fsync_directory(path: Path) -> None:
    """Make a directory's entries (new files, renames) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_directory(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target``; an existing ``target`` (a re-run of the same step) is
    moved aside first and deleted after, so a checkpoint of that step is on disk throughout
    except between two renames."""
    if not target.exists():
        source.rename(target)
        return
    aside = target.with_name(f"{TEMP_PREFIX}old-{target.name}-{os.getpid()}")
    target.rename(aside)
    source.rename(target)
    shutil.rmtree(aside)


def remove_stale_temporaries(root: Path) -> None:
    """Delete what killed writers left behind (never a ``step_*`` directory)."""
    for path in root.iterdir():
        if path.name.startswith(TEMP_PREFIX):
            shutil.rmtree(path, ignore_errors=True)


def prune(root: Path, step: int, keep_last: int) -> None:
    """Keep the ``keep_last`` newest checkpoints up to ``step``, the one just written. Any of a
    later step belongs to a future this run abandoned by resuming from an earlier checkpoint;
    it goes too, so that resuming again continues this run and not that one."""
    complete = sorted(p for p in root.iterdir() if STEP_DIR.match(p.name))
    current = [p for p in complete if p.name <= step_dir_name(step)]
    abandoned = [p for p in complete if p.name > step_dir_name(step)]
    for old in current[:-keep_last] + abandoned:
        delete_directory(old)


def delete_directory(path: Path) -> None:
    """Rename out of the ``step_*`` namespace first, so a half-deleted checkpoint is never loaded."""
    doomed = path.with_name(f"{TEMP_PREFIX}del-{path.name}-{os.getpid()}")
    path.rename(doomed)
    shutil.rmtree(doomed)
