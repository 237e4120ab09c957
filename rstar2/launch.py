"""The ``rstar2`` command's process: started with tcmalloc as its allocator where the machine has it.

PyTorch on a CPU allocates and frees large tensors at every step: an update's logits chunks
(256 x 49,152 floats), the embedding's gradient, autocast's bfloat16 copies of the weights, tens
to hundreds of MB each. glibc's malloc serves a block above its mmap threshold (64 MiB as the
command sets it: ``rstar2.models.memory``) with fresh pages of the kernel and unmaps it when it
is freed, so each such tensor is faulted in again, page by page, every time. tcmalloc keeps
freed pages for reuse, as PyTorch's CPU performance guide recommends: two RL steps of the demo
took 11% less time, with half the page faults and a lower peak RSS (docs/benchmarks.md). It
must be loaded before anything allocates, so the command starts itself again, once, with the
library in ``LD_PRELOAD`` when

* the system's linker knows ``libtcmalloc_minimal`` (Debian's ``libtcmalloc-minimal4``, which
  ``scripts/setup.sh`` installs where it may),
* ``LD_PRELOAD`` does not already name a tcmalloc (the restarted process, or a user's choice),
* and ``RSTAR2_ALLOCATOR`` is not ``system`` (the opt-out: glibc's malloc, as before).

Anything else, or an ``exec`` that fails, runs the command as it is.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections.abc import Callable, Mapping

OPT_OUT = "RSTAR2_ALLOCATOR"
LIBRARY = "tcmalloc_minimal"


def preload_env(environ: Mapping[str, str], platform: str = sys.platform,
                find: Callable[[str], str | None] = ctypes.util.find_library) -> dict[str, str] | None:
    """The environment to restart the command in (tcmalloc added to ``LD_PRELOAD``), or None to
    run it as it is (module docstring)."""
    if not platform.startswith("linux") or environ.get(OPT_OUT, "").lower() == "system":
        return None
    preloaded = environ.get("LD_PRELOAD", "")
    if "tcmalloc" in preloaded:
        return None
    library = find(LIBRARY)
    if library is None:
        return None
    return dict(environ, LD_PRELOAD=f"{library} {preloaded}".strip())


def main() -> None:
    """The ``rstar2`` console script and ``python -m rstar2``."""
    env = preload_env(os.environ)
    if env is not None:
        # the same program again: the console script (so usage lines still say ``rstar2``),
        # or ``-m rstar2``
        program = ["-m", "rstar2"] if sys.argv[0].endswith("__main__.py") else [sys.argv[0]]
        try:
            os.execve(sys.executable, [sys.executable, *program, *sys.argv[1:]], env)
        except OSError:
            pass  # run as it is
    from rstar2.cli import main as run_command

    run_command()
