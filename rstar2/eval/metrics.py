"""Evaluation metrics over graded samples: per problem, then per benchmark.

Definitions (n samples of a problem, c of them correct):

* **avg@n** -- c/n averaged over problems: the paper's "average pass@1" (§5.1);
* **pass@k** -- the unbiased estimator 1 - C(n-c, k)/C(n, k) of Chen et al. (2021), for
  k = 1, 2, 4, ... up to n, and n itself (pass@1 equals avg@n);
* **maj@n** -- whether the most common final answer is correct. Correct answers all vote
  for the gold answer (the grader already proved them equal to it); wrong answers vote for
  their normalised text; a missing answer does not vote. A tie between the top answers
  scores the share of them that is correct (the expected score of a uniformly random
  tie-break), so the metric never depends on sample order;
* lengths in tokens of the whole response after the prompt (sampled and tool tokens, the
  paper's "response length"), tool calls per answer, the tool-error ratio (failed calls over
  all calls), the share of samples with no final answer, and the share cut by the token limit;
* a 95% bootstrap confidence interval for avg@n, resampling problems (the unit that varies
  between benchmark draws), with a fixed seed so reports are reproducible;
* for two runs on the same problems, the paired difference of their per-problem accuracies with
  its bootstrap interval (``paired_difference``): both runs resampled by the same problems,
  which is far tighter than two separate intervals when the runs agree on most problems.

Everything is computed from samples sorted into benchmark order, so the same samples give
bit-identical metrics however a run was interrupted and resumed.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rstar2.eval.samples import SampleOutcome
from rstar2.reward.normalize import canonical_integer, normalize_answer

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n is correct.

    Computed as a product, 1 - prod_{i<k} (n-c-i)/(n-i), which never forms the huge binomials.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def k_values(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    ks = [1 << i for i in range(n.bit_length()) if 1 << i <= n]
    return ks if ks[-1] == n else [*ks, n]


def vote_key(pred: str | None, correct: bool, gold: str) -> str | None:
    """What a sample votes for in maj@n; see the module docstring."""
    if correct:
        return f"gold:{gold}"
    if pred is None:
        return None
    return f"pred:{canonical_integer(pred) or normalize_answer(pred)}"


def majority_score(votes: Sequence[tuple[str | None, bool]]) -> float:
    """maj@n of one problem from (vote key, correct) pairs; ties score the correct share."""
    counts = Counter(key for key, _ in votes if key is not None)
    if not counts:
        return 0.0
    top = max(counts.values())
    leaders = {key for key, count in counts.items() if count == top}
    correct_keys = {key for key, correct in votes if correct}
    return len(leaders & correct_keys) / len(leaders)


@dataclass(frozen=True)
class ProblemStats:
    """One problem's samples, summarised."""

    problem_id: str
    samples: int
    correct: int
    pass_at: dict[int, float]
    maj: float
    mean_response_tokens: float
    tool_calls: int
    tool_errors: int
    no_answer: int
    truncated: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.samples


def problem_stats(problem_id: str, gold: str, samples: Sequence[SampleOutcome]) -> ProblemStats:
    """Summarise the samples of one problem (at least one)."""
    n, c = len(samples), sum(s.correct for s in samples)
    return ProblemStats(
        problem_id=problem_id,
        samples=n,
        correct=c,
        pass_at={k: pass_at_k(n, c, k) for k in k_values(n)},
        maj=majority_score([(vote_key(s.pred, s.correct, gold), s.correct) for s in samples]),
        mean_response_tokens=statistics.fmean(s.response_tokens for s in samples),
        tool_calls=sum(s.tool_calls for s in samples),
        tool_errors=sum(s.tool_errors for s in samples),
        no_answer=sum(s.pred is None for s in samples),
        truncated=sum(s.truncated for s in samples),
    )


@dataclass(frozen=True)
class BenchmarkStats:
    """A benchmark's metrics; see the module docstring for each definition."""

    name: str
    problems: int
    samples: int
    n: int
    """Samples per problem (the smallest count, if problems differ)."""
    avg: float
    avg_ci: tuple[float, float]
    pass_at: dict[int, float]
    maj: float
    mean_response_tokens: float
    median_response_tokens: float
    tool_calls_per_answer: float
    tool_error_ratio: float
    no_answer_share: float
    truncated_share: float


def benchmark_stats(name: str, per_problem: Sequence[ProblemStats],
                    samples: Sequence[SampleOutcome]) -> BenchmarkStats:
    """Aggregate per-problem stats (and the raw samples, for length quantiles) of one benchmark."""
    n = min(p.samples for p in per_problem)
    accuracies = [p.accuracy for p in per_problem]
    calls = sum(p.tool_calls for p in per_problem)
    return BenchmarkStats(
        name=name,
        problems=len(per_problem),
        samples=len(samples),
        n=n,
        avg=statistics.fmean(accuracies),
        avg_ci=bootstrap_ci(accuracies),
        pass_at={k: statistics.fmean(pass_at_k(p.samples, p.correct, k) for p in per_problem)
                 for k in k_values(n)},
        maj=statistics.fmean(p.maj for p in per_problem),
        mean_response_tokens=statistics.fmean(s.response_tokens for s in samples),
        median_response_tokens=float(statistics.median(s.response_tokens for s in samples)),
        tool_calls_per_answer=calls / len(samples),
        tool_error_ratio=sum(p.tool_errors for p in per_problem) / calls if calls else 0.0,
        no_answer_share=sum(p.no_answer for p in per_problem) / len(samples),
        truncated_share=sum(p.truncated for p in per_problem) / len(samples),
    )


def bootstrap_ci(values: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES,
                 seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Percentile bootstrap interval (``CONFIDENCE``) for the mean of ``values``."""
    data = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    tail = (1.0 - CONFIDENCE) / 2
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class PairedDifference:
    """Run B minus run A over the problems both evaluated (``paired_difference``)."""

    difference: float
    """Mean of B's per-problem accuracy minus A's."""
    ci: tuple[float, float]
    """Its bootstrap interval (``CONFIDENCE``), resampling the shared problems."""
    problems: int
    better: int
    """Problems B got more often right than A."""
    worse: int


def paired_difference(first: Mapping[str, float], second: Mapping[str, float]) -> PairedDifference | None:
    """``second`` minus ``first`` (accuracies by problem id) over the problems both have; None
    when they share none."""
    shared = sorted(first.keys() & second.keys())
    if not shared:
        return None
    differences = [float(second[pid]) - float(first[pid]) for pid in shared]
    return PairedDifference(difference=statistics.fmean(differences), ci=bootstrap_ci(differences),
                            problems=len(shared), better=sum(d > 0 for d in differences),
                            worse=sum(d < 0 for d in differences))
