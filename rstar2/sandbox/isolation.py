"""How a sandbox worker process is started: inside bubblewrap, or (explicitly unsafe) bare.

What bubblewrap gives each worker, and so every call it runs:

* its own PID namespace, with the worker as PID 1: a call sees only its own processes in
  ``/proc``, cannot signal the service or other workers, and dies with the worker;
* no network (a private network namespace with only a loopback of its own), private IPC
  and UTS namespaces;
* a read-only view of the system (``/usr``) and of the Python installation, nothing else
  of the host: not the project, not the service's files, not ``/home`` or ``/root``;
* a private, size-limited, writable ``/tmp`` that the worker wipes after every call;
* no environment variables of the service (``--clearenv``);
* ``--die-with-parent``: workers die with the service.

When the service runs as root, each worker gets a distinct unprivileged uid for its calls,
so per-uid limits (processes) count per call and calls cannot touch each other's files;
as an ordinary user bubblewrap uses a user namespace and calls run under the user's uid.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from rstar2.errors import Rstar2Error
from rstar2.sandbox.worker.limits import WorkerLimits

WORKER_PACKAGE = Path(__file__).with_name("worker")  # run as `python -m worker` from its parent
WORKER_PATH_INSIDE = "/opt/rstar2/worker"
# glibc malloc with transparent huge pages makes the warm worker's heap a few dozen huge
# pages instead of thousands of small ones, which makes fork + exit of a call cheaper.
WORKER_ENV = {"PATH": "/usr/bin:/bin", "PYTHONMALLOC": "malloc", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
ROOT_CAPABILITIES = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER")
SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives")


class IsolationUnavailable(Rstar2Error, RuntimeError):
    """bubblewrap is missing or cannot create namespaces here."""


def python_paths() -> list[str]:
    """Directories the worker's Python needs, outside /usr (venvs, pyenv, conda)."""
    candidates = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        *(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")),
    }
    real = sorted({os.path.realpath(p) for p in candidates if os.path.exists(p)} | candidates)
    outside = [p for p in real if os.path.exists(p) and not p.startswith("/usr/")]
    # Keep only top-most directories: binding a parent already exposes its children.
    return [p for p in outside if not any(p != q and p.startswith(q + "/") for q in outside)]


def ancestors(paths: list[str]) -> list[str]:
    """Every proper ancestor directory of the paths, parents first ("/" excluded)."""
    found = {str(parent) for path in paths for parent in Path(path).parents if str(parent) != "/"}
    return sorted(found, key=lambda p: (p.count("/"), p))


def system_mounts() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in SYSTEM_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for path in ETC_FILES:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


def bwrap_command(limits: WorkerLimits) -> list[str]:
    """The bubblewrap prefix that isolates one worker (see the module docstring)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise IsolationUnavailable(
            "bubblewrap (bwrap) is not installed, so the sandbox cannot isolate code. "
            "Install it with `apt-get install bubblewrap` (or run `bash scripts/setup.sh`), "
            "or pass --unsafe-no-isolation to run model code unisolated on this machine."
        )
    args = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    args += ["--unshare-cgroup-try", "--die-with-parent", "--new-session", "--as-pid-1"]
    args += ["--clearenv", "--hostname", "sandbox"]
    for name, value in WORKER_ENV.items():
        args += ["--setenv", name, value]
    args += system_mounts()
    # The private /tmp first: a Python installed under /tmp (a venv in a CI checkout) is then
    # mounted on top of it rather than hidden by it.
    args += ["--size", str(limits.tmp_mb * 1024 * 1024), "--tmpfs", "/tmp"]
    python = python_paths()
    for parent in ancestors(python + [WORKER_PATH_INSIDE]):
        args += ["--perms", "0755", "--dir", parent]  # bwrap would make them 0700: untraversable
    for path in python:
        args += ["--ro-bind", path, path]
    args += ["--ro-bind", str(WORKER_PACKAGE), WORKER_PATH_INSIDE]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--chdir", os.path.dirname(WORKER_PATH_INSIDE)]  # where `-m worker` finds it
    if os.geteuid() == 0:
        args += ["--cap-drop", "ALL"]
        for cap in ROOT_CAPABILITIES:
            args += ["--cap-add", cap]
    else:
        args += ["--unshare-user", "--disable-userns"]
    return args


def worker_command(limits: WorkerLimits, uid: int | None, isolated: bool) -> list[str]:
    """argv that starts one warm worker, to run in ``worker_directory(isolated)``."""
    argv = [sys.executable, "-s", "-B", "-m", WORKER_PACKAGE.name]  # not -I: it would ignore PYTHONMALLOC
    argv += ["--limits", limits.to_json()]
    if uid is not None:
        argv += ["--uid", str(uid)]
    return (bwrap_command(limits) + argv) if isolated else argv


def worker_directory(isolated: bool) -> str | None:
    """The directory a worker is started in: the worker package's parent, where ``-m worker``
    finds it (bubblewrap changes to its mount point itself)."""
    return None if isolated else str(WORKER_PACKAGE.parent)


def check_isolation(limits: WorkerLimits) -> None:
    """Fail loudly, with bubblewrap's own words, if namespaces cannot be created here."""
    probe = bwrap_command(limits) + [sys.executable, "-I", "-c", "pass"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise IsolationUnavailable(
            f"bubblewrap cannot create a sandbox on this machine: {done.stderr.strip()}. "
            "Unprivileged user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone=1), "
            "or run the service as root; --unsafe-no-isolation runs code unisolated."
        )


def call_uids(port: int, workers: int) -> list[int | None]:
    """One unprivileged uid per worker when running as root, distinct across services on a host."""
    if os.geteuid() != 0:
        return [None] * workers
    base = 100_000 + (port % 65536) * 1024
    return [base + index for index in range(workers)]
