"""``rl.roc.mode: release`` against the official code's rules, on hand-built rollouts.

Every expected value below was worked out by reading microsoft/rStar at ecbfb94
(``rstar2_agent/down_sample/roc.py``, ``reject_sampling.py``, the caller
``RStar2AgentRayTrainer._down_sample_batch``), whose rules read the decoded response text: the
turns of a trajectory joined, laid out as the agent renders them with a ChatML template (an
assistant turn ends with ``<|im_end|>`` unless the budget cut it; a tool turn carries
``<tool_response>`` blocks up to the next assistant header and ``<reason>``; ``trajectory``
builds them, as for the benchmark that runs the official code on many such groups).
"""

import numpy as np
import pytest

from benchmarks.roc_release_bench import ANSWER, CALL, trajectory
from rstar2.agent.toolcall import tool_output
from rstar2.rl.advantage import GROUP_ALGORITHMS, PaperRoC, PlainGRPO, ReleaseRoC, group_algorithm
from rstar2.rl.config import RLConfig, RocConfig
from rstar2.rl.roc import (
    format_penalty,
    release_format_penalty,
    text_error_ratio,
    tool_error_ratio,
    trajectory_facts,
)
from rstar2.sandbox.protocol import RunResult

TIMEOUT = tool_output(RunResult(status="timeout", stdout="12\n"))  # the agent's words for a timeout
CLEAN = trajectory((CALL, [("ok", "4")]), (ANSWER, []))
STRAY_OPENER = trajectory((CALL, [("ok", "4")]), (ANSWER + " <answer>", []))
STRAY_CLOSER = trajectory((CALL, [("ok", "4")]), (ANSWER + " </answer>", []))
ONE_TURN = trajectory((ANSWER, []))
TIMEOUT_ONLY = trajectory((CALL, [("timeout", TIMEOUT)]), (ANSWER, []))
PRINTS_ERROR = trajectory((CALL, [("ok", "no error found")]), (ANSWER, []))
TRACEBACK = trajectory((CALL, [("error", "ZeroDivisionError: division by zero"), ("ok", "4")]), (ANSWER, []))
PRINTED_ANSWER = trajectory((CALL, [("ok", "<answer>5</answer>")]), (ANSWER, []))
TWO_ANSWERS = trajectory((CALL + " <answer>3</answer>", [("ok", "4")]), (CALL, [("ok", "4")]), (ANSWER, []))
NO_ANSWER = trajectory((CALL, [("ok", "4")]), ("so</reason>", []), stop="no_tool_call")
LAST_TURN_CUT = trajectory((CALL, [("ok", "4")]), (CALL, [("ok", "4")]), (ANSWER + " and", []),
                           stop="max_tokens", cut=True)
RESPONSE_DID_NOT_FIT = trajectory((CALL, [("ok", "4")]), (ANSWER + CALL, [("ok", "4")]), stop="max_tokens")


@pytest.mark.parametrize(
    ("rollout", "release_format", "paper_format", "text_error", "outcome_error"),
    [
        # balanced, one answer, one counted turn: (1 - 1) / 1
        (CLEAN, 0.0, 0.0, 0.0, 0.0),
        # 2 "<answer>" but 1 closed block (roc.py:109-112): 1; the paper counts closed blocks only
        (STRAY_OPENER, 1.0, 0.0, 0.0, 0.0),
        (STRAY_CLOSER, 1.0, 0.0, 0.0, 0.0),
        # the first turn's header is in the prompt, so the turn regex finds none: 1 (roc.py:114-117);
        # no response block: p_err 0.5 by either rule
        (ONE_TURN, 1.0, 0.0, 0.5, 0.5),
        # a timeout whose text lacks "error" is no error to the text rule (roc.py:83)
        (TIMEOUT_ONLY, 0.0, 0.0, 0.0, 1.0),
        # a successful call that prints "error" is one
        (PRINTS_ERROR, 0.0, 0.0, 1.0, 0.0),
        (TRACEBACK, 0.0, 0.0, 0.5, 0.5),
        # the tool printed a balanced answer: 2 closed blocks over 1 counted turn; the paper reads
        # the assistant's text only
        (PRINTED_ANSWER, 1.0, 0.0, 0.0, 0.0),
        # 2 answers, turns 2 and 3 counted: (2 - 1) / 2; the paper divides by all 3 turns
        (TWO_ANSWERS, 0.5, 1 / 3, 0.0, 0.0),
        (NO_ANSWER, 1.0, 1.0, 0.0, 0.0),
        # 3 turns, the last cut before <|im_end|>: only turn 2 counted; its answer stands alone
        (LAST_TURN_CUT, 0.0, 0.0, 0.0, 0.0),
    ],
    ids=["clean", "stray-opener", "stray-closer", "one-turn", "timeout", "prints-error", "traceback",
         "printed-answer", "two-answers", "no-answer", "last-turn-cut"],
)
def test_penalties_of_hand_built_rollouts(rollout, release_format, paper_format, text_error, outcome_error):
    facts = trajectory_facts(rollout, reward=1.0)
    assert release_format_penalty(facts) == pytest.approx(release_format)
    assert format_penalty(facts) == pytest.approx(paper_format)
    assert text_error_ratio(facts) == pytest.approx(text_error)
    assert tool_error_ratio(facts) == pytest.approx(outcome_error)


