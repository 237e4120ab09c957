"""Fixtures of the viewer's tests: a real run folder, a running `rstar2 view`, a real browser.

The run folder is written by the project's own writers from real rollouts (see
``benchmarks/view_bench.py``): three steps of two groups (one used by RoC, one dropped), with
scripted traces played through the real agent loop and sandbox (one fixes a failing tool
call, some answer wrong), plus two eval
runs under ``eval/``, as the demo's folder has.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import shutil
from pathlib import Path

import pytest

from benchmarks.view_bench import (
    CHROMIUM,
    CHROMIUM_ARGS,
    Viewer,
    demo_tasks,
    sample_problems,
    write_eval_run,
    write_training_run,
)
from rstar2.models.loading import load_tokenizer
from rstar2.reward import Grader
from rstar2.sandbox import SandboxClient

STEPS = 3
TASKS = 4
SHOTS = Path(os.environ.get("RSTAR2_VIEW_SCREENSHOTS", Path(__file__).resolve().parents[2] / "runs" / "view-screenshots"))


@pytest.fixture(scope="session")
def view_tokenizer():
    return load_tokenizer("default")


@pytest.fixture(scope="session")
def rollout_pool(view_tokenizer, sandbox_url):
    async def sample():
        async with SandboxClient([sandbox_url]) as sandbox:
            return await sample_problems(demo_tasks(TASKS), view_tokenizer, sandbox)
    return off_the_loop(asyncio.run, sample())


@pytest.fixture(scope="session")
def run_folder(tmp_path_factory, rollout_pool, view_tokenizer) -> Path:
    folder = tmp_path_factory.mktemp("view") / "demo-like"
    with Grader(workers=1) as grader:
        write_training_run(folder, rollout_pool, STEPS, groups_per_step=2, grader=grader,
                           tokenizer=view_tokenizer, logged_groups=2)
        for phase in ("base", "final"):
            off_the_loop(write_eval_run, folder / "eval" / phase, demo_tasks(TASKS), rollout_pool, grader)
    return folder


def file_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_rows(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def served_rows(rows: list[dict]) -> list[dict]:
    """The rows of a step file as the viewer serves them: each with its group's prompt and
    special tokens, which the file holds on the group's first row only."""
    shared: dict = {}
    for row in rows:
        if "prompt" in row:
            shared.setdefault(row["group"], {key: row[key] for key in ("prompt", "special_tokens")})
    return [{**shared.get(row["group"], {}), **row} for row in rows]


def off_the_loop(function, *args):
    """Call ``function`` in a thread of its own: Playwright's sync API keeps an event loop
    running in the test's thread, where ``asyncio.run`` refuses to start another."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(function, *args).result()


@pytest.fixture
def run_copy(run_folder, tmp_path) -> Path:
    """A copy of the run folder a test may change."""
    return Path(shutil.copytree(run_folder, tmp_path / "copy"))


@pytest.fixture
def viewer():
    started: list[Viewer] = []

    def start(*folders: Path) -> Viewer:
        started.append(Viewer(list(folders)))
        return started[-1]

    yield start
    for one in started:
        one.close()


@pytest.fixture(scope="module")
def browser():
    """Chromium, for one test module: while Playwright's sync API is open it keeps an event
    loop running in this thread, and later tests elsewhere must be able to ``asyncio.run``."""
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"{CHROMIUM} not found: install Debian's chromium (scripts/setup.sh does, as root)")
    playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    yield page
    context.close()


def screenshot(page, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
