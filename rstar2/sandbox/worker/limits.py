"""The limits of one sandbox call, declared once: the service builds them from its options,
hands them to every worker as one JSON argument, and the worker applies them to each call.

This module imports nothing but the standard library: it is read by the service (as
``rstar2.sandbox.worker.limits``) and inside the sandbox (as ``worker.limits``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class WorkerLimits:
    """Per-call limits (the rlimits a call's process gets, its private /tmp, its output)."""

    memory_mb: int = 1024  # address space on top of what the warm worker already holds
    max_procs: int = 64  # processes of the call's uid (fork-bomb bound)
    max_files: int = 256  # open files
    file_mb: int = 64  # largest file the call may write
    tmp_mb: int = 256  # size of the private /tmp (bubblewrap's tmpfs)
    output_cap: int = 65536  # bytes of stdout and of stderr kept; the rest is cut with a marker

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerLimits:
        return cls(**json.loads(text))
