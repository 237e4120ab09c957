"""Per-row sampling: greedy rows, temperature, nucleus truncation, and the log-prob convention."""

import pytest
import torch
from pydantic import ValidationError

from rstar2.engines.base import SMALLEST_SAMPLED, SamplingParams
from rstar2.engines.sampling import nucleus, sample_tokens
from rstar2.engines.seeds import derive_seed, request_uniform


def test_greedy_rows_take_the_argmax_with_plain_log_softmax():
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 0.5]])
    ids, logprobs = sample_tokens(logits, [0.0, 0.0], [1.0, 1.0])
    assert ids.tolist() == [1, 0]
    expected = torch.log_softmax(logits, -1)[[0, 1], [1, 0]]
    torch.testing.assert_close(logprobs, expected)


def test_logprob_is_of_the_temperature_scaled_distribution():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    ids, logprobs = sample_tokens(logits, [0.5, 1.0, 2.0, 0.0], [1.0] * 4,
                                  torch.Generator().manual_seed(1))
    scaled = logits / torch.tensor([0.5, 1.0, 2.0, 1.0])[:, None]
    expected = torch.log_softmax(scaled, -1).gather(1, ids[:, None]).squeeze(1)
    torch.testing.assert_close(logprobs, expected)
    assert ids[3] == logits[3].argmax()


def test_draws_follow_the_distribution():
    probs = torch.tensor([0.1, 0.6, 0.3])
    logits = probs.log().repeat(20000, 1)
    ids, _ = sample_tokens(logits, [1.0] * 20000, [1.0] * 20000,
                           torch.Generator().manual_seed(2))
    freq = torch.bincount(ids, minlength=3).float() / 20000
    torch.testing.assert_close(freq, probs, atol=0.015, rtol=0)


def test_nucleus_keeps_the_smallest_set_reaching_top_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.9, 0.05, 0.03, 0.02]])
    kept = nucleus(probs, torch.tensor([0.8, 0.5]))
    assert (kept[0] > 0).tolist() == [True, True, False, False]
    assert (kept[1] > 0).tolist() == [True, False, False, False]


def test_top_p_never_samples_outside_the_nucleus():
    logits = torch.tensor([2.0, 1.9, -1.0, -1.0]).log_softmax(-1).repeat(2000, 1)
    ids, _ = sample_tokens(logits, [1.0] * 2000, [0.6] * 2000,
                           torch.Generator().manual_seed(3))
    assert set(ids.tolist()) <= {0, 1}


def test_a_vanishing_top_p_keeps_the_most_likely_token():
    logits = torch.tensor([[0.5, 2.0, -1.0, 1.9], [3.0, -2.0, 0.0, 2.5]])
    kept = nucleus(logits.softmax(-1), torch.tensor([0.0, SMALLEST_SAMPLED]))
    assert (kept > 0).tolist() == [[False, True, False, False], [True, False, False, False]]
    # 1e-300 reaches the sampler as a float32 zero: greedy, not the last id of an empty nucleus
    ids, _ = sample_tokens(logits, [1.0, 1.0], [1e-300, SMALLEST_SAMPLED], torch.Generator().manual_seed(0))
    assert ids.tolist() == [1, 0]


def test_the_smallest_temperature_samples_the_argmax_with_finite_log_probs():
    logits = torch.tensor([[30.0, 29.5, -40.0], [-5.0, 60.0, 59.0]])  # /2**-126 overflows float32
    ids, logprobs = sample_tokens(logits, [SMALLEST_SAMPLED] * 2, [1.0, 0.5],
                                  torch.Generator().manual_seed(0))
    assert ids.tolist() == [0, 1] and logprobs.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("field", ["temperature", "top_p"])
def test_sampling_params_refuse_a_positive_value_float32_cannot_hold(field):
    with pytest.raises(ValidationError, match=f"at least {SMALLEST_SAMPLED} where positive"):
        SamplingParams(**{field: 1e-300})
    assert getattr(SamplingParams(**{field: SMALLEST_SAMPLED}), field) == SMALLEST_SAMPLED
    assert SamplingParams(temperature=0.0).greedy


def test_request_uniforms_are_uniform_positional_and_distinct_per_seed():
    stream = [request_uniform(7, i) for i in range(20000)]
    assert all(0.0 <= u < 1.0 for u in stream)
    counts = torch.histc(torch.tensor(stream), bins=10, min=0.0, max=1.0)
    assert counts.min() > 1800 and counts.max() < 2200  # 2000 expected per bin
    assert [request_uniform(7, i) for i in (0, 9999)] == [stream[0], stream[9999]]
    assert stream[:100] != [request_uniform(8, i) for i in range(100)]
    assert derive_seed(3, 0, 1) == derive_seed(3, 0, 1) != derive_seed(3, 1, 0)
    assert 0 <= derive_seed(3, 0, 1) < 2**63


def test_a_seeded_row_draws_the_same_token_wherever_it_sits_in_the_batch():
    torch.manual_seed(0)
    logits = torch.randn(5, 50)
    row = logits[2:3]
    for seed in range(50):
        alone, _ = sample_tokens(row, [1.0], [1.0], uniforms=[request_uniform(seed, 0)])
        batch = torch.cat([logits[:2], row, logits[3:]])[torch.tensor([4, 2, 0, 1, 3])]  # row 2 at index 1
        uniforms = [None, request_uniform(seed, 0), None, None, None]
        batched, _ = sample_tokens(batch, [1.0] * 5, [1.0] * 5, torch.Generator().manual_seed(seed),
                                   uniforms)
        assert batched[1] == alone[0]


def test_seeded_draws_follow_the_distribution():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log()[None].expand(4000, -1)
    ids, _ = sample_tokens(logits, [1.0] * 4000, [1.0] * 4000,
                           uniforms=[request_uniform(seed, 3) for seed in range(4000)])
    frequencies = torch.bincount(ids, minlength=4).float() / 4000
    assert torch.allclose(frequencies, probs, atol=0.03)
