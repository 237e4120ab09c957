"""The viewer's HTTP side: a FastAPI app over the run folders it was given, and nothing else.

    app = create_app([Path("runs/cpu-demo"), Path("runs/eval/aime")])
    uvicorn.run(app, host="127.0.0.1", port=8071)

The page (``static/``, served from the package: no CDN) asks the JSON API below; every answer
is computed from the run folders when asked, so a run that is still writing shows its new
lines on the page's next poll. Runs are addressed by their position in the list, steps by
number, eval runs and problems by name in the query string: a request never carries a path,
and every file is opened below its run folder without following links (``confined``), so
nothing outside the run folders can be served, even while names in them are being swapped. Failures answer the services' one error shape (``rstar2.service``:
``{"error": {"message", "type", "code"}}``) with a 4xx/5xx status, the message one line for the
page to show, never a traceback.

    GET /health                                       the viewer is up; how many runs it serves
    GET /api/runs                                     the runs, their steps, evals and problems
    GET /api/runs/{run}/metrics                       rows of metrics.jsonl
    GET /api/runs/{run}/steps/{step}                  rollout summaries and groups of a step
    GET /api/runs/{run}/steps/{step}/rollouts/{line}  one whole rollout
    GET /api/runs/{run}/steps/{step}/search?q=        lines whose text contains q
    GET /api/runs/{run}/eval?name=                    an eval run's results document
    GET /api/runs/{run}/eval/samples?name=&bench=&problem=   a problem's n samples
    GET /api/compare?a=&a_name=&b=&b_name=            two eval runs, as `rstar2 eval compare`
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from rstar2.eval.compare import compare_runs
from rstar2.service import READ_TIMEOUT_S, error_response, guard
from rstar2.view.runs import RunFolder, ViewError

MAX_REQUEST_BYTES = 64 << 10  # the page only asks with GET: no request needs a body

STATIC_DIR = Path(__file__).resolve().parent / "static"


def static_files() -> dict[str, Path]:
    """The page's files by name: the only files the server reads outside the run folders."""
    return {path.name: path for path in STATIC_DIR.iterdir() if path.is_file()}


def create_app(run_dirs: Sequence[Path], read_timeout_s: float = READ_TIMEOUT_S) -> FastAPI:
    runs = [RunFolder(Path(path), run_id) for run_id, path in enumerate(run_dirs)]
    files = static_files()
    app = guard(FastAPI(title="rstar2 view", docs_url=None, redoc_url=None, openapi_url=None),
                max_body_bytes=MAX_REQUEST_BYTES, read_timeout_s=read_timeout_s)

    def run_of(run_id: int) -> RunFolder:
        if not 0 <= run_id < len(runs):
            raise ViewError(f"no run {run_id}: the viewer was given {len(runs)} run folder(s)")
        return runs[run_id]

    @app.exception_handler(OSError)
    async def os_error(_request: Request, error: OSError) -> JSONResponse:
        where = f"{error.filename}: " if error.filename else ""
        return error_response(500, f"{where}{error.strerror or error}")

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "runs": len(runs)}

    @app.get("/", response_class=HTMLResponse)
    def page() -> FileResponse:
        return FileResponse(files["index.html"])

    @app.get("/static/{name}")
    def static(name: str) -> FileResponse:
        if name not in files:
            raise ViewError(f"no page file named {name!r}")
        return FileResponse(files[name])

    @app.get("/api/runs")
    def list_runs() -> list[dict]:
        return [run.describe() for run in runs]

    @app.get("/api/runs/{run_id}/metrics")
    def metrics(run_id: int) -> dict:
        return run_of(run_id).metrics()

    @app.get("/api/runs/{run_id}/steps/{step}")
    def step_rollouts(run_id: int, step: int) -> dict:
        return run_of(run_id).rollouts(step)

    @app.get("/api/runs/{run_id}/steps/{step}/rollouts/{line}")
    def rollout(run_id: int, step: int, line: int) -> dict:
        return run_of(run_id).rollout(step, line)

    @app.get("/api/runs/{run_id}/steps/{step}/search")
    def search(run_id: int, step: int, q: str) -> dict:
        return {"lines": run_of(run_id).search(step, q)}

    @app.get("/api/runs/{run_id}/eval")
    def eval_results(run_id: int, name: str) -> dict:
        return run_of(run_id).eval_folder(name).results()

    @app.get("/api/runs/{run_id}/eval/samples")
    def eval_samples(run_id: int, name: str, bench: str, problem: str) -> dict:
        return run_of(run_id).eval_folder(name).problem_samples(bench, problem)

    @app.get("/api/compare")
    def compare(a: int, a_name: str, b: int, b_name: str) -> dict:
        first, second = run_of(a).eval_folder(a_name), run_of(b).eval_folder(b_name)
        labels = (f"{run_of(a).path.name}/{a_name}", f"{run_of(b).path.name}/{b_name}")
        return {"markdown": compare_runs(first.results(), second.results(), labels=labels)}

    return app
