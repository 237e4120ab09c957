"""Advantages and the policy loss against hand-computed numbers; masking; options."""

import math

import pytest
import torch

from rstar2.rl.advantage import group_advantages
from rstar2.rl.config import LossConfig
from rstar2.rl.loss import LossStats, policy_loss
from rstar2.training.vocab import token_entropy, token_logprobs

PAPER = LossConfig()  # clip_low 0.2, clip_high 0.28, no KL, no entropy


def test_advantages_by_hand():
    # group 1: rewards 1,0,0,0 -> mean 0.25; unbiased variance (0.75² + 3·0.25²)/3 = 0.25, std 0.5
    #          -> (1 - 0.25)/0.5 = 1.5 and (0 - 0.25)/0.5 = -0.5
    # group 2: rewards 1,1,0,0 -> mean 0.5; variance 4·0.25/3 = 1/3, std 0.57735 -> ±0.866025
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    advantages = group_advantages(rewards, epsilon=1e-6)
    expected = torch.tensor([[1.5, -0.5, -0.5, -0.5], [0.866025, 0.866025, -0.866025, -0.866025]])
    assert torch.allclose(advantages, expected, atol=1e-5)


def test_zero_std_groups_get_zero_advantage():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.3, 0.3, 0.3]])
    assert torch.equal(group_advantages(rewards, epsilon=1e-6), torch.zeros(3, 3))


def test_advantages_use_only_their_own_group():
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    advantages = group_advantages(rewards, epsilon=1e-6)
    assert advantages[1].tolist() == [0.0, 0.0]
    assert advantages[0, 0] > 0 > advantages[0, 1]


def test_advantages_need_groups_of_two():
    with pytest.raises(ValueError, match="G >= 2"):
        group_advantages(torch.tensor([[1.0], [0.0]]), epsilon=1e-6)


def hand_example():
    """Two rollouts of three response tokens; the last token of rollout 1 is a tool token.

    old log-prob log 0.5 everywhere; new probabilities chosen so the ratios are
      rollout 1 (A = +1.5): 1.5, 0.8, [masked]
      rollout 2 (A = -0.5): 0.6, 1.1, 2.0
    """
    old = torch.full((2, 3), math.log(0.5))
    new = torch.log(torch.tensor([[0.75, 0.4, 0.3], [0.3, 0.55, 1.0]])).requires_grad_()
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    advantages = torch.tensor([1.5, -0.5])
    return new, old, advantages, mask


def test_policy_loss_by_hand():
    new, old, advantages, mask = hand_example()
    loss, stats = policy_loss(new, old, advantages, mask, PAPER)
    # objective = min(ρA, clip(ρ, 0.8, 1.28)·A) per loss token:
    #   ρ=1.5, A=+1.5: min(2.25, 1.28·1.5 = 1.92) = 1.92    clipped (high)
    #   ρ=0.8, A=+1.5: min(1.20, 0.80·1.5 = 1.20) = 1.20
    #   ρ=0.6, A=-0.5: min(-0.30, 0.80·-0.5 = -0.40) = -0.40 clipped (low)
    #   ρ=1.1, A=-0.5: min(-0.55, 1.10·-0.5 = -0.55) = -0.55
    #   ρ=2.0, A=-0.5: min(-1.00, 1.28·-0.5 = -0.64) = -1.00 (not clipped: ρ·A is smaller)
    # sum = 1.92 + 1.20 - 0.40 - 0.55 - 1.00 = 1.17 over 5 loss tokens -> loss = -1.17 / 5 = -0.234
    assert loss.item() == pytest.approx(-0.234, abs=1e-6)
    assert stats.summary()["loss/clip_fraction"] == pytest.approx(2 / 5)
    assert stats.summary()["loss/clip_fraction_low"] == pytest.approx(1 / 5)
    assert stats.summary()["loss/clip_fraction_high"] == pytest.approx(1 / 5)
    assert stats.summary()["loss/ratio_mean"] == pytest.approx((1.5 + 0.8 + 0.6 + 1.1 + 2.0) / 5)
    assert stats.tokens == 5
    loss.backward()
    # d loss / d logprob = -ρ·A / 5 where the unclipped branch is active, 0 where clipped or masked:
    #   (1,2): -0.8·1.5/5 = -0.24   (2,2): -1.1·-0.5/5 = 0.11   (2,3): -2.0·-0.5/5 = 0.2
    expected = torch.tensor([[0.0, -0.24, 0.0], [0.0, 0.11, 0.2]])
    assert torch.allclose(new.grad, expected, atol=1e-6)


