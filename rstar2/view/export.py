"""``rstar2 view --export out.html RUN_DIR``: one self-contained HTML file of a run's curves and
one step's rollouts, to attach to an issue or a paper.

The file is the viewer's own page with its CSS and scripts inlined and, in
``window.RSTAR2_DATA``, the answers the page would have asked the server for (keyed by the same
URLs), so the page runs unchanged from disk: no server, nothing fetched.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from rstar2.view.runs import RunFolder, ViewError
from rstar2.view.server import static_files

ASSET = re.compile(r'<link rel="stylesheet" href="static/([\w.]+)">|<script src="static/([\w.]+)"></script>')


def export_data(run: RunFolder, step: int | None) -> dict:
    """The API answers for the run's curves and for every rollout of ``step`` (default: the
    last step with rollouts logged)."""
    if run.problems():
        raise ViewError(run.problems()[0], 422)
    steps = run.steps()
    if step is None and steps:
        step = steps[-1]
    described = {**run.describe(), "steps": [step] if step is not None else [], "evals": []}
    data: dict = {"/api/runs": [described], f"/api/runs/{run.run_id}/metrics": run.metrics(), "step": step}
    if step is not None:
        listing = run.rollouts(step)
        data[f"/api/runs/{run.run_id}/steps/{step}"] = listing
        for summary in listing["rollouts"]:
            line = summary["index"]
            data[f"/api/runs/{run.run_id}/steps/{step}/rollouts/{line}"] = run.rollout(step, line)
    return data


def script_json(value) -> str:
    """JSON that cannot end the <script> element it sits in."""
    return json.dumps(value, ensure_ascii=False).replace("</", "<\\/")


def export_html(run_dir: Path, out: Path, step: int | None = None) -> Path:
    """Write the self-contained page of ``run_dir`` to ``out``; see the module docstring."""
    files = static_files()
    data = export_data(RunFolder(run_dir, 0), step)

    def inline(match: re.Match) -> str:
        css, js = match.groups()
        if css:
            return f"<style>\n{files[css].read_text(encoding='utf-8')}</style>"
        return f"<script>\n{files[js].read_text(encoding='utf-8')}</script>"

    page = files["index.html"].read_text(encoding="utf-8")
    page = page.replace("<script src=\"static/chart.js\">",
                        f"<script>window.RSTAR2_DATA = {script_json(data)};</script>\n<script src=\"static/chart.js\">", 1)
    page = ASSET.sub(inline, page)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
