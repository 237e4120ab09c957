"""`rstar2 view` in a real browser (Debian's chromium through Playwright) over a real run folder.

Screenshots land in runs/view-screenshots/ (RSTAR2_VIEW_SCREENSHOTS overrides).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from benchmarks.view_bench import write_training_run
from rstar2.reward import Grader
from tests.view.conftest import STEPS, file_rows, screenshot

READY = "body[data-ready]"


def open_page(page, viewer, *folders):
    server = viewer(*folders)
    page.goto(server.url)
    page.wait_for_selector(READY, timeout=30_000)
    return server


def test_curves_have_one_point_per_step(page, viewer, run_folder):
    open_page(page, viewer, run_folder)
    points = page.locator('svg[data-metric="reward/accuracy"] circle.pt')
    assert points.count() == STEPS
    assert sorted(int(points.nth(i).get_attribute("data-step")) for i in range(STEPS)) == list(range(1, STEPS + 1))
    assert page.locator("#time-charts rect.seg").count() >= STEPS  # the stacked time bars, one per step at least
    screenshot(page, "curves")


def test_clicking_a_group_shows_its_trajectories(page, viewer, run_folder):
    open_page(page, viewer, run_folder)
    page.click("button[data-tab=rollouts]")
    rows = file_rows(run_folder / "rollouts" / f"step_{STEPS}.jsonl")
    used = next(r["group"] for r in rows if r["group_dropped"] is None)
    page.click(f"tr.group-row[data-group='{used}']")
    shown = page.locator("tr.rollout-row")
    in_group = [r for r in rows if r["group"] == used]
    assert shown.count() == len(in_group)
    assert {shown.nth(i).locator("td").first.inner_text() for i in range(shown.count())} == {str(used)}
    fixed = next(i for i, r in enumerate(rows) if r["group"] == used and len(r["tool_calls"]) == 2)
    page.click(f"tr.rollout-row[data-index='{fixed}']")
    page.wait_for_selector("#trajectory .transcript")
    assert page.locator("#trajectory .call").count() == 2
    assert page.locator("#trajectory .tool-out.failed").count() == 1  # the first call failed: red
    assert "Error" in page.locator("#trajectory .tool-out.failed").inner_text()
    assert page.locator("#trajectory .answer-box").count() == 1
    assert "correct" in page.locator("#trajectory .bar .ok").inner_text()
    screenshot(page, "rollouts")
    page.check("#shade")
    page.wait_for_selector("#trajectory .tokens")
    assert page.locator("#trajectory .tok").count() == rows[fixed]["response_tokens"]


def test_tool_error_filter_shows_only_rollouts_with_a_failed_call(page, viewer, run_folder):
    open_page(page, viewer, run_folder)
    page.click("button[data-tab=rollouts]")
    rows = file_rows(run_folder / "rollouts" / f"step_{STEPS}.jsonl")
    failed = [i for i, r in enumerate(rows) if any(c["status"] != "ok" for c in r["tool_calls"])]
    assert 0 < len(failed) < len(rows)
    page.check("#f-toolerr")
    shown = page.locator("tr.rollout-row")
    assert sorted(int(shown.nth(i).get_attribute("data-index")) for i in range(shown.count())) == failed


def test_a_line_appended_while_the_page_is_open_shows_the_new_step(page, viewer, run_copy, rollout_pool, view_tokenizer):
    open_page(page, viewer, run_copy)
    points = 'svg[data-metric="reward/accuracy"] circle.pt'
    assert page.locator(points).count() == STEPS
    with Grader(workers=1) as grader:
        write_training_run(run_copy, rollout_pool, 1, groups_per_step=2, grader=grader, tokenizer=view_tokenizer,
                           logged_groups=2, start_step=STEPS + 1)
    page.wait_for_function(f"document.querySelectorAll('{points}').length === {STEPS + 1}", timeout=15_000)
    page.click("button[data-tab=rollouts]")
    assert page.locator("#ro-step").input_value() == str(STEPS + 1)  # following the newest step


def test_bad_input_is_said_on_the_page(page, viewer, run_folder, tmp_path):
    not_a_run = tmp_path / "notes"
    not_a_run.mkdir()
    (not_a_run / "readme.txt").write_text("not a run")
    truncated = shutil.copytree(run_folder, tmp_path / "truncated")
    with (truncated / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 4, "reward/accu')
    (truncated / "rollouts" / "step_9.jsonl").symlink_to(not_a_run / "readme.txt")
    no_metrics = shutil.copytree(run_folder, tmp_path / "no-metrics")
    (no_metrics / "metrics.jsonl").unlink()
    open_page(page, viewer, not_a_run, truncated, no_metrics)
    messages = page.locator("#messages").inner_text()
    assert "is not a run folder" in messages
    assert "step_9.jsonl points outside the run folder" in messages
    assert "metrics.jsonl: the last line is unfinished" in messages
    assert f"{no_metrics / 'metrics.jsonl'}: no such file" in messages
    assert "Traceback" not in page.content()
    curve = page.locator('svg[data-metric="reward/accuracy"] circle.pt[data-run="truncated"]')
    assert curve.count() == STEPS  # the finished lines are still shown
    (truncated / "rollouts" / "step_2.jsonl").unlink()  # a file gone while the page is open
    page.click("button[data-tab=rollouts]")
    page.select_option("#ro-run", label="truncated")
    page.select_option("#ro-step", "2")
    page.wait_for_function("document.getElementById('messages').innerText.includes('step_2.jsonl: no such file')")
    screenshot(page, "bad-input")


def test_export_is_one_file_that_works_without_a_server(page, run_folder, tmp_path):
    out = tmp_path / "run.html"
    result = subprocess_view("--export", str(out), str(run_folder), "--step", "2")
    assert result.returncode == 0, result.stderr
    html = out.read_text()
    assert 'src="' not in html and 'href="' not in html  # nothing to fetch
    page.goto(out.as_uri())
    page.wait_for_selector(READY, timeout=30_000)
    assert page.locator('svg[data-metric="reward/accuracy"] circle.pt').count() == STEPS
    page.click("button[data-tab=rollouts]")
    assert page.locator("#ro-step").input_value() == "2"
    assert page.locator("tr.rollout-row").count() == len(file_rows(run_folder / "rollouts" / "step_2.jsonl"))
    page.click("tr.rollout-row >> nth=1")
    page.wait_for_selector("#trajectory .transcript")
    screenshot(page, "export")


def test_eval_drill_down_and_compare(page, viewer, run_folder):
    open_page(page, viewer, run_folder)
    page.click("button[data-tab=eval]")
    results = json.loads((run_folder / "eval" / "base" / "results.json").read_text())
    (bench,) = results["benchmarks"]
    assert page.locator("#ev-bench td").first.inner_text() == bench
    page.click("tr.problem-row >> nth=0")
    page.wait_for_selector("#ev-samples .sample")
    assert page.locator("#ev-samples .sample").count() == results["problems"][bench][0]["samples"]
    page.click("#cmp-go")
    page.wait_for_selector("#compare table")
    assert "avg@n" in page.locator("#compare").inner_text()
    screenshot(page, "eval")


def subprocess_view(*args):
    return subprocess.run([sys.executable, "-m", "rstar2", "view", *args], capture_output=True, text=True, timeout=300)


def test_search_finds_the_text_of_calls_and_outputs(page, viewer, run_folder):
    open_page(page, viewer, run_folder)
    page.click("button[data-tab=rollouts]")
    rows = file_rows(run_folder / "rollouts" / f"step_{STEPS}.jsonl")
    broken = [i for i, r in enumerate(rows) if any("prnt(" in (c["code"] or "") for c in r["tool_calls"])]
    assert broken and len(broken) < len(rows)
    page.fill("#f-search", "PRNT(")
    page.press("#f-search", "Enter")
    page.wait_for_function(f"document.querySelectorAll('tr.rollout-row').length === {len(broken)}")
    shown = page.locator("tr.rollout-row")
    assert sorted(int(shown.nth(i).get_attribute("data-index")) for i in range(shown.count())) == broken


def test_a_long_step_is_drawn_a_page_at_a_time(page, viewer, rollout_pool, view_tokenizer, tmp_path):
    with Grader(workers=1) as grader:  # one step of 80 logged groups: 240 rollouts
        write_training_run(tmp_path / "long", rollout_pool, 1, groups_per_step=80, grader=grader,
                           tokenizer=view_tokenizer, logged_groups=80)
    total = len(file_rows(tmp_path / "long" / "rollouts" / "step_1.jsonl"))
    assert total > 200
    open_page(page, viewer, tmp_path / "long")
    page.click("button[data-tab=rollouts]")
    assert page.locator("tr.rollout-row").count() == 200
    page.click(f"button.more:has-text('more of {total - 200}')")
    assert page.locator("tr.rollout-row").count() == total
