"""The log-prob drift metric: how far the learner's recomputed log-probs are from the sampled
ones, over the loss tokens, reported by the learner whenever it recomputes them; and the
weight-version metrics, which show a stale sync by the versions engines stamp."""

import copy

import pytest

from rstar2.agent.trajectory import Trajectory
from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.rl.learner import LocalLearner
from rstar2.rl.metrics import weight_version_metrics
from rstar2.rl.rollout import Rollout
from rstar2.rl.update import LogprobDrift, with_current_logprobs
from rstar2.run.settings import learner_settings
from tests.rl.test_trainer import make_config, rl_data  # noqa: F401
from tests.rl.test_update import SEQUENCES, SETTINGS, tiny_model


def expected_deltas(sampled, recomputed):
    """|recomputed - sampled| over every loss token, matching sequences by their prompt."""
    fresh = {tuple(s.prompt_ids): s.old_logprobs for s in recomputed}
    return [abs(new - old) for s in sampled
            for new, old, m in zip(fresh[tuple(s.prompt_ids)], s.old_logprobs, s.loss_mask) if m]


def test_drift_is_the_mean_and_max_over_loss_tokens():
    model = tiny_model()
    fresh, drift = with_current_logprobs(model, SEQUENCES, SETTINGS.__class__(
        **{**vars(SETTINGS), "micro_batch_tokens": 30}))  # several micro-batches
    deltas = expected_deltas(SEQUENCES, fresh)
    assert drift.tokens == len(deltas) == sum(s.loss_tokens for s in SEQUENCES)
    assert drift.summary()["logprob_drift/mean"] == pytest.approx(sum(deltas) / len(deltas), rel=1e-5)
    assert drift.summary()["logprob_drift/max"] == pytest.approx(max(deltas), rel=1e-5)
    _, again = with_current_logprobs(model, fresh, SETTINGS)  # same weights, same kernels
    assert again.tokens == drift.tokens and again.abs_max < 1e-5
    assert LogprobDrift().summary() == {"logprob_drift/mean": 0.0, "logprob_drift/max": 0.0}


@pytest.fixture
def engines(tokenizer):
    """A tiny policy with two engines: one sampling from a copy of its weights, one from the
    policy itself (colocated)."""
    model = tiny_model()
    copy_engine = HFEngine(HFEngineConfig(), model=copy.deepcopy(model), tokenizer=tokenizer)
    colocated_engine = HFEngine(HFEngineConfig(), model=model, tokenizer=tokenizer)
    yield model, copy_engine, colocated_engine
    copy_engine.shutdown()
    colocated_engine.shutdown()


def test_the_learner_reports_drift_when_it_recomputes(tmp_path, rl_data, engines):  # noqa: F811
    config = make_config(tmp_path, rl_data)
    model, copy_engine, colocated_engine = engines
    apart = LocalLearner(learner_settings(config), model, copy_engine)
    stats, _ = apart.learn(list(SEQUENCES))
    measured = apart.measured
    assert stats is not None and set(measured) == {"logprob_drift/mean", "logprob_drift/max"}
    assert measured["logprob_drift/mean"] > 0  # the sampled log-probs here are made up
    together = LocalLearner(learner_settings(config), model, colocated_engine)
    together.learn(list(SEQUENCES))
    assert together.measured == {}  # nothing recomputed, nothing measured


def test_a_stale_sync_shows_as_a_weight_version_lag():
    def rollout(version):
        return Rollout(Trajectory(
            prompt_ids=[1], prompt_text="p", response_ids=[5], loss_mask=[1], logprobs=[-0.5],
            turns=[], tool_calls=[], num_assistant_turns=1, final_answer=None,
            stop_reason="no_tool_call", temperature=1.0, weight_version=version), facts=None)

    fresh = weight_version_metrics([rollout(4), rollout(4)], expected=4)
    assert fresh == {"weights/version_min": 4.0, "weights/version_max": 4.0, "weights/version_lag": 0.0}
    stale = weight_version_metrics([rollout(4), rollout(3)], expected=4)  # one member missed a sync
    assert stale["weights/version_lag"] == 1.0 and stale["weights/version_min"] == 3.0
    assert weight_version_metrics([rollout(None)], expected=4) == {}  # no engine stamped one