def test_turn_count_of_the_release():
    # the regex never sees the first turn, nor a last one cut before it closed; a last turn whose
    # calls ran but whose responses no longer fitted was closed, so it counts
    assert [trajectory_facts(t, 1.0).text.counted_turns for t in (ONE_TURN, CLEAN, TWO_ANSWERS)] == [0, 1, 2]
    assert trajectory_facts(LAST_TURN_CUT, 1.0).text.counted_turns == 1
    did_not_fit = trajectory_facts(RESPONSE_DID_NOT_FIT, 1.0)
    assert did_not_fit.text.counted_turns == 1
    # its second call ran (an outcome) but no response block reached the text
    assert (did_not_fit.tool_calls, did_not_fit.text.tool_responses) == (2, 1)


def algorithm(mode, keep, **roc):
    return group_algorithm(RLConfig(steps=1, group_size=keep, roc=RocConfig(mode=mode, **roc)))


NEGATIVE = trajectory((CALL, [("ok", "5")]), ("so</reason>\n<answer>\\boxed{5}</answer>", []))


@pytest.mark.parametrize(
    ("error_signal", "kept"),
    [
        # p_total (release format + text p_err): clean 0, stray opener 1, one-turn 1.5, timeout 0,
        # prints "error" 1 -> sorted stably: 0, 3, 1, 4, 2
        ("text", (0, 3, 5, 6)),
        # by outcome: clean 0, stray opener 1, one-turn 1.5, timeout 1, prints "error" 0 -> 0, 4, ...
        ("outcome", (0, 4, 5, 6)),
    ],
)
def test_release_keeps_the_positives_its_penalties_rank_first(error_signal, kept):
    # 5 positives, 3 negatives, G = 4: round(3·4/8 = 1.5) = 2 negatives, round(2.5) = 2
    # positives; both sides sit at the floor of 2 (roc.py:65-70), so 2 + 2; the first two
    # negatives in rollout order (5, 6), the two lowest-penalty positives
    positives = [CLEAN, STRAY_OPENER, ONE_TURN, TIMEOUT_ONLY, PRINTS_ERROR]
    rollouts = [trajectory_facts(t, 1.0) for t in positives] + [trajectory_facts(NEGATIVE, 0.0)] * 3
    release = algorithm("release", 4, error_signal=error_signal)
    assert release.select(rollouts, np.random.default_rng(0)).kept == kept


def facts_group(positives, negatives):
    return [trajectory_facts(CLEAN, 1.0)] * positives + [trajectory_facts(NEGATIVE, 0.0)] * negatives


