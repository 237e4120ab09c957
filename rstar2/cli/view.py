"""`rstar2 view`: see runs in the browser, or export one as a single HTML file."""

from pathlib import Path

import typer

from rstar2.cli.app import app, fail
from rstar2.cli.options import ReadTimeout
from rstar2.service import READ_TIMEOUT_S

DRAIN_TIMEOUT_S = 5.0  # on Ctrl-C or SIGTERM: the page's requests are quick


@app.command()
def view(
    run_dirs: list[Path] = typer.Argument(..., metavar="RUN_DIR...", help="Run folders: training runs (runs/<name>/), eval runs "
                                          "(runs/eval/<...>/) or the demo's folder. Several overlay their curves."),
    port: int = typer.Option(8071, "--port", min=1, max=65535, metavar="PORT", help="Port of the page."),
    host: str = typer.Option("127.0.0.1", "--host", metavar="ADDRESS", help="Address to bind. The default serves this machine "
                             "only; 0.0.0.0 exposes the runs to the network."),
    export: Path = typer.Option(None, "--export", metavar="FILE", help="Write one self-contained HTML file of the run's curves "
                                "and one step's rollouts to this path instead of serving."),
    step: int = typer.Option(None, "--step", min=1, metavar="N", help="With --export: the step whose rollouts go in the file. "
                             "Default: the last step with rollouts logged."),
    read_timeout_s: ReadTimeout = READ_TIMEOUT_S,
) -> None:
    """Serve a page of curves, rollouts (with RoC's verdicts and per-token log-probs), eval
    drill-downs and step timelines for RUN_DIRs; it picks up new lines while a run writes.

    Reads only the run folders given (plus an index it caches in each, under .view-index/);
    links inside a run folder are not followed (left out with a warning). GET /health answers
    while it serves.
    """
    missing = [str(path) for path in run_dirs if not path.is_dir()]
    if missing:
        fail(f"no such folder: {', '.join(missing)}")
    if export is not None:
        from rstar2.view.export import export_html

        if len(run_dirs) != 1:
            fail("--export writes one run; give exactly one RUN_DIR")
        out = export_html(run_dirs[0], export, step)
        typer.echo(f"wrote {out}")
        return
    from rstar2.service import run_service
    from rstar2.view.server import create_app

    typer.echo(f"rstar2 view: http://{host}:{port}/  (Ctrl-C to stop)")
    run_service(create_app(run_dirs, read_timeout_s), host, port, drain_timeout_s=DRAIN_TIMEOUT_S)
