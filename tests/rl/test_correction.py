"""Importance weights against the engine's sampling policy (TIS, MIS): exact values by hand,
the cap, masked tokens, the sequence level, the loss they scale, and the learner that applies
them only where the engine holds its own copy of the weights."""

import math

import pytest
import torch

from rstar2.rl.config import LossConfig
from rstar2.rl.correction import behaviour_weights
from rstar2.rl.learner import LocalLearner
from rstar2.rl.loss import Behaviour, LossStats, policy_loss
from rstar2.run.settings import learner_settings
from tests.rl.test_trainer import make_config, rl_data  # noqa: F401
from tests.rl.test_drift import engines  # noqa: F401
from tests.rl.test_update import SEQUENCES

TIS = LossConfig()  # truncate, token level, cap 2
MASK = LossConfig(behaviour_correction="mask")
ALL = torch.ones(1, 4, dtype=torch.bool)
ONE_ROLLOUT = torch.zeros(1, 4, dtype=torch.long)


def logs(*ratios):
    return torch.log(torch.tensor([ratios]))


def test_weights_are_exactly_one_when_engine_and_trainer_agree():
    old = torch.tensor([[-0.3, -1.7, -2.2, -0.01]])
    for config in (TIS, MASK, LossConfig(behaviour_correction_level="sequence")):
        weights, sums = behaviour_weights(old, old.clone(), ONE_ROLLOUT, ALL, config)
        assert torch.equal(weights, torch.ones(1, 4))
        assert sums["behaviour_corrected"] == 0 and sums["mismatch_k3_sum"] == 0
        assert sums["behaviour_weight_max"] == 1.0


def test_truncation_caps_at_the_cap_and_counts_what_it_changed():
    # trainer / engine ratios 0.25, 0.9, 1.5, 8: only the last exceeds the cap of 2
    weights, sums = behaviour_weights(logs(0.25, 0.9, 1.5, 8.0), torch.zeros(1, 4), ONE_ROLLOUT, ALL, TIS)
    assert weights[0].tolist() == pytest.approx([0.25, 0.9, 1.5, 2.0])
    assert sums["behaviour_weight_max"] == pytest.approx(2.0)
    assert sums["behaviour_corrected"] == 1
    k3 = sum(r - 1 - math.log(r) for r in (0.25, 0.9, 1.5, 8.0))
    assert sums["mismatch_k3_sum"] == pytest.approx(k3, rel=1e-5)
    capped = LossConfig(behaviour_correction_cap=10.0)
    assert behaviour_weights(logs(8.0), torch.zeros(1, 1), ONE_ROLLOUT[:, :1], ALL[:, :1],
                             capped)[0].item() == pytest.approx(8.0)


def test_mask_zeroes_tokens_outside_the_band_on_both_sides():
    weights, sums = behaviour_weights(logs(0.25, 0.9, 1.5, 8.0), torch.zeros(1, 4), ONE_ROLLOUT, ALL, MASK)
    assert weights[0].tolist() == pytest.approx([0.0, 0.9, 1.5, 0.0])
    assert sums["behaviour_corrected"] == 2


def test_tokens_outside_the_loss_mask_carry_no_weight_and_no_mismatch():
    mask = torch.tensor([[True, False, True, False]])
    garbage = torch.tensor([[0.0, float("nan"), 0.0, 50.0]])  # masked positions may hold anything
    weights, sums = behaviour_weights(garbage, torch.zeros(1, 4), ONE_ROLLOUT, mask, TIS)
    assert weights[0].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert sums["behaviour_weight_sum"] == 2.0 and sums["mismatch_k3_sum"] == 0.0


