"""What every call of one worker needs, made once when the worker starts (``__main__.start``)
and never changed after: each call's child is forked from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

from .limits import WorkerLimits


@dataclass(frozen=True)
class WorkerState:
    """The worker's fixed state; see the module docstring."""

    limits: WorkerLimits
    uid: int | None  # calls run as this uid (the service runs as root); None: as the worker
    tmp_root: str  # the private /tmp inside bubblewrap, a fresh temporary directory unsafe
    tmp_keep: frozenset[str]  # entries of tmp_root from before any call (mounts): never wiped
    call_dir: str  # each call's fresh, empty working directory (made and removed per call)
    warm_bytes: int  # the warm worker's address space: a call's memory limit comes on top
    control_fds: tuple[int, int]  # the pipes to the service, closed in every child
    call_streams: tuple[TextIO, TextIO, TextIO]  # text stdin, stdout, stderr over fds 0-2
