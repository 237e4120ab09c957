"""What the viewer reads from a run folder, and nothing else.

    run = RunFolder(Path("runs/cpu-demo"), run_id=0)
    run.describe()               # kind, steps, evals, and what is wrong with the folder
    run.metrics()                # the rows of metrics.jsonl
    run.rollouts(step)           # the step's rollout summaries and its groups with RoC's verdict
    run.rollout(step, i)         # one whole rollout row
    run.eval_results(name)       # an eval run's results document
    run.eval_samples(name, bench, problem_id)

A folder is a **training run** when it has ``metrics.jsonl`` or ``rollouts/`` (written by
``rstar2.rl.runlog``), an **eval run** when it has ``samples.jsonl`` or ``results.json``
(``rstar2.eval``); the demo's folder is a training run whose ``eval/<phase>/`` children are eval
runs. Every JSONL file is read through a ``LineIndex`` cached under ``.view-index/`` in the run
folder. Names that come from a request (a step, an eval name) are looked up among the ones the
folder has, never joined into a path, so nothing outside the folder can be reached.

Every file read or written must also *resolve* inside the run folder (symlinks followed): a
step file or eval folder that points outside is left out of the listings with a warning and
refused (403) when asked for; a directory where a file is expected is a 404 that says so; and
a ``.view-index`` that resolves outside is not used (the index is then kept in memory).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from rstar2.eval.metrics import benchmark_stats, problem_stats
from rstar2.eval.report import RESULTS_JSON, benchmark_entry, problem_entry, read_results
from rstar2.eval.runner import SAMPLES_JSONL
from rstar2.eval.samples import SampleOutcome
from rstar2.service import ServiceError
from rstar2.view.index import LineIndex

INDEX_DIR = ".view-index"
STEP_FILE = re.compile(r"step_(\d+)\.jsonl")
PROBLEM_FIELDS = ("bench", "problem_id", "sample", "gold", "pred", "correct", "response_tokens",
                  "generated_tokens", "turns", "tool_calls", "tool_errors", "stop_reason", "truncated", "seconds")


class ViewError(ServiceError):
    """Something the page should say in one line (unknown step, missing file, bad line)."""

    def __init__(self, message: str, status: int = 404):
        super().__init__(message, status)


def outside(root: Path, path: Path) -> Path | None:
    """Where ``path`` really is, when that is outside ``root`` (a resolved folder); else None."""
    real = path.resolve()
    return None if real.is_relative_to(root) else real


def checked_file(root: Path, path: Path, what: str) -> Path:
    """``path`` when it is a file inside ``root``; else a ``ViewError`` that says why not (403:
    it points outside; 404: missing, or a directory)."""
    shown = path.relative_to(root) if path.is_relative_to(root) else path
    if (real := outside(root, path)) is not None:
        raise ViewError(f"{shown} points outside the run folder (to {real}); not served", 403)
    if path.is_dir():
        raise ViewError(f"{shown} is a directory, not {what}")
    if not path.is_file():
        raise ViewError(f"{path}: no such file")
    return path


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
        "span_s": row.get("span_s"),
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


class EvalFolder:
    """One eval run: ``results.json`` and ``samples.jsonl`` (read only inside ``root``, the run
    folder)."""

    def __init__(self, path: Path, cache_dir: Path | None, root: Path):
        self.path, self.root = path, root
        self.samples = LineIndex(path / SAMPLES_JSONL, cache_dir and cache_dir / "samples.json",
                                 sample_summary, within=root)

    def results(self) -> dict:
        """``results.json``; while the run has not written it, the same document computed
        from the samples finished so far (with a warning saying so)."""
        results = self.path / RESULTS_JSON
        if results.exists() or results.is_symlink():
            checked_file(self.root, results, "a results file")
            try:
                return {**read_results(self.path), "warnings": []}
            except ValueError as error:
                raise ViewError(f"{results}: not valid JSON ({error})", 422) from error
        checked_file(self.root, self.samples.path, "a samples file")
        self.samples.refresh()
        outcomes = [SampleOutcome.model_validate(s) for s in self.samples.summaries if "error" not in s]
        document = results_of(outcomes)
        document["warnings"] = [f"{self.path / RESULTS_JSON}: not written yet; figures from the "
                                f"{len(outcomes)} samples finished so far"]
        return document

    def problem_samples(self, bench: str, problem_id: str) -> dict:
        checked_file(self.root, self.samples.path, "a samples file")
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
        self.path = path.resolve()
        self.run_id = run_id
        self.notes: list[str] = []  # what was left out of the folder, and why
        self.cache_dir = self.index_dir()
        self.metrics_index = LineIndex(self.path / "metrics.jsonl", self.cache_dir and self.cache_dir / "metrics.json",
                                       dict, within=self.path)
        self.step_indexes: dict[int, LineIndex] = {}
        self.evals = {name: EvalFolder(folder, self.cache_dir and self.cache_dir / "eval" / name, self.path)
                      for name, folder in self.eval_folders().items()}

    def index_dir(self) -> Path | None:
        """Where the line indexes are cached: ``.view-index`` unless it resolves outside the
        folder (then they are kept in memory only)."""
        folder = self.path / INDEX_DIR
        if (real := outside(self.path, folder)) is not None:
            self.note(f"{INDEX_DIR} points outside the run folder (to {real}); the index is kept in memory")
            return None
        return folder

    def note(self, warning: str) -> None:
        """Record (once) and print a warning about something left out of the folder."""
        if warning not in self.notes:
            self.notes.append(warning)
            print(f"rstar2 view: {self.path}: {warning}", file=sys.stderr, flush=True)

    @property
    def is_training(self) -> bool:
        return (self.path / "metrics.jsonl").is_file() or (self.path / "rollouts").is_dir()

    def eval_folders(self) -> dict[str, Path]:
        """The eval runs here: the folder itself, and each ``eval/<name>/`` child (the demo's)
        that resolves inside the folder."""
        found = {}
        if is_eval_run(self.path):
            found["."] = self.path
        eval_dir = self.path / "eval"
        if eval_dir.is_dir():
            for child in sorted(eval_dir.iterdir()):
                if (real := outside(self.path, child)) is not None:
                    self.note(f"eval/{child.name} points outside the run folder (to {real}); left out")
                elif is_eval_run(child):
                    found[child.name] = child
        return found

    def problems(self) -> list[str]:
        """What keeps the folder from being read as a run, in words for the page."""
        if not self.path.is_dir():
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
        path = self.metrics_index.path
        if not (path.exists() or path.is_symlink()):
            if self.is_training:
                return {"rows": [], "warnings": [f"{path}: no such file (no step finished yet?)"]}
            return {"rows": [], "warnings": []}
        checked_file(self.path, path, "a metrics file")
        self.metrics_index.refresh()
        rows = [s for s in self.metrics_index.summaries if "error" not in s]
        warnings = [s["error"] for s in self.metrics_index.summaries if "error" in s]
        if self.metrics_index.partial_tail:
            warnings.append(f"{self.metrics_index.path}: the last line is unfinished (a run writing, or "
                            f"killed mid-write); it is left out")
        return {"rows": sorted(rows, key=lambda row: row.get("step", 0)), "warnings": warnings}

    def steps(self) -> list[int]:
        """The steps with a rollout file; one that points outside the folder or is not a file
        is left out, with a warning."""
        folder = self.path / "rollouts"
        if not folder.is_dir():
            return []
        steps = []
        for file in folder.iterdir():
            if (match := STEP_FILE.fullmatch(file.name)) is None:
                continue
            try:
                checked_file(self.path, file, "a rollout file")
            except ViewError as refused:
                self.note(f"{refused}; left out")
                continue
            steps.append(int(match.group(1)))
        return sorted(steps)

    def step_index(self, step: int) -> LineIndex:
        path = self.path / "rollouts" / f"step_{step}.jsonl"
        if not (path.exists() or path.is_symlink()):
            raise ViewError(f"{path}: no such file (the run has no rollouts logged for step {step})")
        checked_file(self.path, path, "a rollout file")
        if step not in self.step_indexes:
            cache = self.cache_dir and self.cache_dir / "rollouts" / f"step_{step}.json"
            self.step_indexes[step] = LineIndex(path, cache, rollout_summary, within=self.path)
        index = self.step_indexes[step]
        index.refresh()
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
        index = self.step_index(step)
        if not 0 <= line < index.count:
            raise ViewError(f"rollouts/step_{step}.jsonl has no rollout {line}")
        try:
            return index.row(line)
        except ValueError as error:
            raise ViewError(str(error), 422) from error

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


def is_eval_run(folder: Path) -> bool:
    return (folder / SAMPLES_JSONL).is_file() or (folder / RESULTS_JSON).is_file()
