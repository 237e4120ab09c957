"""Metrics: the unbiased pass@k, maj@n with ties, per-benchmark aggregates, bootstrap CI."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from rstar2.eval.metrics import (
    benchmark_stats,
    bootstrap_ci,
    k_values,
    majority_score,
    pass_at_k,
    problem_stats,
    vote_key,
)
from rstar2.eval.samples import SampleOutcome


def closed_form(n: int, c: int, k: int) -> float:
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def enumerated(n: int, c: int, k: int) -> float:
    """Share of the k-subsets of n samples (c correct) holding a correct one: the definition."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_pass_at_k_matches_the_closed_form_and_the_definition(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(closed_form(n, c, k), abs=1e-12)
            assert pass_at_k(n, c, k) == pytest.approx(enumerated(n, c, k), abs=1e-12)


def test_pass_at_k_edge_values_and_large_n():
    assert pass_at_k(16, 0, 16) == 0.0
    assert pass_at_k(16, 1, 16) == 1.0
    assert pass_at_k(16, 5, 1) == pytest.approx(5 / 16)
    assert pass_at_k(1000, 3, 500) == pytest.approx(closed_form(1000, 3, 500), rel=1e-12)
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_k_values_are_powers_of_two_and_n():
    assert k_values(1) == [1]
    assert k_values(16) == [1, 2, 4, 8, 16]
    assert k_values(6) == [1, 2, 4, 6]


def votes(*pairs):
    return [(vote_key(pred, correct, "12"), correct) for pred, correct in pairs]


def test_majority_vote_plain_win_and_loss():
    assert majority_score(votes(("12", True), ("12", True), ("7", False))) == 1.0
    assert majority_score(votes(("12", True), ("7", False), ("7", False))) == 0.0


def test_majority_vote_counts_equivalent_correct_forms_as_one_answer():
    # "12", "12.0", "\\boxed{12}" were all graded correct: they are one answer, beating two "7"s.
    assert majority_score(votes(("12", True), ("12.0", True), ("012", True), ("7", False), ("7", False))) == 1.0
    # Wrong answers that are the same integer in different dress also pool their votes.
    assert majority_score(votes(("12", True), ("7", False), ("7.0", False), ("+7", False))) == 0.0


def test_majority_vote_ties_score_the_correct_share_of_the_leaders():
    assert majority_score(votes(("12", True), ("7", False))) == 0.5
    assert majority_score(votes(("12", True), ("7", False), ("9", False))) == pytest.approx(1 / 3)
    assert majority_score(votes(("7", False), ("9", False), ("12", True), ("12", True), ("9", False))) == 0.5
    # Order never matters.
    assert majority_score(votes(("7", False), ("12", True))) == majority_score(votes(("12", True), ("7", False)))


def test_majority_vote_ignores_missing_answers():
    assert majority_score(votes((None, False), (None, False), ("12", True))) == 1.0
    assert majority_score(votes((None, False), (None, False))) == 0.0


def outcome(pid, i, correct, pred="12", tokens=100, calls=0, errors=0, truncated=False):
    return SampleOutcome(bench="b", problem_id=pid, sample=i, gold="12", pred=pred, correct=correct,
                         response_tokens=tokens, generated_tokens=tokens, turns=1 + calls, tool_calls=calls,
                         tool_errors=errors, stop_reason="length" if truncated else "answer",
                         truncated=truncated, seconds=0.1)


def test_benchmark_aggregates():
    p1 = [outcome("p1", 0, True, tokens=100, calls=2, errors=1), outcome("p1", 1, False, pred=None, tokens=300)]
    p2 = [outcome("p2", 0, False, pred="3", tokens=200, calls=1, truncated=True),
          outcome("p2", 1, False, pred="3", tokens=400, calls=1, errors=1)]
    stats = [problem_stats("p1", "12", p1), problem_stats("p2", "12", p2)]
    assert (stats[0].correct, stats[0].accuracy, stats[0].maj) == (1, 0.5, 1.0)
    bench = benchmark_stats("b", stats, p1 + p2)
    assert bench.avg == 0.25
    assert bench.pass_at == {1: 0.25, 2: 0.5}
    assert bench.maj == 0.5
    assert bench.mean_response_tokens == 250 and bench.median_response_tokens == 250
    assert bench.tool_calls_per_answer == 1.0
    assert bench.tool_error_ratio == 0.5
    assert bench.no_answer_share == 0.25
    assert bench.truncated_share == 0.25
    assert bench.avg_ci[0] <= bench.avg <= bench.avg_ci[1]


def test_bootstrap_ci_brackets_the_mean_shrinks_with_more_problems_and_is_reproducible():
    small = [1.0, 0.0] * 10
    large = [1.0, 0.0] * 500
    low_s, high_s = bootstrap_ci(small)
    low_l, high_l = bootstrap_ci(large)
    assert low_s < 0.5 < high_s and low_l < 0.5 < high_l
    assert (high_l - low_l) < (high_s - low_s) / 4
    # Normal approximation: half-width ~ 1.96 * sd / sqrt(m).
    assert (high_l - low_l) / 2 == pytest.approx(1.96 * statistics.pstdev(large) / math.sqrt(len(large)), rel=0.15)
    assert bootstrap_ci(small) == (low_s, high_s)
    assert bootstrap_ci([0.25] * 5) == (0.25, 0.25)
