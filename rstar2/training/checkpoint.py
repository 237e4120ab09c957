"""Atomic, resumable training checkpoints.

    save_checkpoint(root, step, model, optimizer, scheduler, data_position, keep_last=2)
    writer = CheckpointWriter(root, keep_last=2)     # the same, written on a background thread
    writer.submit(step, model, optimizer, scheduler, data_position); ...; writer.wait()
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

Writing in the background: serialising the weights and AdamW's moments (four bytes times three
per parameter) costs seconds, which on a GPU is as long as a step. ``CheckpointWriter`` copies
the state to the CPU at once (a snapshot: the next update may change the live tensors) and
writes it on one thread while training goes on; the next ``submit`` and ``wait`` first finish
the write in flight and raise its error, if any. A crash while a write is in flight loses at
most that checkpoint, which atomicity already allows for: the previous one is complete.

Files are read with ``torch.load(weights_only=True)``: a checkpoint cannot run code on load.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rstar2.errors import Rstar2Error

STEP_DIR = re.compile(r"^step_(\d{8})$")
TEMP_PREFIX = ".tmp-"


class CheckpointError(Rstar2Error, RuntimeError):
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
    files = checkpoint_files(step, model, optimizer, scheduler, data_position)
    return write_checkpoint(root, step, files, keep_last)


def checkpoint_files(step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                     scheduler: torch.optim.lr_scheduler.LRScheduler,
                     data_position: dict[str, Any]) -> dict[str, Any]:
    """What each file of the checkpoint holds, by file name (the live tensors, not copies)."""
    return {"model.pt": trainable_state(model), "optimizer.pt": optimizer.state_dict(),
            "scheduler.pt": scheduler.state_dict(), "rng.pt": rng_state(),
            "state.json": {"step": step, "data_position": data_position}}


def write_checkpoint(root: str | Path, step: int, files: dict[str, Any], keep_last: int,
                     fill: Callable[[Path], None] | None = None) -> Path:
    """Write ``files`` as the checkpoint of ``step`` (module docstring: atomicity, retention);
    ``fill``, if given, first writes more files into the temporary directory (a sharded
    learner's ranks write their shards there)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(root)
    final = root / step_dir_name(step)
    temp = root / f"{TEMP_PREFIX}{final.name}-{os.getpid()}"
    temp.mkdir()
    if fill is not None:
        fill(temp)
    for name, payload in files.items():
        write_durably(temp / name, payload)
    fsync_directory(temp)
    replace_directory(temp, final)
    fsync_directory(root)
    prune(root, step, keep_last)
    return final


class CheckpointWriter:
    """Checkpoints written on a background thread from a CPU snapshot (module docstring)."""

    def __init__(self, root: str | Path, keep_last: int = 2):
        self.root, self.keep_last = Path(root), keep_last
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        self.pending: Future | None = None

    def submit(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               scheduler: torch.optim.lr_scheduler.LRScheduler, data_position: dict[str, Any]) -> Path:
        """Snapshot the state now and write it in the background; the checkpoint's path."""
        self.wait()
        files = cpu_copy(checkpoint_files(step, model, optimizer, scheduler, data_position))
        self.pending = self.executor.submit(write_checkpoint, self.root, step, files, self.keep_last)
        return self.root / step_dir_name(step)

    def wait(self) -> None:
        """Block until the write in flight (if any) is on disk; raise its error."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result()


def cpu_copy(value: Any) -> Any:
    """``value`` with every tensor in it copied to the CPU (containers rebuilt, the rest shared:
    the schedule's and data position's plain values are not changed in place by training)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: cpu_copy(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(cpu_copy(item) for item in value)
    return value


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


class RunExists(Rstar2Error, RuntimeError):
    """The run folder holds another run's checkpoints and ``resume`` was not asked for."""


def check_run_dir(run_dir: Path, resume: bool) -> None:
    """Refuse to start a new run over a folder with checkpoints unless it is resumed (``rstar2
    train`` and ``rstar2 sft`` alike), before anything is written."""
    if not resume and latest_checkpoint(run_dir / "checkpoints") is not None:
        raise RunExists(f"{run_dir} already holds checkpoints: pass --resume to continue "
                        "that run, or --name to start another")


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
