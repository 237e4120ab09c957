"""What the viewer reads from a run folder, and nothing else.

    run = RunFolder(Path("runs/cpu-demo"), run_id=0)
    run.describe()               # kind, steps, evals, and what is wrong with the folder
    run.metrics()                # the rows of metrics.jsonl
    run.rollouts(step)           # the step's rollout summaries and its groups with RoC's verdict
    run.rollout(step, i)         # one whole rollout row, with its group's prompt
    run.eval_results(name)       # an eval run's results document
    run.eval_samples(name, bench, problem_id)

A folder is a **training run** when it has ``metrics.jsonl`` or ``rollouts/`` (written by
``rstar2.training.runlog``), an **eval run** when it has ``samples.jsonl`` or ``results.json``
(``rstar2.eval``); the demo's folder is a training run whose ``eval/<phase>/`` children are eval
runs. Every JSONL file is read through a ``LineIndex`` cached under ``.view-index/`` in the run
folder. Names that come from a request (a step, an eval name) are looked up among the ones the
folder has, never joined into a path, so nothing outside the folder can be reached.

Every file is read or written through the run folder's ``ConfinedFolder`` (``confined``):
opened below a descriptor of the folder taken at startup, one component at a time, refusing
links, so that no swap of a name for a link while the viewer reads can lead it outside. A
link in the folder (a step file, an eval folder, anything on the way to one) is therefore left
out of the listings with a warning and refused (403) when asked for, whether it points outside
or not; a directory where a file is expected is a 404 that says so; and a ``.view-index`` that
is a link is not used (the index is then kept in memory).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path, PurePosixPath

from rstar2.eval.metrics import benchmark_stats, problem_stats
from rstar2.eval.report import RESULTS_JSON, benchmark_entry, problem_entry
from rstar2.eval.runner import SAMPLES_JSONL
from rstar2.eval.samples import SampleOutcome
from rstar2.view.confined import ConfinedFolder, Missing, ViewError
from rstar2.view.index import LineIndex

INDEX_DIR = ".view-index"
STEP_FILE = re.compile(r"step_(\d+)\.jsonl")
PROBLEM_FIELDS = ("bench", "problem_id", "sample", "gold", "pred", "correct", "response_tokens",
                  "generated_tokens", "turns", "tool_calls", "tool_errors", "stop_reason", "truncated", "seconds")
GROUP_FIELDS = ("prompt", "special_tokens")
"""What a group's rollouts share, logged once on the group's first row (the trainer's
``group_prompt``) and served with each rollout of the group."""


def rollout_summary(row: dict) -> dict:
    """What the rollout list filters and sorts on (a row of ``rollouts/step_N.jsonl``)."""
    calls = row.get("tool_calls", [])
    return {
        "group": row.get("group"), "rollout": row.get("rollout"), "problem_id": row.get("problem_id"),
        "gold": row.get("gold"), "answer": row.get("answer"), "reward": row.get("reward"),
        "penalty": row.get("penalty"), "kept": row.get("kept"), "group_dropped": row.get("group_dropped"),
        "stop_reason": row.get("stop_reason"), "response_tokens": row.get("response_tokens"),
        "tool_calls": len(calls), "tool_errors": sum(call.get("status") != "ok" for call in calls),
        "tool_seconds": sum(call.get("duration_s", 0.0) for call in calls),
        "truncated": row.get("stop_reason") == "max_tokens", "logprobs": "token_logprobs" in row,
        "span_s": row.get("span_s"), "has_prompt": "prompt" in row,
    }


def sample_summary(row: dict) -> dict:
    """A line of an eval's ``samples.jsonl`` without its response text."""
    return {field: row.get(field) for field in PROBLEM_FIELDS}


def group_verdicts(summaries: list[dict]) -> list[dict]:
    """The step's groups: rollouts, how many were correct and kept, and RoC's verdict."""
    groups: dict[int, dict] = {}
    for summary in summaries:
        if "error" in summary:
            continue
        group = groups.setdefault(summary["group"], {
            "group": summary["group"], "problem_id": summary["problem_id"], "gold": summary["gold"],
            "rollouts": 0, "correct": 0, "kept": 0, "tool_errors": 0, "dropped": summary["group_dropped"]})
        group["rollouts"] += 1
        group["correct"] += summary["reward"] == 1.0
        group["kept"] += bool(summary["kept"])
        group["tool_errors"] += summary["tool_errors"]
    return [groups[key] for key in sorted(groups)]


def group_fields(index: LineIndex, row: dict) -> dict:
    """The ``GROUP_FIELDS`` of ``row``'s group, read from the group's row that carries them;
    none if no readable row of the group does."""
    if "prompt" in row:
        return {}
    for line, summary in enumerate(index.summaries):
        if summary.get("has_prompt") and summary.get("group") == row.get("group"):
            try:
                carrier = index.row(line)
            except ValueError:
                return {}
            return {field: carrier[field] for field in GROUP_FIELDS if field in carrier}
    return {}


