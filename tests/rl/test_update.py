"""Micro-batching and the optimizer update: a packed micro-batch gives each sequence the
log-probs it has alone, and the update does not depend on how the kept rollouts are split into
micro-batches (token-level mean of Eq. 6)."""

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rstar2.rl.config import LossConfig
from rstar2.training.vocab import token_logprobs
from rstar2.rl.update import UpdateSettings, policy_update, recompute_logprobs, with_current_logprobs
from rstar2.training.batch import TrainSequence, micro_batches
from rstar2.training.config import OptimizerConfig
from rstar2.training.optim import build_optimizer, build_scheduler
from rstar2.training.policy import checkpoint_activations


def tiny_model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return LlamaForCausalLM(config).float()


def sequence(prompt_len: int, response_len: int, advantage: float, seed: int) -> TrainSequence:
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(1, 96, (prompt_len,), generator=g).tolist()
    response = torch.randint(1, 96, (response_len,), generator=g).tolist()
    mask = [1] * response_len
    mask[response_len // 2] = 0  # a forced token in the middle (as a tool response would be)
    old = [-4.0 + 0.1 * i if m else 0.0 for i, m in enumerate(mask)]
    return TrainSequence(prompt, response, mask, old, advantage)


SEQUENCES = [sequence(5, 9, 1.0, 1), sequence(11, 4, -0.5, 2), sequence(3, 14, 0.7, 3), sequence(8, 6, -1.2, 4)]
SETTINGS = UpdateSettings(loss=LossConfig(), temperature=0.8, micro_batch_tokens=10_000,
                          max_grad_norm=1e9)


def test_micro_batches_stay_within_the_token_budget_and_keep_every_sequence():
    batches = micro_batches(SEQUENCES, max_tokens=30)
    assert sorted(map(id, [s for b in batches for s in b])) == sorted(map(id, SEQUENCES))
    assert len(batches) == 3  # 14+15 | 17+14 would pass 30 | 17
    for batch in batches:
        assert len(batch) == 1 or sum(map(len, batch)) <= 30


def alone_logprobs(model, sequence: TrainSequence, temperature: float) -> torch.Tensor:
    """The response tokens' log-probs of ``sequence`` in a forward pass of its own."""
    ids = torch.tensor([sequence.prompt_ids + sequence.response_ids])
    logits = model(input_ids=ids).logits[0, len(sequence.prompt_ids) - 1:-1]
    return token_logprobs(logits, torch.tensor(sequence.response_ids), temperature)


def test_a_packed_micro_batch_gives_each_sequence_its_own_logprobs():
    model = tiny_model().eval()
    shared = [1, 2, 3, 4] * 5  # a 20-token opening all share: held once in the packed row
    sequences = [*SEQUENCES, *(TrainSequence(shared + s.prompt_ids, s.response_ids, s.loss_mask, s.old_logprobs,
                                             s.advantage) for s in SEQUENCES)]
    fresh = recompute_logprobs(model, sequences, SETTINGS)
    for sequence, values in zip(sequences, fresh):  # in the order given, whatever the row's
        alone = alone_logprobs(model, sequence, SETTINGS.temperature)
        expected = torch.where(torch.tensor(sequence.loss_mask).bool(), alone, 0.0)
        torch.testing.assert_close(torch.tensor(values), expected, atol=1e-5, rtol=1e-5)
        assert all(v == 0.0 for v, m in zip(values, sequence.loss_mask) if not m)  # never trained on


def run_update(micro_batch_tokens: int, loss: LossConfig = SETTINGS.loss, reference: torch.nn.Module | None = None,
               checkpointing: bool = False):
    """One update of a fresh tiny model on ``SEQUENCES``."""
    model = tiny_model()
    if checkpointing:
        checkpoint_activations(model, use_reentrant=False)
    optimizer = build_optimizer(model.parameters(), OptimizerConfig(lr=1e-2, warmup_steps=0))
    scheduler = build_scheduler(optimizer, OptimizerConfig(lr=1e-2, warmup_steps=0))
    settings = UpdateSettings(**{**SETTINGS.__dict__, "micro_batch_tokens": micro_batch_tokens, "loss": loss})
    stats, norm = policy_update(model, optimizer, scheduler, SEQUENCES, settings, reference=reference)
    return model, stats, norm


def test_update_is_the_same_whatever_the_micro_batch_size():
    whole, whole_stats, whole_norm = run_update(10_000)
    split, split_stats, split_norm = run_update(1)  # one sequence per micro-batch
    assert len(micro_batches(SEQUENCES, 1)) == len(SEQUENCES)
    assert whole_stats.tokens == split_stats.tokens == sum(s.loss_tokens for s in SEQUENCES)
    assert whole_norm == pytest.approx(split_norm, rel=1e-4)
    for a, b in zip(whole.parameters(), split.parameters()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)  # Adam steps are ~1e-2
    assert whole_norm > 0
    assert any(not torch.equal(a, b) for a, b in zip(whole.parameters(), tiny_model().parameters()))


@pytest.mark.filterwarnings("ignore:.*gradient_checkpointing:FutureWarning")  # transformers' rename
def test_checkpointed_layers_give_the_update_of_the_plain_model():
    # a checkpointed layer runs its forward again during the backward pass, which must attend
    # per packed sequence as the first forward did
    plain, plain_stats, plain_norm = run_update(30)
    checkpointed, stats, norm = run_update(30, checkpointing=True)
    assert stats.tokens == plain_stats.tokens and norm == pytest.approx(plain_norm, rel=1e-5)
    for a, b in zip(plain.parameters(), checkpointed.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_recomputed_old_logprobs_make_the_first_ratio_one():
    model = tiny_model()
    fresh = with_current_logprobs(model, SEQUENCES, SETTINGS)
    assert sorted(s.advantage for s in fresh) == sorted(s.advantage for s in SEQUENCES)
    optimizer = build_optimizer(model.parameters(), OptimizerConfig(lr=1e-3, warmup_steps=0))
    scheduler = build_scheduler(optimizer, OptimizerConfig(lr=1e-3, warmup_steps=0))
    before = copy.deepcopy(model)
    stats, _ = policy_update(model, optimizer, scheduler, fresh, SETTINGS)
    summary = stats.summary()
    assert summary["loss/ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert summary["loss/clip_fraction"] == 0.0
    for s in fresh:  # masked positions keep 0, sampled ones carry the model's log-prob
        assert all(lp == 0.0 for lp, m in zip(s.old_logprobs, s.loss_mask) if not m)
        assert all(lp < 0.0 for lp, m in zip(s.old_logprobs, s.loss_mask) if m)
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(), before.parameters()))


def test_kl_to_a_reference_flows_through_the_micro_batched_update():
    kl = LossConfig(kl_coef=0.5)
    _, same, same_norm = run_update(30, kl, reference=tiny_model())  # reference = the policy itself
    assert same.summary()["loss/kl"] == pytest.approx(0.0, abs=1e-6)
    _, _, plain_norm = run_update(30)
    assert same_norm == pytest.approx(plain_norm, rel=1e-4)  # k3's gradient is 0 at the reference

    other = tiny_model(seed=1)
    _, far, far_norm = run_update(30, kl, reference=other)
    assert far.summary()["loss/kl"] > 0.01
    assert far_norm != pytest.approx(plain_norm, rel=1e-3)
    assert all(not p.requires_grad or p.grad is None for p in other.parameters())  # the reference is not trained