def test_the_sequence_level_gives_each_rollout_the_geometric_mean_of_its_tokens():
    ratios = logs(0.5, 2.0, 4.0, 4.0)  # rollout 0: 0.5, 2 (mean 1); rollout 1: 4, 4 (mean 4)
    rollouts = torch.tensor([[0, 0, 1, 1]])
    sequence = LossConfig(behaviour_correction_level="sequence")
    weights, _ = behaviour_weights(ratios, torch.zeros(1, 4), rollouts, ALL, sequence)
    assert weights[0].tolist() == pytest.approx([1.0, 1.0, 2.0, 2.0])
    masked, sums = behaviour_weights(ratios, torch.zeros(1, 4), rollouts,
                                     ALL, sequence.model_copy(update={"behaviour_correction": "mask"}))
    assert masked[0].tolist() == pytest.approx([1.0, 1.0, 0.0, 0.0]) and sums["behaviour_corrected"] == 2


def test_the_loss_scales_each_tokens_term_by_its_weight():
    new = torch.log(torch.tensor([[0.5, 0.5]])).requires_grad_()
    old = torch.log(torch.tensor([[0.5, 0.5]]))
    advantages = torch.tensor([1.0])
    mask = torch.ones(1, 2, dtype=torch.bool)
    engine = torch.log(torch.tensor([[0.5, 0.1]]))  # the second token: weight 5, capped at 2
    behaviour = Behaviour(engine, torch.zeros(1, 2, dtype=torch.long))
    loss, stats = policy_loss(new, old, advantages, mask, TIS, behaviour=behaviour)
    assert loss.item() == pytest.approx(-(1.0 + 2.0) / 2)
    loss.backward()
    assert new.grad[0].tolist() == pytest.approx([-0.5, -1.0])  # weights are constants
    summary = stats.summary()
    assert summary["behaviour/weight_mean"] == pytest.approx(1.5)
    assert summary["behaviour/weight_max"] == pytest.approx(2.0)
    assert summary["behaviour/corrected_share"] == pytest.approx(0.5)
    plain, plain_stats = policy_loss(new, old, advantages, mask, TIS)
    assert plain.item() == pytest.approx(-1.0) and "behaviour/weight_mean" not in plain_stats.summary()


def test_stats_of_micro_batches_add_sums_and_keep_the_largest_weight():
    first = LossStats(tokens=2, behaviour_weight_sum=2.5, behaviour_weight_max=1.5, behaviour_corrected=0,
                      mismatch_k3_sum=0.1, drift_abs_sum=0.4, drift_abs_max=0.3)
    second = LossStats(tokens=2, behaviour_weight_sum=3.0, behaviour_weight_max=2.0, behaviour_corrected=1,
                       mismatch_k3_sum=0.3, drift_abs_sum=0.2, drift_abs_max=0.1)
    both = (first + second).summary()
    assert both["behaviour/weight_mean"] == pytest.approx(5.5 / 4)
    assert both["behaviour/weight_max"] == 2.0
    assert both["behaviour/corrected_share"] == pytest.approx(0.25)
    assert both["behaviour/mismatch_kl"] == pytest.approx(0.1)
    assert both["logprob_drift/mean"] == pytest.approx(0.15)
    assert both["logprob_drift/max"] == 0.3


def test_the_learner_corrects_only_against_an_engine_with_its_own_copy(tmp_path, rl_data, engines):  # noqa: F811
    config = make_config(tmp_path, rl_data)
    model, copy_engine, colocated_engine = engines
    apart, _ = LocalLearner(learner_settings(config), model, copy_engine).learn(list(SEQUENCES))
    # the sampled log-probs here are made up, so the trainer's recomputation differs
    assert apart.summary()["behaviour/mismatch_kl"] > 0
    together, _ = LocalLearner(learner_settings(config), model, colocated_engine).learn(list(SEQUENCES))
    assert "behaviour/weight_mean" not in together.summary()
    off = make_config(tmp_path, rl_data, loss={"behaviour_correction": "off"})
    uncorrected, _ = LocalLearner(learner_settings(off), model, copy_engine).learn(list(SEQUENCES))
    assert uncorrected.summary()["behaviour/weight_mean"] == 1.0  # measured, not applied
    assert uncorrected.summary()["behaviour/mismatch_kl"] > 0
