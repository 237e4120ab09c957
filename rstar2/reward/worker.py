"""The worker process of `rstar2.reward.pool`: `python -m rstar2.reward.worker FD FUNCTION ...`.

Contract: the process talks over the socket whose descriptor it is given. It imports
`FUNCTION` (`package.module:function`), caps its address space at `MEMORY_MB` (0: no cap),
calls the function once on the JSON `WARMUP` arguments, sends `"ready"`, then answers each
argument tuple it receives with `(value, None)` or `(None, error text)` until the socket
closes. It writes nothing to stdout (which is the parent's).
"""

import importlib
import json
import resource
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection

from rstar2.reward.pool import READY

_ERROR_TEXT_LIMIT = 300


def resolve(function_path: str) -> Callable:
    """The function named `package.module:function`."""
    module_name, _, name = function_path.partition(":")
    return getattr(importlib.import_module(module_name), name)


def limit_memory(megabytes: int) -> None:
    """Cap this process's address space, so runaway allocations raise MemoryError."""
    if megabytes:
        limit = megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def serve(connection: Connection, function: Callable) -> None:
    """Apply `function` to each argument tuple received and send back the result."""
    while True:
        try:
            arguments = connection.recv()
        except EOFError:
            return
        try:
            connection.send((function(*arguments), None))
        except Exception as exc:  # noqa: BLE001  (the error is the result, for the caller)
            connection.send((None, f"{type(exc).__name__}: {exc}"[:_ERROR_TEXT_LIMIT]))


def main(argv: list[str]) -> None:
    descriptor, function_path, warmup_json, memory_mb = argv
    connection = Connection(int(descriptor))
    function = resolve(function_path)
    limit_memory(int(memory_mb))
    function(*json.loads(warmup_json))
    connection.send(READY)
    serve(connection, function)


if __name__ == "__main__":
    main(sys.argv[1:])
