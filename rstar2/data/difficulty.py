"""Difficulty filters from a policy's own samples: the stage-3 filter (paper §4.4) and the
pass-rate band of a curriculum.

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

``split_by_pass_rate`` applies the same rules and keeps the problems with a pass rate p strictly
between 0 and 1: a GRPO group of such a problem is likely to hold both a correct and a wrong
rollout, the only groups RL learns from (the GSM8K recipe picks its RL problems this way, from a
few samples of its SFT model).
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


@dataclass(frozen=True)
class PassRateSplit:
    """Problems by how often a policy solved them in k samples."""

    k: int
    kept: list[Problem]
    """Solved in some but not all k samples (0 < p < 1), in the order given."""
    always: list[Problem]
    """Solved in all k samples."""
    never: list[Problem]
    """Solved in none."""
    pass_rates: dict[str, float]
    """Problem id -> correct / k, for every problem."""


def split_by_difficulty(problems: list[Problem], samples_path: str | Path, bench: str) -> DifficultySplit:
    """Keep the problems not solved in all k samples; see the module docstring."""
    k, tallies = complete_tallies(problems, samples_path, bench)
    kept = [p for p in problems if tallies[p.id].correct < k]
    dropped = [p for p in problems if tallies[p.id].correct >= k]
    return DifficultySplit(k=k, kept=kept, dropped=dropped)


def split_by_pass_rate(problems: list[Problem], samples_path: str | Path, bench: str) -> PassRateSplit:
    """The problems with 0 < p < 1, and the rest; see the module docstring."""
    k, tallies = complete_tallies(problems, samples_path, bench)
    correct = {p.id: tallies[p.id].correct for p in problems}
    return PassRateSplit(k=k, kept=[p for p in problems if 0 < correct[p.id] < k],
                         always=[p for p in problems if correct[p.id] >= k],
                         never=[p for p in problems if correct[p.id] == 0],
                         pass_rates={pid: n / k for pid, n in correct.items()})


def complete_tallies(problems: list[Problem], samples_path: str | Path, bench: str
                     ) -> tuple[int, dict[str, SampleTally]]:
    """k and every problem's tally, or ``DataError`` when a problem has fewer than k samples."""
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
    return k, tallies
