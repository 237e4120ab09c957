"""Resample-on-Correct: penalties, keep counts, sampling distributions, zero variance, switches.
The release's own rules (text penalties, group sizes) are in test_roc_release.py."""

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest

from rstar2.agent.trajectory import ToolCallRecord, Trajectory, Turn
from rstar2.rl.advantage import group_algorithm
from rstar2.rl.config import RLConfig, RocConfig
from rstar2.rl.roc import (
    RolloutSummary,
    TextFacts,
    decision_counts,
    format_penalty,
    paper_keep_counts,
    release_keep_counts,
    rollout_metrics,
    tool_error_ratio,
    total_penalty,
    trajectory_facts,
)


def algorithm(mode="paper", keep=4, **roc):
    return group_algorithm(RLConfig(steps=1, group_size=keep, roc=RocConfig(mode=mode, **roc)))


PAPER = algorithm("paper")
PAPER_KEEP_ALL = algorithm("paper", drop_zero_variance=False)
RELEASE = algorithm("release")
RELEASE_KEEP_ALL = algorithm("release", drop_zero_variance=False)


def rollout(reward, calls=2, errors=0, answers=1, turns=3):
    """Facts whose text agrees with them: every call has a response block, failed ones say
    "error", the answers are balanced and every turn after the first is closed."""
    text = TextFacts(answer_openers=answers, answer_closers=answers, closed_answers=answers,
                     tool_responses=calls, error_responses=errors, counted_turns=turns - 1)
    return RolloutSummary(reward=reward, tool_calls=calls, tool_errors=errors, answer_blocks=answers,
                          turns=turns, text=text)


def group(positives, negatives, **facts):
    """Positives first, then negatives, all with the same facts."""
    return [rollout(1.0, **facts)] * positives + [rollout(0.0, **facts)] * negatives


def kept_sides(decision, rollouts):
    pos = sum(rollouts[i].reward == 1.0 for i in decision.kept)
    return pos, len(decision.kept) - pos


# --- penalties -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("calls", "errors", "expected"),
    [(0, 0, 0.5), (4, 0, 0.0), (4, 1, 0.25), (3, 3, 1.0), (5, 2, 0.4)],
)
def test_tool_error_ratio(calls, errors, expected):
    assert tool_error_ratio(rollout(1.0, calls=calls, errors=errors)) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("answers", "turns", "expected"),
    [
        (0, 1, 1.0),  # no <answer> at all
        (0, 7, 1.0),
        (1, 1, 0.0),  # exactly one answer: no penalty, however many turns
        (1, 9, 0.0),
        (2, 4, 0.25),  # one surplus answer over four turns
        (3, 4, 0.5),
        (5, 2, 1.0),  # (5 - 1) / 2 = 2, capped at 1
    ],
)
def test_format_penalty(answers, turns, expected):
    assert format_penalty(rollout(1.0, answers=answers, turns=turns)) == pytest.approx(expected)


def test_total_penalty_adds_both():
    # no tool calls (0.5) and two answers in two turns (0.5)
    assert total_penalty(rollout(1.0, calls=0, answers=2, turns=2)) == pytest.approx(1.0)
    # the worst case: every call failed and no answer
    assert total_penalty(rollout(0.0, calls=3, errors=3, answers=0)) == pytest.approx(2.0)


def test_any_object_with_the_facts_is_accepted():
    text = TextFacts(1, 1, 1, 1, 0, 1)
    loose = [SimpleNamespace(reward=r, tool_calls=1, tool_errors=0, answer_blocks=1, turns=2, text=text)
             for r in (1.0, 0.0) * 4]
    for mode in ("paper", "release", "off"):
        decision = algorithm(mode).select(loose, np.random.default_rng(0))
        assert len(decision.kept) == (8 if mode == "off" else 4) and decision.dropped is None


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (rollout(0.5), "binary"),
        (rollout(1.0, calls=1, errors=2), "tool_errors"),
        (rollout(1.0, turns=0), "turn"),
    ],
)
def test_uninterpretable_rollouts_are_rejected(bad, message):
    with pytest.raises(ValueError, match=message):
        PAPER.select([bad, rollout(0.0)], np.random.default_rng(0))