@pytest.mark.parametrize(
    ("keep", "positives", "negatives", "release", "paper"),
    [
        # fewer than G: the release skips the group (roc.py:48-49); paper mode keeps it whole
        (16, 5, 10, "small_group", (5, 10)),
        # exactly G: kept whole (roc.py:50-52)
        (16, 5, 11, (5, 11), (5, 11)),
        # 30: round(27·16/30 = 14.4) = 14, round(3·16/30 = 1.6) = 2 -> positives at the floor:
        # 2 + 14. Paper: ⌊27·16/30⌋ = 14 negatives
        (16, 3, 27, (2, 14), (2, 14)),
        # 30: round(10·16/30 = 5.33) = 5, round(20·16/30 = 10.67) = 11
        (16, 20, 10, (11, 5), (11, 5)),
        # 30: round(16/30) = 1 negative, at the floor min(2, 1) = 1 -> 1 + 15
        (16, 29, 1, (15, 1), "uniform_after_selection"),  # paper: ⌊16/30⌋ = 0 negatives
        # 33: round(32·16/33 = 15.52) = 16, round(16/33 = 0.48) = 0 -> positives raised to
        # min(2, 1) = 1 -> 1 + 15. Paper: ⌊512/33⌋ = 15
        (16, 1, 32, (1, 15), (1, 15)),
        # 33: round(27·16/33 = 13.09) = 13, round(6·16/33 = 2.91) = 3
        (16, 6, 27, (3, 13), (3, 13)),
        # 33: round(2·16/33 = 0.97) = 1 negative -> raised to 2 -> 14 + 2. Paper: ⌊32/33⌋ = 0
        (16, 31, 2, (14, 2), "uniform_after_selection"),
        # G = 7 of 14, 5 positives: round(4.5) = 4 negatives, round(2.5) = 2 positives; 2 <= min(2, 5)
        # so positives stay 2 and negatives fill 5 (roc.py:68-70). Paper: ⌊9/2⌋ = 4 -> 3 + 4
        (7, 5, 9, (2, 5), (3, 4)),
        # G = 7, 9 positives: round(2.5) = 2 negatives at the floor -> 2 + 5 positives
        (7, 9, 5, (5, 2), (5, 2)),
        # G = 7, 7 of 14: round(3.5) = 4 each, neither at its floor: the release's assertion
        # (roc.py:73) stops the run; release mode keeps the 4 negatives and fills with 3
        (7, 7, 7, (3, 4), (4, 3)),
    ],
)
def test_group_sizes_other_than_2g(keep, positives, negatives, release, paper):
    """Each mode's verdict: (kept positives, kept negatives), or why the group was dropped."""
    rollouts = facts_group(positives, negatives)
    for mode, expected in (("release", release), ("paper", paper)):
        decision = algorithm(mode, keep).select(rollouts, np.random.default_rng(0))
        kept_positives = sum(rollouts[i].reward == 1.0 for i in decision.kept)
        verdict = decision.dropped or (kept_positives, len(decision.kept) - kept_positives)
        assert verdict == expected, mode


def test_release_keeps_the_first_negatives_in_rollout_order():
    # 3 positives of 30 with G = 16 keep 14 negatives: the first 14 of the 27, though the 13
    # after them have the lower penalty (the release sorts positives only, since PR #50)
    worse = trajectory_facts(ONE_TURN, 0.0)  # p_total 1.5, NEGATIVE's is 0
    rollouts = [worse] * 14 + facts_group(3, 13)[3:] + facts_group(3, 0)
    kept = algorithm("release", 16).select(rollouts, None).kept
    assert kept == tuple(range(14)) + (27, 28)


def test_every_mode_has_one_class_in_the_registry():
    modes = RocConfig.model_fields["mode"].annotation.__args__
    assert set(GROUP_ALGORITHMS) == set(modes)
    expected = {"paper": PaperRoC, "release": ReleaseRoC, "off": PlainGRPO}
    for mode in modes:
        assert type(algorithm(mode, 4)) is expected[mode]


def test_every_mode_gives_eq7_advantages_over_the_kept_rewards():
    # mean 0.6; unbiased variance (3·0.4² + 2·0.6²)/4 = 0.3, std 0.547723
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0]
    expected = [0.730297, -1.095445, -1.095445, 0.730297, 0.730297]
    for mode in GROUP_ALGORITHMS:
        assert algorithm(mode, 4).advantages(rewards) == pytest.approx(expected, abs=1e-5)
    assert algorithm("paper", 4).advantages([1.0, 1.0]) == [0.0, 0.0]
