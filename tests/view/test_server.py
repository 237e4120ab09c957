"""The viewer without a browser: what it binds to, what it refuses to serve, how it indexes."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from fastapi.testclient import TestClient

from rstar2.view.confined import ConfinedFolder
from rstar2.view.index import LineIndex, digest
from rstar2.view.server import create_app
from tests.errors import error_message
from tests.view.conftest import file_rows, served_rows, write_rows


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


def test_links_are_not_followed_and_nothing_is_written_outside(viewer, run_copy, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "rows.jsonl").write_text(json.dumps({"group": 0, "response": "SECRET ROLLOUT"}) + "\n")
    rollouts = run_copy / "rollouts"
    (rollouts / "step_7.jsonl").symlink_to(outside / "rows.jsonl")
    (rollouts / "step_8.jsonl").symlink_to("/etc/passwd")
    (rollouts / "step_6.jsonl").symlink_to("step_1.jsonl")  # inside the folder, and still a link
    (rollouts / "step_9.jsonl").mkdir()  # a directory where a file is expected
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
                 ".view-index points outside", "step_9.jsonl is a directory", "step_6.jsonl is a link"):
        assert any(name in warning for warning in run["warnings"]), (name, run["warnings"])
    for path in ("/api/runs/0/steps/7", "/api/runs/0/steps/7/rollouts/0", "/api/runs/0/steps/7/search?q=SECRET",
                 "/api/runs/0/steps/8", "/api/runs/0/steps/8/rollouts/0"):
        response = httpx.get(server.url + path)
        assert "points outside the run folder" in error_message(response, 403), path
        assert "SECRET" not in response.text and "root:" not in response.text
    assert "links are not followed" in error_message(httpx.get(f"{server.url}/api/runs/0/steps/6"), 403)
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
    data, folder = tmp_path / "metrics.jsonl", ConfinedFolder(tmp_path)
    write(data, '{"step": 1, "x": 1}\n{"step": 2, "x": 2}\n{"step": 3, "x"', "w")
    index = LineIndex(folder, "metrics.jsonl", ".view-index/metrics.json", dict)
    index.refresh()
    assert [s["step"] for s in index.summaries] == [1, 2] and index.partial_tail
    write(data, ': 3}\nnot json\n')
    index.refresh()
    assert index.count == 4 and not index.partial_tail
    assert index.row(2) == {"step": 3, "x": 3} and "record 4: not valid JSON" in index.summaries[3]["error"]
    parsed = []
    reopened = LineIndex(folder, "metrics.jsonl", ".view-index/metrics.json", lambda row: parsed.append(row) or row)
    reopened.refresh()  # from the cache: the file is checked, not parsed again
    assert parsed == [] and reopened.offsets == index.offsets and reopened.row(1) == {"step": 2, "x": 2}
    write(data, '{"step": 1, "x": 10}\n', "w")  # rewritten shorter (a resumed run trims the file)
    reopened.refresh()
    assert reopened.summaries == [{"step": 1, "x": 10}]
    write(data, '{"step": 9, "x": 99}\n', "w")  # same length, different bytes
    reopened.refresh()
    assert reopened.summaries == [{"step": 9, "x": 99}]


def test_index_works_where_its_cache_cannot_be_written(tmp_path):
    write(tmp_path / "samples.jsonl", '{"a": 1}\n', "w")
    write(tmp_path / "not-a-folder", "", "w")
    index = LineIndex(ConfinedFolder(tmp_path), "samples.jsonl", "not-a-folder/cache.json", dict)
    index.refresh()
    assert index.summaries == [{"a": 1}] and index.cache_name is None


def test_a_step_file_swapped_for_a_link_while_it_is_served_never_leaks(run_copy, tmp_path):
    """A thread swaps rollouts/step_2.jsonl between the run's own file and a link to a file
    outside (same rows, a marker in each) while the step is asked for: every answer is the
    run's rows or a refusal, never the outside file's."""
    marker = "OUTSIDE-ONLY-7c41e9"
    step = run_copy / "rollouts" / "step_2.jsonl"
    own = step.read_bytes()
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text("".join(json.dumps({**json.loads(line), "response": marker, "answer": marker,
                                           "problem_id": marker}) + "\n" for line in own.splitlines()))
    kept, staged = run_copy / "rollouts" / "own.bin", run_copy / "rollouts" / "staged"
    kept.write_bytes(own)
    stop = threading.Event()

    def swap() -> None:  # each rename is atomic: the name always exists, as the file or as the link
        while not stop.is_set():
            staged.symlink_to(outside)
            os.replace(staged, step)
            os.link(kept, staged)
            os.replace(staged, step)

    client = TestClient(create_app([run_copy]))
    paths = ["/api/runs/0/steps/2", "/api/runs/0/steps/2/rollouts/0", f"/api/runs/0/steps/2/search?q={marker}"]
    statuses: Counter = Counter()
    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        for number in range(300):
            response = client.get(paths[number % len(paths)])
            statuses[response.status_code] += 1
            assert marker not in response.text, (number, response.text[:300])
            if response.status_code == 403:  # what the link is said to point to is looked up after: racy words
                assert "rollouts/step_2.jsonl" in error_message(response, 403)
            elif "search" in paths[number % len(paths)]:
                assert response.json() == {"lines": []}, response.text  # no line of the outside file was searched
    finally:
        stop.set()
        swapper.join()
    assert set(statuses) == {200, 403}, statuses  # both states were met, and nothing else (no 500)


def test_a_link_anywhere_on_the_way_to_a_file_is_refused(run_copy, tmp_path):
    outside = tmp_path / "outside"
    shutil.copytree(run_copy / "rollouts", outside / "rollouts")
    shutil.move(run_copy / "rollouts", run_copy / "rollouts-real")
    (run_copy / "rollouts").symlink_to(outside / "rollouts")  # a folder on the way
    samples = run_copy / "eval" / "base" / "samples.jsonl"
    shutil.move(samples, outside / "samples.jsonl")
    samples.symlink_to(outside / "samples.jsonl")
    (run_copy / "eval" / "base" / "results.json").unlink()
    (run_copy / "eval" / "base" / "results.json").symlink_to(run_copy / "eval" / "final" / "results.json")
    shutil.move(run_copy / "metrics.jsonl", run_copy / "metrics-real.jsonl")
    (run_copy / "metrics.jsonl").symlink_to("metrics-real.jsonl")
    alias = tmp_path / "alias"
    alias.symlink_to(run_copy)  # the run folder itself may be named through a link
    client = TestClient(create_app([alias]))

    (run,) = client.get("/api/runs").json()
    assert run["path"] == str(run_copy) and run["steps"] == [] and run["evals"] == ["base", "final"]
    assert any(warning.startswith("rollouts points outside the run folder") for warning in run["warnings"])
    for path, status, said in [("/api/runs/0/steps/1", 403, "rollouts points outside the run folder"),
                               ("/api/runs/0/metrics", 403, "metrics.jsonl is a link"),
                               ("/api/runs/0/eval?name=base", 403, "eval/base/results.json is a link"),
                               ("/api/runs/0/eval/samples?name=base&bench=x&problem=y", 403,
                                "eval/base/samples.jsonl points outside the run folder")]:
        assert said in error_message(client.get(path), status), path
    assert client.get("/api/runs/0/eval?name=final").status_code == 200


def test_a_fifo_named_as_a_step_file_is_refused_not_waited_on(run_copy):
    os.mkfifo(run_copy / "rollouts" / "step_5.jsonl")
    client = TestClient(create_app([run_copy]))
    (run,) = client.get("/api/runs").json()
    assert 5 not in run["steps"] and any("step_5.jsonl is not a regular file" in w for w in run["warnings"])
    assert "is not a regular file" in error_message(client.get("/api/runs/0/steps/5"), 403)


def with_digest(document: dict, **changes) -> bytes:
    """The cache document with ``changes``, its summaries' digest made to match: damage only a
    look at the run's files can find."""
    changed = {**document, **changes}
    return json.dumps({**changed, "digest": digest(changed["summaries"])}).encode()