@pytest.mark.parametrize(
    ("positives", "negatives", "expected"),
    [
        (3, 6, (2, 2)),  # 9 > G = 4: ⌊6·4/9⌋ = 2 negatives, the other 2 positives
        (4, 5, (2, 2)),  # ⌊5·4/9⌋ = 2
        (1, 8, (1, 3)),  # ⌊8·4/9⌋ = 3
        (2, 1, (2, 1)),  # 3 <= G: nothing to choose, all kept
        (2, 2, (2, 2)),
    ],
)
def test_paper_mode_on_groups_other_than_2g(positives, negatives, expected):
    rollouts = group(positives, negatives)
    assert kept_sides(PAPER.select(rollouts, np.random.default_rng(0)), rollouts) == expected


# --- keep counts -----------------------------------------------------------------------------

# 2G = 8, G = 4: (kept positives, kept negatives) for |O_pos| = 0..8.
PAPER_COUNTS_2G8 = [(0, 4), (1, 3), (1, 3), (2, 2), (2, 2), (3, 1), (3, 1), (4, 0), (4, 0)]
RELEASE_COUNTS_2G8 = [(0, 4), (1, 3), (2, 2), (2, 2), (2, 2), (2, 2), (2, 2), (3, 1), (4, 0)]


@pytest.mark.parametrize("positives", range(9))
def test_paper_keep_counts_for_every_split_of_eight(positives):
    rollouts = group(positives, 8 - positives)
    decision = PAPER_KEEP_ALL.select(rollouts, np.random.default_rng(positives))
    assert kept_sides(decision, rollouts) == PAPER_COUNTS_2G8[positives]


