"""The viewer without a browser: what it binds to, what it refuses to serve, how it indexes."""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx

from rstar2.view.index import LineIndex
from tests.errors import error_message


def listening_addresses(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp* writes them) of sockets listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).is_file():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if int(hex_port, 16) == port and state == "0A":  # LISTEN
                found.add(address)
    return found


def raw_get(port: int, path: str) -> tuple[int, str]:
    """GET ``path`` exactly as written (no client-side normalisation of ``..``)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.putrequest("GET", path, skip_accept_encoding=True)
    connection.endheaders()
    response = connection.getresponse()
    return response.status, response.read().decode(errors="replace")


def test_binds_to_loopback_by_default(viewer, run_folder):
    server = viewer(run_folder)
    assert listening_addresses(server.port) == {"0100007F"}  # 127.0.0.1 only


def test_nothing_outside_the_run_folders_is_served(viewer, run_folder):
    server = viewer(run_folder)
    secret = run_folder.parent / "secret.txt"
    secret.write_text("do not serve")
    for path in ["/static/../../../pyproject.toml", "/static/..%2F..%2F..%2Fpyproject.toml",
                 "/static/%2e%2e/%2e%2e/server.py", "/../secret.txt", "/api/runs/0/../../secret.txt",
                 "/api/runs/0/eval?name=../../secret.txt", "/api/runs/0/eval?name=..",
                 "/api/runs/0/eval/samples?name=../..&bench=x&problem=y", "/api/runs/0/steps/..%2F..%2Fsecret.txt",
                 "/api/runs/1/metrics", "/api/runs/-1/metrics"]:
        status, body = raw_get(server.port, path)
        assert status in (404, 422), (path, status)
        assert "do not serve" not in body and "[project]" not in body
    response = httpx.get(f"{server.url}/api/runs/0/eval", params={"name": ".."})
    assert "has no eval run named '..'" in error_message(response, 404)
    assert raw_get(server.port, "/static/app.js")[0] == 200


def test_links_out_of_the_run_folder_are_not_followed_and_nothing_is_written_outside(viewer, run_copy, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "rows.jsonl").write_text(json.dumps({"group": 0, "response": "SECRET ROLLOUT"}) + "\n")
    rollouts = run_copy / "rollouts"
    (rollouts / "step_7.jsonl").symlink_to(outside / "rows.jsonl")
    (rollouts / "step_8.jsonl").symlink_to("/etc/passwd")
    (rollouts / "step_9.jsonl").symlink_to(rollouts)  # a directory where a file is expected
    shutil.copytree(run_copy / "eval" / "base", outside / "leak")
    (outside / "leak" / "results.json").write_text(json.dumps({"secret": "SECRET RESULTS"}))
    (run_copy / "eval" / "leak").symlink_to(outside / "leak")
    shutil.rmtree(run_copy / ".view-index", ignore_errors=True)
    (outside / "cache").mkdir()
    (run_copy / ".view-index").symlink_to(outside / "cache")

    server = viewer(run_copy)
    (run,) = httpx.get(f"{server.url}/api/runs").json()
    assert run["steps"] == [1, 2, 3] and run["evals"] == ["base", "final"]
    for name in ("step_7.jsonl points outside", "step_8.jsonl points outside", "eval/leak points outside",
                 ".view-index points outside", "step_9.jsonl is a directory"):
        assert any(name in warning for warning in run["warnings"]), (name, run["warnings"])
    for path in ("/api/runs/0/steps/7", "/api/runs/0/steps/7/rollouts/0", "/api/runs/0/steps/7/search?q=SECRET",
                 "/api/runs/0/steps/8", "/api/runs/0/steps/8/rollouts/0"):
        response = httpx.get(server.url + path)
        assert "points outside the run folder" in error_message(response, 403), path
        assert "SECRET" not in response.text and "root:" not in response.text
    assert "is a directory, not a rollout file" in error_message(httpx.get(f"{server.url}/api/runs/0/steps/9"), 404)
    leak = httpx.get(f"{server.url}/api/runs/0/eval", params={"name": "leak"})
    assert "has no eval run named 'leak'" in error_message(leak, 404) and "SECRET" not in leak.text
    assert len(httpx.get(f"{server.url}/api/runs/0/steps/2").json()["rollouts"]) > 0  # indexed in memory
    assert list((outside / "cache").iterdir()) == []
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok", "runs": 1}


def test_cli_says_what_is_wrong_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "rstar2", "view", str(tmp_path / "nope")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.strip() == f"error: no such folder: {tmp_path / 'nope'}"
    result = subprocess.run([sys.executable, "-m", "rstar2", "view", "--export", str(tmp_path / "x.html"), str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "is not a run folder" in result.stderr and "Traceback" not in result.stderr


def write(path: Path, text: str, mode: str = "a") -> None:
    with path.open(mode) as handle:
        handle.write(text)


def test_index_reads_appended_lines_skips_a_partial_tail_and_survives_a_rewrite(tmp_path):
    data, cache = tmp_path / "metrics.jsonl", tmp_path / ".view-index" / "metrics.json"
    write(data, '{"step": 1, "x": 1}\n{"step": 2, "x": 2}\n{"step": 3, "x"', "w")
    index = LineIndex(data, cache, dict)
    index.refresh()
    assert [s["step"] for s in index.summaries] == [1, 2] and index.partial_tail
    write(data, ': 3}\nnot json\n')
    index.refresh()
    assert index.count == 4 and not index.partial_tail
    assert index.row(2) == {"step": 3, "x": 3} and "record 4: not valid JSON" in index.summaries[3]["error"]
    reopened = LineIndex(data, cache, dict)  # from the cache: the file is not read again
    assert reopened.offsets == index.offsets and reopened.row(1) == {"step": 2, "x": 2}
    write(data, '{"step": 1, "x": 10}\n', "w")  # rewritten shorter (a resumed run trims the file)
    reopened.refresh()
    assert reopened.summaries == [{"step": 1, "x": 10}]
    write(data, '{"step": 9, "x": 99}\n', "w")  # same length, different bytes
    reopened.refresh()
    assert reopened.summaries == [{"step": 9, "x": 99}]


def test_index_works_in_a_read_only_folder(tmp_path):
    data = tmp_path / "samples.jsonl"
    write(data, '{"a": 1}\n', "w")
    index = LineIndex(data, Path("/proc/no-such-place/cache.json"), dict)
    index.refresh()
    assert index.summaries == [{"a": 1}] and index.cache_path is None
