"""When a run has learned nothing: the two streaks that end it (steps without an update, steps
whose every reward call failed) and the error line it ends with."""

from pathlib import Path

from rstar2.reward import Score
from rstar2.rl.silence import NothingLearned, SilenceWatch

OK, WRONG = Score(1.0), Score(0.0)
RAISED = Score(0.0, failure="error", message="RuntimeError: no reward for 42")
LATE = Score(0.0, failure="timeout", message="overran")


def watched(limit: int, *steps: tuple[bool, list[Score]]) -> SilenceWatch:
    watch = SilenceWatch(limit)
    for trained, scores in steps:
        watch.record(trained, scores)
    return watch


def test_steps_without_an_update_in_a_row_reach_the_limit_and_an_update_restarts_the_count():
    assert not watched(3, (False, [WRONG]), (False, [WRONG])).reached()
    assert watched(3, (False, [WRONG]), (False, [WRONG]), (False, [OK])).reached()
    assert not watched(3, (False, [WRONG]), (False, [WRONG]), (True, [OK, WRONG]), (False, [WRONG])).reached()


def test_steps_whose_every_reward_call_failed_reach_the_limit_even_when_they_updated():
    """An update on rewards that are all failures (``drop_zero_variance: false``) learns nothing."""
    assert watched(2, (True, [RAISED, RAISED]), (True, [RAISED, LATE])).reached()
    assert not watched(2, (True, [RAISED, RAISED]), (True, [RAISED, OK])).reached()  # one call scored
    assert not watched(2, (True, [RAISED]), (True, [])).reached()  # no call is no failure


def test_the_verdict_names_the_failed_reward_calls_and_the_first_failure():
    watch = watched(2, (True, [OK]), (True, [RAISED, LATE]), (True, [LATE, RAISED]))
    error = watch.verdict(3, 10, Path("runs/x"), "my_rewards:judge")
    text = str(error)
    assert text.startswith("stopped after step 3 of 10, a failed run: every reward call of the last 2 steps "
                           "failed (4 of 4, each scored 0)")
    assert "the first: error: RuntimeError: no reward for 42" in text  # the earliest of the streak
    assert "the reward function my_rewards:judge" in text and "rl.max_silent_steps (2)" in text
    assert error.step == 3 and text.endswith(f"its checkpoint in {Path('runs/x/checkpoints')}")
    verifier = watched(1, (False, [RAISED])).verdict(1, 2, Path("runs/x"), None)
    assert "built-in verifier" in str(verifier)


def test_the_verdict_of_steps_without_an_update_says_where_to_look_and_counts_their_failures():
    watch = watched(3, (False, [RAISED, RAISED]), (False, [OK, OK]), (False, [LATE, OK]), (False, [OK, WRONG]))
    text = str(watch.verdict(4, 6, Path("runs/x"), None))
    assert "the last 3 steps trained nothing: every group's rollouts scored alike" in text
    assert "1 of their 6 reward calls failed and scored 0 (the first: timeout: overran)" in text  # not step 1's
    assert str(Path("runs/x/rollouts/step_4.jsonl")) in text and "rl.optimizer.lr" in text
    quiet = watched(1, (False, [WRONG, WRONG])).verdict(1, 2, Path("runs/x"), None)
    assert "trained nothing: every rollout scored 0, so" in str(quiet) and "reward calls failed" not in str(quiet)


def test_the_error_says_where_the_exported_model_is_once_it_is():
    error = NothingLearned("stopped after step 2 of 5, a failed run: why", 2, Path("runs/x/checkpoints"))
    error.exported = Path("runs/x/final")
    assert str(error) == (f"stopped after step 2 of 5, a failed run: why. The model of step 2 is saved: "
                          f"{Path('runs/x/final')} (its checkpoint, for --resume, in {Path('runs/x/checkpoints')})")
