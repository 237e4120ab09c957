"""`rstar2 sandbox serve`: the code environment service."""

from __future__ import annotations

import os

import typer

from rstar2.cli.app import command_group
from rstar2.cli.options import DrainTimeout, MaxRequestMb, ReadTimeout
from rstar2.service import READ_TIMEOUT_S

sandbox_app = command_group("sandbox", "The isolated Python execution service used for tool calls.",
                            no_args_is_help=True)


@sandbox_app.command()
def serve(
    host: str = typer.Option("127.0.0.1", metavar="ADDRESS", help="Address to listen on. Keep it private: never expose the service."),
    port: int = typer.Option(8070, metavar="PORT", help="Port to listen on."),
    workers: int = typer.Option(2 * (os.cpu_count() or 1), min=1, max=1024, metavar="N",
                                help="Warm worker processes, each running one call at a time. Default: twice "
                                     "the CPU count, so calls waiting on I/O do not idle the cores."),
    timeout_s: float = typer.Option(4.0, "--timeout-s", min=0.01, metavar="SECONDS", help="Default wall-clock deadline per call, seconds."),
    max_timeout_s: float = typer.Option(60.0, "--max-timeout-s", min=0.01, metavar="SECONDS",
                                        help="Largest deadline a request may ask for."),
    memory_mb: int = typer.Option(1024, "--memory-mb", min=64, metavar="MIB", help="Address-space limit per call, MiB."),
    max_procs: int = typer.Option(64, "--max-procs", min=1, metavar="N", help="Processes per call (fork-bomb bound)."),
    output_kb: int = typer.Option(64, "--output-kb", min=1, metavar="KIB", help="stdout/stderr kept per call, KiB; the rest is cut with a marker."),
    queue_size: int = typer.Option(16384, "--queue-size", min=1, metavar="N",
                                   help="Calls that may wait for a worker; beyond it the service answers 503."),
    unsafe_no_isolation: bool = typer.Option(False, "--unsafe-no-isolation",
                                             help="Run code WITHOUT bubblewrap (no namespaces): only for trusted code."),
    max_request_mb: MaxRequestMb = 8.0,
    drain_timeout_s: DrainTimeout = 10.0,
    read_timeout_s: ReadTimeout = READ_TIMEOUT_S,
) -> None:
    """Start the sandbox service: POST /run, POST /run_batch, GET /health, GET /metrics, /docs.

    Every call runs in a fresh process forked from a warm worker (sympy and numpy already
    imported), inside bubblewrap (no network, private PID/IPC/tmp, read-only system) with
    rlimits and a deadline that kills the call's whole process tree.
    """
    from rstar2.sandbox.pool import PoolConfig
    from rstar2.sandbox.server import serve as serve_forever
    from rstar2.sandbox.worker.limits import WorkerLimits

    limits = WorkerLimits(memory_mb=memory_mb, max_procs=max_procs, output_cap=output_kb * 1024)
    config = PoolConfig(
        workers=workers,
        default_timeout_s=timeout_s,
        max_timeout_s=max(max_timeout_s, timeout_s),
        queue_size=queue_size,
        isolated=not unsafe_no_isolation,
        port=port,
        limits=limits,
        max_request_mb=max_request_mb,
        drain_timeout_s=drain_timeout_s,
        read_timeout_s=read_timeout_s,
    )
    serve_forever(config, host=host)