@pytest.mark.parametrize("size", [2, 4, 6, 10, 12, 32])
def test_paper_keeps_half_the_negatives_and_the_rest_positives(size):
    for positives in range(size + 1):
        negatives = size - positives
        kept_pos, kept_neg = paper_keep_counts(positives, negatives, size // 2)
        assert kept_neg == negatives // 2
        assert kept_pos == math.ceil(positives / 2)
        assert kept_pos + kept_neg == size // 2


@pytest.mark.parametrize("positives", range(9))
def test_release_keep_counts_for_every_split_of_eight(positives):
    rollouts = group(positives, 8 - positives)
    decision = RELEASE_KEEP_ALL.select(rollouts, np.random.default_rng(0))
    assert kept_sides(decision, rollouts) == RELEASE_COUNTS_2G8[positives]


# 2G = 32, G = 16, floor 2: (kept positives, kept negatives) for |O_neg| = 0..32, worked out from
# the release's roc.py:59-70: each side round(|O|/2), half to even (|O_neg| = 7 -> round(3.5) = 4,
# 9 -> round(4.5) = 4), so for even G the two shares always sum to G; then a side at or below
# min(2, available) is set to that and the other fills 16 (|O_neg| = 1: 0 -> 1; 2..5: 1 or 2 ->
# 2; 27..30: the positives' 2 or 1 -> 2; 31: 0 -> 1).
RELEASE_COUNTS_2G32 = [
    (16, 0), (15, 1), (14, 2), (14, 2), (14, 2), (14, 2), (13, 3), (12, 4), (12, 4), (12, 4),
    (11, 5), (10, 6), (10, 6), (10, 6), (9, 7), (8, 8), (8, 8), (8, 8), (7, 9), (6, 10),
    (6, 10), (6, 10), (5, 11), (4, 12), (4, 12), (4, 12), (3, 13), (2, 14), (2, 14), (2, 14),
    (2, 14), (1, 15), (0, 16),
]


@pytest.mark.parametrize("negatives", range(33))
def test_release_keep_counts_for_every_split_of_32(negatives):
    assert release_keep_counts(32 - negatives, negatives, keep=16, floor=2) == RELEASE_COUNTS_2G32[negatives]


@pytest.mark.parametrize("keep", [2, 4, 5, 7, 8, 16])
def test_release_counts_always_fill_the_group_within_what_is_there(keep):
    floor = min(2, keep // 2)
    for size in range(keep + 1, 3 * keep + 2):
        for positives in range(size + 1):
            negatives = size - positives
            kept_pos, kept_neg = release_keep_counts(positives, negatives, keep, floor)
            assert kept_pos + kept_neg == keep
            assert 0 <= kept_pos <= positives and 0 <= kept_neg <= negatives
            assert kept_pos >= min(floor, positives) and kept_neg >= min(floor, negatives)


# --- which rollouts ----------------------------------------------------------------------------


def test_paper_negatives_are_uniform_whatever_their_penalties():
    # 2 positives, 6 negatives with very different penalties; 3 negatives are kept.
    negatives = [rollout(0.0, calls=c, errors=e, answers=a) for c, e, a in
                 [(4, 0, 1), (4, 4, 0), (0, 0, 0), (2, 1, 1), (1, 0, 3), (3, 3, 1)]]
    rollouts = [rollout(1.0), rollout(1.0)] + negatives
    rng = np.random.default_rng(7)
    subsets = {}
    draws = 6000
    for _ in range(draws):
        kept = tuple(i for i in PAPER.select(rollouts, rng).kept if i >= 2)
        subsets[kept] = subsets.get(kept, 0) + 1
    assert len(subsets) == math.comb(6, 3)  # every 3-subset occurs
    expected = draws / math.comb(6, 3)
    chi_square = sum((count - expected) ** 2 / expected for count in subsets.values())
    assert chi_square < 45  # 19 degrees of freedom; p ~ 0.0007 under uniformity
    inclusion = [sum(c for s, c in subsets.items() if i in s) / draws for i in range(2, 8)]
    assert max(abs(p - 0.5) for p in inclusion) < 0.03


def successive_inclusion(weights, k):
    """Exact inclusion probabilities when drawing k items one at a time ∝ weight without
    replacement (enumerating every ordered draw)."""
    inclusion = [0.0] * len(weights)
    for order in itertools.permutations(range(len(weights)), k):
        probability, left = 1.0, sum(weights)
        for i in order:
            probability *= weights[i] / left
            left -= weights[i]
        for i in order:
            inclusion[i] += probability
    return inclusion


def test_paper_prefers_low_penalty_positives_in_proportion_to_inverse_penalty():
    # 4 positives with p_total 0, 0.25, 0.5, 1.0; 4 negatives -> 2 of the 4 positives are kept.
    positives = [rollout(1.0, calls=4, errors=0), rollout(1.0, calls=4, errors=1),
                 rollout(1.0, calls=0), rollout(1.0, calls=4, errors=2, answers=3, turns=4)]
    penalties = [total_penalty(r) for r in positives]
    assert penalties == pytest.approx([0.0, 0.25, 0.5, 1.0])
    rollouts = positives + group(0, 4)
    paper = algorithm("paper", penalty_epsilon=0.1)
    rng = np.random.default_rng(11)
    draws = 8000
    counts = [0] * 4
    for _ in range(draws):
        for i in paper.select(rollouts, rng).kept:
            if i < 4:
                counts[i] += 1
    measured = [c / draws for c in counts]
    expected = successive_inclusion([1 / (p + 0.1) for p in penalties], 2)
    assert measured == pytest.approx(expected, abs=0.02)
    assert measured[0] > measured[1] > measured[2] > measured[3]
    assert measured[3] > 0.05  # a preference, not a sort: the worst trace still survives sometimes


def test_paper_single_draw_matches_the_weight_ratio():
    # 2 positives (p_total 0 and 0.5), 6 negatives: one positive is kept.
    rollouts = [rollout(1.0, calls=3), rollout(1.0, calls=0)] + group(0, 6)
    rng = np.random.default_rng(3)
    first = sum(0 in PAPER.select(rollouts, rng).kept for _ in range(4000)) / 4000
    assert first == pytest.approx((1 / 0.1) / (1 / 0.1 + 1 / 0.6), abs=0.02)  # 0.857


def test_release_keeps_lowest_penalty_positives_and_first_negatives_deterministically():
    rollouts = [
        rollout(0.0, calls=4, errors=4, answers=0),  # 0: negative, worst penalty
        rollout(1.0, calls=4, errors=2),  # 1: p = 0.5
        rollout(1.0, calls=4, errors=0),  # 2: p = 0
        rollout(0.0, calls=4, errors=0),  # 3: negative, best penalty
        rollout(1.0, calls=4, errors=1),  # 4: p = 0.25
        rollout(1.0, calls=4, errors=0),  # 5: p = 0, a tie with 2
        rollout(0.0, calls=0),  # 6: negative
        rollout(1.0, calls=0, answers=0),  # 7: p = 1.5
    ]
    decisions = {RELEASE.select(rollouts, np.random.default_rng(seed)).kept for seed in range(20)}
    # 5 positives, 3 negatives: round(1.5) = 2 negatives, 2 positives.
    # Positives by penalty: 2 and 5 (tie kept in rollout order). Negatives: the first two, 0 and 3,
    # not the lowest-penalty ones (the release dropped penalty order for negatives, PR #50).
    assert decisions == {(0, 2, 3, 5)}


def test_off_keeps_every_rollout():
    rollouts = group(1, 3)
    assert algorithm("off").select(rollouts, np.random.default_rng(0)).kept == (0, 1, 2, 3)
    odd = group(2, 1)  # with RoC off the group is G, which may be odd
    assert algorithm("off", keep=3).select(odd, np.random.default_rng(0)).kept == (0, 1, 2)


# --- zero variance -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["paper", "release", "off"])
@pytest.mark.parametrize("reward", [0.0, 1.0])
def test_uniform_groups_are_dropped_in_every_mode(mode, reward):
    rollouts = [rollout(reward)] * 8
    decision = algorithm(mode).select(rollouts, np.random.default_rng(0))
    assert decision.kept == () and decision.dropped == "uniform_rewards"
    assert decision.penalties == tuple(total_penalty(r) for r in rollouts)  # measured all the same


def test_paper_group_with_one_negative_becomes_uniform_and_is_dropped():
    decision = PAPER.select(group(7, 1), np.random.default_rng(0))
    assert decision.kept == () and decision.dropped == "uniform_after_selection"
    # the release's floor keeps that negative instead
    release = RELEASE.select(group(7, 1), np.random.default_rng(0))
    assert release.dropped is None and 7 in release.kept


@pytest.mark.parametrize("positives", [1, 31])
def test_release_without_a_floor_keeps_a_selection_that_became_uniform(positives):
    # 32 rollouts, G = 16, min_per_side 0. 1 positive: round(31·16/32 = 15.5) = 16 negatives and
    # round(0.5) = 0 positives; 0 <= min(0, 1) resets positives to 0 and negatives to 16. 31
    # positives: mirrored. The release checks equal rewards only before selection (its
    # reject_equal_reward), so it trains on the 16 equal rewards (advantage 0); so does
    # release mode. Paper mode drops such a selection.
    rollouts = group(positives, 32 - positives)
    release = algorithm("release", keep=16, min_per_side=0).select(rollouts, np.random.default_rng(0))
    assert release.dropped is None and len(release.kept) == 16
    assert len({rollouts[i].reward for i in release.kept}) == 1
    paper = algorithm("paper", keep=16).select(rollouts, np.random.default_rng(0))
    assert (paper.dropped == "uniform_after_selection") == (positives == 31)


def test_uniform_groups_are_kept_when_dropping_is_off():
    decision = PAPER_KEEP_ALL.select(group(8, 0), np.random.default_rng(0))
    assert len(decision.kept) == 4 and decision.dropped is None


def test_decision_counts():
    rng = np.random.default_rng(0)
    decisions = [PAPER.select(g, rng) for g in (group(8, 0), group(0, 8), group(7, 1), group(4, 4))]
    decisions.append(RELEASE.select(group(2, 1), rng))
    assert decision_counts(decisions) == {
        "roc/groups": 5.0,
        "roc/groups_used": 1.0,
        "roc/dropped_uniform_rewards": 2.0,
        "roc/dropped_uniform_after_selection": 1.0,
        "roc/dropped_small_group": 1.0,
        "roc/dropped_stale": 0.0,
        "roc/dropped_share": 0.8,
    }


def test_same_seed_same_decisions():
    rollouts = [rollout(float(i % 3 == 0), calls=i % 4, errors=min(i % 4, i % 2)) for i in range(32)]
    paper = algorithm("paper", keep=16)
    first = [paper.select(rollouts, np.random.default_rng(5)).kept for _ in range(3)]
    assert first[0] == first[1] == first[2]
    others = {paper.select(rollouts, np.random.default_rng(seed)).kept for seed in range(10)}
    assert len(others) > 1


def test_rollout_metrics_pool_calls_and_separate_positives():
    rollouts = [
        rollout(1.0, calls=4, errors=1),  # p_err 0.25, p_format 0
        rollout(1.0, calls=0, answers=2, turns=2),  # p_err 0.5, p_format 0.5
        rollout(0.0, calls=5, errors=5, answers=0),  # p_err 1, p_format 1
        rollout(0.0, calls=1, errors=0),  # p_err 0, p_format 0
    ]
    decisions = [PAPER.select(rollouts[:2], np.random.default_rng(0)), PAPER.select(rollouts[2:], None)]
    assert rollout_metrics(rollouts, decisions) == pytest.approx({
        "tools/calls_per_rollout": 10 / 4,
        "tools/error_ratio": 6 / 10,
        "tools/error_ratio_in_positives": 1 / 4,  # pooled over calls, not a mean of p_err
        "roc/tool_error_penalty_mean": (0.25 + 0.5 + 1 + 0) / 4,
        "roc/format_penalty_mean": (0 + 0.5 + 1 + 0) / 4,
    })
    # the penalties are the mode's: the release's turn count makes two answers in two turns 1.0
    release = [RELEASE.select(rollouts, None)]
    assert rollout_metrics(rollouts, release)["roc/format_penalty_mean"] == pytest.approx((0 + 1 + 1 + 0) / 4)
    lone = [rollout(0.0, calls=0)]
    assert rollout_metrics(lone, [PAPER.select(lone, None)])["tools/error_ratio_in_positives"] == 0.0


def test_facts_of_an_agent_trajectory():
    def call(turn, status, error):
        return ToolCallRecord(turn=turn, code=None, raw="...", status=status, output="...", error=error)

    calls = [call(0, "error", True), call(1, "parse_error", True), call(2, "ok", False),
             call(3, "timeout", True)]
    turns = [
        Turn(role="assistant", text="<answer>1</answer> <tool_call>...</tool_call>", start=0, end=5),
        Turn(role="tool", text="<tool_response><answer>9</answer></tool_response>", start=5, end=9),
        Turn(role="assistant", text="<answer>\\boxed{2}</answer><answer>", start=9, end=12),
    ]
    trajectory = Trajectory(
        prompt_ids=[1], prompt_text="q", response_ids=list(range(12)), loss_mask=[1] * 12,
        logprobs=[0.0] * 12, turns=turns, tool_calls=calls, num_assistant_turns=5,
        final_answer="\\boxed{2}", stop_reason="answer", temperature=1.0,
    )
    facts = trajectory_facts(trajectory, reward=1.0)
    # parse error, execution error and timeout all count; the tool's printed <answer> does not,
    # nor does the unclosed one. The release's text view counts both, over the whole response:
    # 4 openers, 3 closers, 3 closed blocks, one response block without "error", and the 4 turns
    # after the first (the rollout ended with an answer, so its last turn was closed).
    assert facts == RolloutSummary(reward=1.0, tool_calls=4, tool_errors=3, answer_blocks=2, turns=5,
                                   text=TextFacts(4, 3, 3, 1, 0, 4))
    assert tool_error_ratio(facts) == 0.75 and format_penalty(facts) == pytest.approx(1 / 5)
