"""The log-prob drift metric: how far the trainer's log-probs are from the sampled ones, over
the loss tokens, reported with the update's loss stats whenever the engine samples from its own
copy of the weights; the old log-probs of a one-update step taken from the update's own forward
pass; and the weight-version metrics, which show a stale sync by the versions engines stamp."""

import copy

import pytest
import torch

from rstar2.agent.trajectory import Trajectory
from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.rl.learner import LocalLearner
from rstar2.rl.metrics import weight_version_metrics
from rstar2.rl.rollout import Rollout
from rstar2.rl.update import policy_update, with_current_logprobs, with_engine_logprobs
from rstar2.run.settings import learner_settings
from rstar2.training.config import OptimizerConfig
from rstar2.training.optim import build_optimizer, build_scheduler
from tests.rl.test_trainer import make_config, rl_data  # noqa: F401
from tests.rl.test_update import SEQUENCES, SETTINGS, tiny_model

SPLIT = SETTINGS.__class__(**{**vars(SETTINGS), "micro_batch_tokens": 30})  # several micro-batches


def expected_deltas(sampled, recomputed):
    """|recomputed - sampled| over every loss token, matching sequences by their prompt."""
    fresh = {tuple(s.prompt_ids): s.old_logprobs for s in recomputed}
    return [abs(new - old) for s in sampled
            for new, old, m in zip(fresh[tuple(s.prompt_ids)], s.old_logprobs, s.loss_mask) if m]


def updated(model, sequences, old_from_forward=False, forwards=None):
    """One update of ``model`` (AdamW, no warm-up); its loss stats. ``forwards`` counts the
    model's forward passes."""
    if forwards is not None:
        model.register_forward_hook(lambda *_: forwards.append(1))
    optimizer = build_optimizer(model.parameters(), OptimizerConfig(lr=1e-3, warmup_steps=0))
    scheduler = build_scheduler(optimizer, OptimizerConfig(lr=1e-3, warmup_steps=0))
    stats, _ = policy_update(model, optimizer, scheduler, sequences, SPLIT, old_from_forward=old_from_forward)
    return stats


def test_drift_is_the_mean_and_max_over_loss_tokens_whichever_way_the_old_logprobs_come():
    model = tiny_model()
    deltas = expected_deltas(SEQUENCES, with_current_logprobs(model, SEQUENCES, SPLIT))
    assert len(deltas) == sum(s.loss_tokens for s in SEQUENCES)
    for stats in (updated(copy.deepcopy(model), with_current_logprobs(model, SEQUENCES, SPLIT)),
                  updated(copy.deepcopy(model), with_engine_logprobs(SEQUENCES), old_from_forward=True)):
        summary = stats.summary()
        assert summary["logprob_drift/mean"] == pytest.approx(sum(deltas) / len(deltas), rel=1e-5)
        assert summary["logprob_drift/max"] == pytest.approx(max(deltas), rel=1e-5)
    resampled = with_current_logprobs(model, SEQUENCES, SPLIT)  # as if these weights had sampled them
    again = updated(copy.deepcopy(model), with_engine_logprobs(resampled), old_from_forward=True).summary()
    assert again["logprob_drift/max"] < 1e-5  # sampled by the same weights and kernels: no drift
    assert "logprob_drift/mean" not in updated(copy.deepcopy(model), SEQUENCES).summary()  # nothing to compare


def test_one_update_a_step_takes_its_old_logprobs_from_its_own_forward_pass():
    """The same update as recomputing them first (ratio 1, the same importance weights and
    weights after the step), with one pass over each micro-batch instead of two."""
    model = tiny_model()
    recomputed, recomputed_passes = copy.deepcopy(model), []
    fresh = with_current_logprobs(recomputed, SEQUENCES, SPLIT)
    expected = updated(recomputed, fresh, forwards=recomputed_passes).summary()
    own, own_passes = copy.deepcopy(model), []
    stats = updated(own, with_engine_logprobs(SEQUENCES), old_from_forward=True, forwards=own_passes).summary()
    assert len(own_passes) == len(recomputed_passes) == 3  # the micro-batches, forward once each
    assert stats["loss/ratio_mean"] == 1.0 and stats["loss/clip_fraction"] == 0.0
    assert stats == pytest.approx(expected, rel=1e-5, abs=1e-7)
    assert stats["behaviour/weight_mean"] < 1.0  # the made-up sampled log-probs are weighted
    for a, b in zip(own.parameters(), recomputed.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


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


@pytest.mark.parametrize("updates", [1, 2])
def test_the_learner_reports_drift_when_the_engine_holds_its_own_copy(tmp_path, rl_data, engines, updates):  # noqa: F811
    config = make_config(tmp_path, rl_data, updates_per_step=updates)
    model, copy_engine, colocated_engine = engines
    apart = LocalLearner(learner_settings(config), model, copy_engine)
    stats, _ = apart.learn(list(SEQUENCES))
    assert stats is not None and stats.summary()["logprob_drift/mean"] > 0  # made-up sampled log-probs
    assert stats.summary()["logprob_drift/mean"] <= stats.summary()["logprob_drift/max"]
    together = LocalLearner(learner_settings(config), model, colocated_engine)
    stats, _ = together.learn(list(SEQUENCES))
    assert not any(k.startswith("logprob_drift/") for k in stats.summary())  # the sampled ones are the old


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