class EvalFolder:
    """One eval run: ``results.json`` and ``samples.jsonl`` of the folder ``relative`` (``.``
    or ``eval/<name>``) of the run folder ``root``."""

    def __init__(self, root: ConfinedFolder, relative: str, cache_dir: PurePosixPath | None):
        self.root, self.relative = root, PurePosixPath(relative)
        self.path = root.path / relative
        self.samples = LineIndex(root, self.relative / SAMPLES_JSONL, cache_dir and cache_dir / "samples.json",
                                 sample_summary, "a samples file")

    def results(self) -> dict:
        """``results.json``; while the run has not written it, the same document computed
        from the samples finished so far (with a warning saying so)."""
        results = self.relative / RESULTS_JSON
        if self.root.kind(results) is not None:
            with self.root.open(results, "a results file") as handle:
                text = handle.read()
            try:
                return {**json.loads(text), "warnings": []}
            except ValueError as error:
                raise ViewError(f"{self.root.path / results}: not valid JSON ({error})", 422) from error
        self.samples.refresh()
        outcomes = [SampleOutcome.model_validate(s) for s in self.samples.summaries if "error" not in s]
        document = results_of(outcomes)
        document["warnings"] = [f"{self.path / RESULTS_JSON}: not written yet; figures from the "
                                f"{len(outcomes)} samples finished so far"]
        return document

    def problem_samples(self, bench: str, problem_id: str) -> dict:
        self.samples.refresh()
        lines = [i for i, s in enumerate(self.samples.summaries)
                 if s.get("bench") == bench and s.get("problem_id") == problem_id]
        rows = [self.samples.row(i) for i in lines]
        return {"samples": sorted(rows, key=lambda row: row.get("sample", 0)),
                "partial_tail": self.samples.partial_tail}


def results_of(outcomes: list[SampleOutcome]) -> dict:
    """A results document (``rstar2.eval.report``'s shape) from samples alone, in file order."""
    by_problem: dict[str, dict[str, list[SampleOutcome]]] = {}
    for outcome in outcomes:
        by_problem.setdefault(outcome.bench, {}).setdefault(outcome.problem_id, []).append(outcome)
    document: dict = {"run": {}, "benchmarks": {}, "problems": {}, "missing_samples": {}}
    for bench, problems in by_problem.items():
        stats = [problem_stats(pid, found[0].gold, found) for pid, found in problems.items()]
        samples = [o for found in problems.values() for o in found]
        document["benchmarks"][bench] = benchmark_entry(benchmark_stats(bench, stats, samples))
        document["problems"][bench] = [problem_entry(p) for p in stats]
    return document


