"""Per-token log-probs and entropies computed a chunk of rows at a time: the plain
expression's values and gradients, across chunk boundaries, temperatures and dtypes, with
no float32 copy of the whole vocabulary kept for the backward pass."""

import pytest
import torch

from rstar2.training import vocab
from rstar2.training.vocab import token_entropy, token_entropy_differentiable, token_logprobs


def plain(logits, targets, temperature):
    logp = torch.log_softmax(logits.double() / temperature, dim=-1)
    return logp.gather(-1, targets[..., None]).squeeze(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("rows", [1, vocab.CHUNK_ROWS, vocab.CHUNK_ROWS + 3])
def test_logprobs_and_their_gradient_are_the_plain_expressions(dtype, temperature, rows):
    g = torch.Generator().manual_seed(rows)
    logits = (torch.randn(rows, 1000, generator=g) * 4).to(dtype).requires_grad_()
    targets = torch.randint(0, 1000, (rows,), generator=g)
    weights = torch.randn(rows, generator=g)
    fast = token_logprobs(logits, targets, temperature)
    (fast * weights).sum().backward()
    fast_grad, logits.grad = logits.grad.clone(), None
    reference = plain(logits, targets, temperature)
    (reference * weights.double()).sum().backward()
    assert fast.dtype == torch.float32 and fast.shape == (rows,)
    torch.testing.assert_close(fast.double(), reference.detach(), atol=1e-5, rtol=1e-5)
    assert fast_grad.dtype == dtype
    tolerance = 1e-6 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(fast_grad.double(), logits.grad.double(), atol=tolerance, rtol=tolerance)


def test_leading_dimensions_are_kept():
    logits = torch.randn(2, 3, 50)
    targets = torch.randint(0, 50, (2, 3))
    torch.testing.assert_close(token_logprobs(logits, targets, 1.0), plain(logits, targets, 1.0).float())


def test_entropy_matches_the_plain_expression_with_and_without_a_gradient():
    logits = torch.randn(vocab.CHUNK_ROWS + 5, 300) * 3
    for temperature in (1.0, 0.5):
        expected = torch.distributions.Categorical(logits=logits.double() / temperature).entropy()
        torch.testing.assert_close(token_entropy(logits, temperature).double(), expected, atol=5e-5, rtol=1e-5)
        differentiable = token_entropy_differentiable(logits.requires_grad_(), temperature)
        torch.testing.assert_close(differentiable.double(), expected, atol=5e-5, rtol=1e-5)
        assert differentiable.requires_grad and not token_entropy(logits, temperature).requires_grad


def test_the_backward_pass_keeps_only_the_logits_and_one_float_per_row():
    logits = torch.randn(64, 2000, dtype=torch.bfloat16, requires_grad=True)
    out = token_logprobs(logits, torch.zeros(64, dtype=torch.long), 1.0)
    node = out.grad_fn.next_functions[0][0]  # under the view back to the caller's shape
    saved = node.saved_tensors
    assert sum(t.numel() * t.element_size() for t in saved) == (
        logits.numel() * 2 + 64 * 8 + 64 * 4)  # the logits, the targets, the log-sum-exps


def test_autocast_is_left_outside():
    logits = torch.randn(8, 100, requires_grad=True)
    targets = torch.randint(0, 100, (8,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = token_logprobs(logits, targets, 1.0)
    torch.testing.assert_close(inside, token_logprobs(logits, targets, 1.0))
