"""The stage-3 difficulty filter: keep the problems a policy did not solve every time (paper §4.4).

Before stage 3 the paper samples 8 rollouts per training problem with the latest policy and
drops the problems solved 8/8. Here the rollouts come from an ordinary eval run over the
training file (``rstar2 eval --bench train.jsonl -n 8 --temperature 1.0``), whose
``samples.jsonl`` has one line per finished sample with at least ``bench``, ``problem_id``,
``sample`` (its index) and ``correct``.

Contract of ``split_by_difficulty(problems, samples_path, bench)``:

* k is the largest number of samples any problem of ``bench`` has in the run (its ``-n``);
* a problem is kept when fewer than k of its k samples are correct, dropped when all are;
* a problem with fewer than k samples, or none, raises ``DataError``: an unfinished run
  (resume it) or a run over another file must not silently decide what is "hard";
* a partial last line (a run killed mid-write) is ignored, as the eval harness does.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from rstar2.data.jsonl import DataError, read_jsonl
from rstar2.data.problems import Problem

MAX_LISTED_IDS = 10


@dataclass(frozen=True)
class SampleTally:
    """How one problem fared in the run."""

    samples: int
    correct: int


@dataclass(frozen=True)
class DifficultySplit:
    """The outcome of the filter."""

    k: int
    kept: list[Problem]
    """Problems solved in fewer than k of k samples."""
    dropped: list[Problem]
    """Problems solved in all k samples."""


def tally_samples(samples_path: str | Path, bench: str) -> dict[str, SampleTally]:
    """Problem id -> its samples and correct samples in a run's ``samples.jsonl``, for ``bench``."""
    seen: set[tuple[str, int]] = set()
    samples: dict[str, int] = defaultdict(int)
    correct: dict[str, int] = defaultdict(int)
    for line, record in read_jsonl(samples_path, partial_tail_ok=True):
        if record.get("bench") != bench:
            continue
        try:
            key = (str(record["problem_id"]), int(record["sample"]))
            solved = bool(record["correct"])
        except (KeyError, TypeError, ValueError) as error:
            raise DataError(f"{samples_path}:{line}: not an eval sample record ({error!r})") from error
        if key in seen:
            continue
        seen.add(key)
        samples[key[0]] += 1
        correct[key[0]] += solved
    return {pid: SampleTally(samples=samples[pid], correct=correct[pid]) for pid in samples}


def split_by_difficulty(problems: list[Problem], samples_path: str | Path, bench: str) -> DifficultySplit:
    """Keep the problems not solved in all k samples; see the module docstring."""
    tallies = tally_samples(samples_path, bench)
    if not tallies:
        raise DataError(f"{samples_path}: no samples of benchmark {bench!r} (pass the name the run used)")
    k = max(tally.samples for tally in tallies.values())
    unfinished = [p.id for p in problems if tallies.get(p.id, SampleTally(0, 0)).samples < k]
    if unfinished:
        listed = ", ".join(unfinished[:MAX_LISTED_IDS]) + (" ..." if len(unfinished) > MAX_LISTED_IDS else "")
        raise DataError(
            f"{len(unfinished)} of {len(problems)} problems have fewer than {k} samples of {bench!r} in "
            f"{samples_path} ({listed}); finish the run with `rstar2 eval ... --resume` over the same file"
        )
    kept = [p for p in problems if tallies[p.id].correct < k]
    dropped = [p for p in problems if tallies[p.id].correct >= k]
    return DifficultySplit(k=k, kept=kept, dropped=dropped)