CORRUPTIONS = {
    "garbage bytes": lambda raw, document: b"\x00\xff\xfe{{ not json",
    "truncated": lambda raw, document: raw[: len(raw) // 2],
    "valid JSON of the wrong shape": lambda raw, document: json.dumps(
        {**document, "offsets": "0", "summaries": {"0": {}}, "indexed_size": "12"}).encode(),
    "offsets and summaries of different lengths": lambda raw, document: with_digest(
        document, offsets=document["offsets"][:-1]),
    "an offset past the end": lambda raw, document: with_digest(
        document, offsets=[*document["offsets"][:-1], document["indexed_size"] + 100]),
    "an offset mid-line": lambda raw, document: with_digest(
        document, offsets=[document["offsets"][0], document["offsets"][1] + 3, *document["offsets"][2:]]),
    "one row fewer than the file has": lambda raw, document: with_digest(
        document, offsets=document["offsets"][:-1], summaries=document["summaries"][:-1]),
    "a summary damaged": lambda raw, document: json.dumps(
        {**document, "summaries": [{}, *document["summaries"][1:]]}).encode(),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_corrupt_index_cache_is_rebuilt_not_served(run_copy, corruption):
    shutil.rmtree(run_copy / ".view-index", ignore_errors=True)
    bench, problem = (json.loads((run_copy / "eval" / "base" / "samples.jsonl").read_text().splitlines()[0])[key]
                      for key in ("bench", "problem_id"))
    rows = [json.loads(line) for line in (run_copy / "rollouts" / "step_2.jsonl").read_text().splitlines()]
    search = urlencode({"q": rows[0]["response"].split()[0]})
    paths = ["/api/runs/0/metrics", "/api/runs/0/steps/2", f"/api/runs/0/steps/2/search?{search}",
             f"/api/runs/0/eval/samples?{urlencode({'name': 'base', 'bench': bench, 'problem': problem})}",
             *(f"/api/runs/0/steps/2/rollouts/{line}" for line in range(len(rows)))]

    def answers() -> list:
        client = TestClient(create_app([run_copy]))  # a fresh viewer: it starts from the cache
        responses = [client.get(path) for path in paths]
        assert [r.status_code for r in responses] == [200] * len(paths), [r.text[:200] for r in responses]
        return [r.json() for r in responses]

    expected = answers()
    assert expected[4:] == served_rows(rows)
    caches = [run_copy / ".view-index" / name for name in ("metrics.json", "rollouts/step_2.json", "eval/base/samples.json")]
    written = [cache.read_bytes() for cache in caches]
    for cache, raw in zip(caches, written):
        cache.write_bytes(CORRUPTIONS[corruption](raw, json.loads(raw)))
    assert answers() == expected
    assert [cache.read_bytes() for cache in caches] == written  # rewritten, as it was built the first time


def test_each_rollout_is_served_with_its_groups_prompt(run_folder):
    rows = file_rows(run_folder / "rollouts" / "step_2.jsonl")
    assert sum("prompt" in row for row in rows) == len({row["group"] for row in rows})  # once per group in the file
    client = TestClient(create_app([run_folder]))
    served = [client.get(f"/api/runs/0/steps/2/rollouts/{line}").json() for line in range(len(rows))]
    assert served == served_rows(rows)
    for row in served:
        assert row["prompt"].endswith("<reason>") and "execute_python_code_with_standard_io" in row["prompt"]
        assert "<|im_end|>" in row["special_tokens"]


def test_a_log_without_prompts_is_served_as_it_is(run_copy):
    step = run_copy / "rollouts" / "step_2.jsonl"
    old = [{key: value for key, value in row.items() if key not in ("prompt", "special_tokens")} for row in file_rows(step)]
    write_rows(step, old)
    client = TestClient(create_app([run_copy]))
    assert len(client.get("/api/runs/0/steps/2").json()["rollouts"]) == len(old)
    for line, row in enumerate(old):
        response = client.get(f"/api/runs/0/steps/2/rollouts/{line}")
        assert response.status_code == 200 and response.json() == row
