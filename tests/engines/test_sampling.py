"""Per-row sampling: greedy rows, temperature, nucleus truncation, and the log-prob convention."""

import torch

from rstar2.engines.sampling import nucleus, sample_tokens


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
