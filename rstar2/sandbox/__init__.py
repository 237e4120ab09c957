"""Isolated, high-throughput execution of model-written Python (the code environment service).

* ``SandboxClient`` -- async client: batching, concurrency limit, several servers, loud failure;
* ``local_sandbox`` -- start a service on this machine for a ``with`` block;
* ``RunRequest`` / ``RunResult`` -- the wire types (``protocol``);
* the service itself: ``server`` (HTTP), ``pool`` (warm workers), ``worker`` (one call per
  fork), ``isolation`` (bubblewrap and limits). Imports without torch.
"""

from rstar2.sandbox.client import SandboxClient, SandboxError, SandboxUnavailable
from rstar2.sandbox.local import local_sandbox
from rstar2.sandbox.protocol import RunRequest, RunResult

__all__ = [
    "RunRequest",
    "RunResult",
    "SandboxClient",
    "SandboxError",
    "SandboxUnavailable",
    "local_sandbox",
]