class RunFolder:
    """A training run, an eval run, or the demo's folder (both); see the module docstring."""

    def __init__(self, path: Path, run_id: int):
        self.root = ConfinedFolder(path)  # a link naming the run folder itself is followed, here, once
        self.path = self.root.path
        self.run_id = run_id
        self.notes: list[str] = []  # what was left out of the folder, and why
        self.cache_dir = self.index_dir()
        self.metrics_index = LineIndex(self.root, "metrics.jsonl", self.cache_dir and self.cache_dir / "metrics.json",
                                       dict, "a metrics file")
        self.step_indexes: dict[int, LineIndex] = {}
        self.evals = {name: EvalFolder(self.root, folder, self.cache_dir and self.cache_dir / "eval" / name)
                      for name, folder in self.eval_folders().items()}

    def index_dir(self) -> PurePosixPath | None:
        """Where the line indexes are cached: ``.view-index`` unless it is a link (then they
        are kept in memory only)."""
        if self.root.kind(INDEX_DIR) == "link":
            self.note(f"{self.root.refusal(INDEX_DIR, 'link')}; the index is kept in memory")
            return None
        return PurePosixPath(INDEX_DIR)

    def note(self, warning: str) -> None:
        """Record (once) and print a warning about something left out of the folder."""
        if warning not in self.notes:
            self.notes.append(warning)
            print(f"rstar2 view: {self.path}: {warning}", file=sys.stderr, flush=True)

    @property
    def is_training(self) -> bool:
        """Whether the folder has ``metrics.jsonl`` or ``rollouts/`` by name; what is wrong with
        either (a link, say) is reported when it is read."""
        return self.root.kind("metrics.jsonl") is not None or self.root.kind("rollouts") is not None

    def eval_folders(self) -> dict[str, str]:
        """The eval runs here (name: folder below the run folder): the folder itself, and each
        ``eval/<name>/`` child (the demo's) that is a folder, not a link."""
        found = {}
        if self.is_eval_run("."):
            found["."] = "."
        try:
            children = self.root.entries("eval")
        except ViewError as refused:
            self.note(f"{refused}; left out")
            children = {}
        for name, kind in sorted(children.items()):
            if kind == "link":
                self.note(f"{self.root.refusal(f'eval/{name}', kind)}; left out")
            elif kind == "dir" and self.is_eval_run(f"eval/{name}"):
                found[name] = f"eval/{name}"
        return found

    def is_eval_run(self, folder: str) -> bool:
        return any(self.root.kind(PurePosixPath(folder) / name) is not None for name in (SAMPLES_JSONL, RESULTS_JSON))

    def problems(self) -> list[str]:
        """What keeps the folder from being read as a run, in words for the page."""
        if not self.root.exists:
            return [f"{self.path}: no such folder"]
        if not self.is_training and not self.evals:
            return [f"{self.path} is not a run folder: it has no metrics.jsonl, rollouts/, "
                    f"samples.jsonl or results.json"]
        return []

    def describe(self) -> dict:
        steps = self.steps() if self.is_training else []
        return {"id": self.run_id, "label": self.path.name, "path": str(self.path),
                "training": self.is_training, "steps": steps, "evals": list(self.evals),
                "problems": self.problems(), "warnings": self.notes}

    def metrics(self) -> dict:
        """Every row of ``metrics.jsonl``, with the bad and unfinished lines reported."""
        try:
            self.metrics_index.refresh()
        except Missing:
            if self.is_training:
                return {"rows": [], "warnings": [f"{self.metrics_index.path}: no such file (no step finished yet?)"]}
            return {"rows": [], "warnings": []}
        rows = [s for s in self.metrics_index.summaries if "error" not in s]
        warnings = [s["error"] for s in self.metrics_index.summaries if "error" in s]
        if self.metrics_index.partial_tail:
            warnings.append(f"{self.metrics_index.path}: the last line is unfinished (a run writing, or "
                            f"killed mid-write); it is left out")
        return {"rows": sorted(rows, key=lambda row: row.get("step", 0)), "warnings": warnings}

    def steps(self) -> list[int]:
        """The steps with a rollout file; one that is a link or not a regular file is left
        out, with a warning."""
        try:
            children = self.root.entries("rollouts")
        except ViewError as refused:
            self.note(f"{refused}; left out")
            return []
        steps = []
        for name, kind in sorted(children.items()):
            if (match := STEP_FILE.fullmatch(name)) is None:
                continue
            if kind == "file":
                steps.append(int(match.group(1)))
            else:
                self.note(f"{self.root.refusal(f'rollouts/{name}', kind, 'a rollout file')}; left out")
        return sorted(steps)

    def step_index(self, step: int) -> LineIndex:
        """The step's index, refreshed; kept only once its file was read, so that asking for
        steps that do not exist leaves nothing behind."""
        index = self.step_indexes.get(step)
        if index is None:
            cache = self.cache_dir and self.cache_dir / "rollouts" / f"step_{step}.json"
            index = LineIndex(self.root, f"rollouts/step_{step}.jsonl", cache, rollout_summary, "a rollout file")
        try:
            index.refresh()
        except Missing as missing:
            raise ViewError(f"{missing} (the run has no rollouts logged for step {step})") from None
        self.step_indexes[step] = index
        return index

    def rollouts(self, step: int) -> dict:
        """The step's rollout summaries (``index`` = line) and groups, with warnings."""
        index = self.step_index(step)
        summaries = [{"index": i, **s} for i, s in enumerate(index.summaries)]
        warnings = [s["error"] for s in summaries if "error" in s]
        if index.partial_tail:
            warnings.append(f"{index.path}: the last line is unfinished; it is left out")
        return {"step": step, "rollouts": [s for s in summaries if "error" not in s],
                "groups": group_verdicts(index.summaries), "warnings": warnings}

    def rollout(self, step: int, line: int) -> dict:
        """Row ``line`` of the step, with its group's ``GROUP_FIELDS`` where the row itself
        lacks them (all but the group's first row); a log without them is served as it is."""
        index = self.step_index(step)
        if not 0 <= line < index.count:
            raise ViewError(f"rollouts/step_{step}.jsonl has no rollout {line}")
        try:
            row = index.row(line)
        except ValueError as error:
            raise ViewError(str(error), 422) from error
        return {**group_fields(index, row), **row}

    def search(self, step: int, text: str) -> list[int]:
        """The lines of the step whose response, code or outputs contain ``text`` (any case)."""
        index = self.step_index(step)
        needle = text.lower()
        found = []
        for line in range(index.count):
            try:
                row = index.row(line)
            except ValueError:
                continue
            haystack = [row.get("response", ""), str(row.get("answer"))]
            haystack += [f"{call.get('code')}\n{call.get('output')}" for call in row.get("tool_calls", [])]
            if any(needle in part.lower() for part in haystack):
                found.append(line)
        return found

    def eval_folder(self, name: str) -> EvalFolder:
        if name not in self.evals:
            raise ViewError(f"{self.path.name} has no eval run named {name!r} (it has: {', '.join(self.evals) or 'none'})")
        return self.evals[name]