def test_token_level_normalisation_spans_micro_batches():
    new, old, advantages, mask = hand_example()
    whole, whole_stats = policy_loss(new, old, advantages, mask, PAPER)
    whole.backward()
    whole_grad = new.grad.clone()
    new.grad = None
    # two micro-batches of one rollout each, both normalised by the update's 5 tokens
    first, first_stats = policy_loss(new[:1], old[:1], advantages[:1], mask[:1], PAPER, token_count=5)
    second, second_stats = policy_loss(new[1:], old[1:], advantages[1:], mask[1:], PAPER, token_count=5)
    (first + second).backward()
    assert (first + second).item() == pytest.approx(whole.item())
    assert torch.allclose(new.grad, whole_grad)
    assert (first_stats + second_stats).summary() == pytest.approx(whole_stats.summary())
    # a per-sequence mean would weigh rollout 1's 2 tokens like rollout 2's 3: a different number
    per_sequence = -((1.92 + 1.20) / 2 + (-0.40 - 0.55 - 1.00) / 3) / 2
    assert whole.item() != pytest.approx(per_sequence, abs=1e-3)


def test_masked_tokens_contribute_nothing_even_when_garbage():
    new, old, advantages, mask = hand_example()
    clean, _ = policy_loss(new, old, advantages, mask, PAPER)
    clean.backward()
    clean_grad = new.grad.clone()
    garbage_new = new.detach().clone()
    garbage_old = old.clone()
    garbage_new[0, 2] = float("nan")
    garbage_old[0, 2] = float("-inf")
    garbage_new.requires_grad_()
    loss, stats = policy_loss(garbage_new, garbage_old, advantages, mask, PAPER)
    loss.backward()
    assert loss.item() == pytest.approx(clean.item())
    assert torch.equal(garbage_new.grad, clean_grad)
    assert garbage_new.grad[0, 2] == 0
    assert math.isfinite(stats.ratio_sum)


def test_an_update_without_loss_tokens_is_an_error():
    new, old, advantages, _ = hand_example()
    with pytest.raises(ValueError, match="no loss tokens"):
        policy_loss(new, old, advantages, torch.zeros(2, 3), PAPER)


def test_kl_penalty_option():
    new, old, advantages, mask = hand_example()
    ref = torch.full((2, 3), math.log(0.25))
    base, _ = policy_loss(new, old, advantages, mask, PAPER)
    loss, stats = policy_loss(new, old, advantages, mask, LossConfig(kl_coef=0.1), ref_logprobs=ref)
    # k3 = e^d - d - 1 with d = ref - new = log(0.25 / p): p = 0.75, 0.4, 0.3, 0.55, 1.0
    k3 = [0.25 / p - math.log(0.25 / p) - 1 for p in (0.75, 0.4, 0.3, 0.55, 1.0)]
    assert stats.summary()["loss/kl"] == pytest.approx(sum(k3) / 5)
    assert loss.item() == pytest.approx(base.item() + 0.1 * sum(k3) / 5)
    with pytest.raises(ValueError, match="reference"):
        policy_loss(new, old, advantages, mask, LossConfig(kl_coef=0.1))


def test_entropy_bonus_option_and_measurement():
    new, old, advantages, mask = hand_example()
    entropy = torch.tensor([[1.0, 2.0, 99.0], [0.5, 0.5, 1.0]])  # 99 sits on the masked token
    base, base_stats = policy_loss(new, old, advantages, mask, PAPER)
    assert "loss/entropy" not in base_stats.summary()
    measured, stats = policy_loss(new, old, advantages, mask, PAPER, entropy=entropy)
    assert measured.item() == pytest.approx(base.item())  # coefficient 0: measured only
    assert stats.summary()["loss/entropy"] == pytest.approx(5.0 / 5)
    bonus, _ = policy_loss(new, old, advantages, mask, LossConfig(entropy_coef=0.01), entropy=entropy)
    assert bonus.item() == pytest.approx(base.item() - 0.01 * 1.0)
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(new, old, advantages, mask, LossConfig(entropy_coef=0.01))


def test_unchanged_policy_has_ratio_one_and_plain_policy_gradient():
    new, _, advantages, mask = hand_example()
    loss, stats = policy_loss(new, new.detach(), advantages, mask, PAPER)
    assert stats.summary()["loss/ratio_mean"] == pytest.approx(1.0)
    assert stats.summary()["loss/clip_fraction"] == 0
    # -Σ A over loss tokens / 5 = -(2·1.5 + 3·-0.5) / 5
    assert loss.item() == pytest.approx(-(2 * 1.5 - 3 * 0.5) / 5)


def test_loss_stats_sum_keeps_missing_entropy_missing():
    assert (LossStats(tokens=2) + LossStats(tokens=3)).entropy_sum is None
    assert (LossStats(tokens=2, entropy_sum=1.0) + LossStats(tokens=3)).entropy_sum == 1.0


def test_token_logprobs_and_entropy_follow_the_temperature_convention():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11)
    targets = torch.randint(0, 11, (2, 5))
    for temperature in (1.0, 0.7):
        reference = torch.distributions.Categorical(logits=logits / temperature)
        logprobs = token_logprobs(logits, targets, temperature)
        assert torch.allclose(logprobs, reference.log_prob(targets), atol=1e-6)
        assert torch.allclose(token_entropy(logits, temperature), reference.entropy(), atol=1e-6)
