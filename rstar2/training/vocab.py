"""Per-token log-probs and entropies over the vocabulary, a few hundred rows at a time.

    logprobs = token_logprobs(logits, targets, temperature)   # differentiable, [...]
    entropy = token_entropy(logits, temperature)              # measured only (no gradient)

What a loss reads from the LM head is one number per token: the target's log-prob (and, for
the metrics, the entropy). Written as ``log_softmax(logits.float() / t).gather(...)``, every
step makes and keeps a float32 copy of the whole ``[tokens, vocabulary]`` matrix -- 0.8 GB for
4,096 tokens of a 49K vocabulary -- and autograd keeps several for the backward pass: those
passes over memory, not the matmuls, were most of a CPU update's time, and most of its peak
memory. Here the forward pass keeps only each row's log-sum-exp; both passes go through the
logits a chunk of rows at a time in float32 and the backward pass writes the gradient
``(onehot(target) - softmax) / t`` straight into the logits' dtype. The numbers are those of
the plain expression up to the order of float32 sums.
"""

from __future__ import annotations

import torch

CHUNK_ROWS = 256  # rows of float32 work at a time: 50 MB at a 49K vocabulary


class TokenLogprobs(torch.autograd.Function):
    """log softmax(logits / t) at ``targets``, row by row (module docstring)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
        rows = logits.shape[0]
        out = torch.empty(rows, dtype=torch.float32, device=logits.device)
        lse = torch.empty(rows, dtype=torch.float32, device=logits.device)
        with torch.autocast(logits.device.type, enabled=False):
            for start, x in chunks(logits, temperature):
                end = start + x.shape[0]
                picked = x.gather(-1, targets[start:end, None]).squeeze(-1)
                lse[start:end] = log_sum_exp_(x)
                out[start:end] = picked - lse[start:end]
        ctx.save_for_backward(logits, targets, lse)
        ctx.temperature = temperature
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        logits, targets, lse = ctx.saved_tensors
        t = ctx.temperature
        grad_logits = torch.empty_like(logits)
        with torch.autocast(logits.device.type, enabled=False):
            for start, x in chunks(logits, t):
                end = start + x.shape[0]
                g = grad[start:end, None].float()
                d = x.sub_(lse[start:end, None]).exp_().mul_(-g)  # -softmax * g
                d.scatter_add_(-1, targets[start:end, None], g)  # + onehot * g
                grad_logits[start:end].copy_(d.div_(t) if t != 1.0 else d)
        return grad_logits, None, None


def chunks(logits: torch.Tensor, temperature: float):
    """``(first row, float32 logits / temperature)`` of each chunk of rows, in one buffer
    reused from chunk to chunk (a fresh one each time costs its page faults again) that the
    caller may overwrite."""
    buffer = torch.empty((min(CHUNK_ROWS, logits.shape[0]), logits.shape[-1]), dtype=torch.float32,
                         device=logits.device)
    for start in range(0, logits.shape[0], CHUNK_ROWS):
        part = logits[start:start + CHUNK_ROWS]
        x = buffer[: part.shape[0]].copy_(part)
        yield start, x.div_(temperature) if temperature != 1.0 else x


def log_sum_exp_(x: torch.Tensor) -> torch.Tensor:
    """Each row's log-sum-exp, computed in ``x`` (which it overwrites)."""
    top = x.amax(dim=-1, keepdim=True)
    return x.sub_(top).exp_().sum(-1).log_().add_(top.squeeze(-1))


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / temperature) at ``targets``: ``logits`` ``[..., vocab]``, ``targets``
    ``[...]`` (long); float32, differentiable with respect to ``logits``."""
    lead = logits.shape[:-1]
    flat = TokenLogprobs.apply(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), float(temperature))
    return flat.view(lead)


@torch.no_grad()
def token_entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Entropy of softmax(logits / temperature) at every position, float32, without a gradient
    (a loss that trains on entropy uses ``token_entropy_differentiable``)."""
    flat = logits.reshape(-1, logits.shape[-1])
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=logits.device)
    for start, x in chunks(flat, temperature):
        end = start + x.shape[0]
        top = x.amax(dim=-1, keepdim=True)
        shifted = x.sub_(top)  # H = log Σe^s - Σ softmax(s)·s, with s = x - max
        weights = shifted.exp()
        total = weights.sum(-1)
        out[start:end] = total.log() - (weights.mul_(shifted)).sum(-1) / total
    return out.view(logits.shape[:-1])


def token_entropy_differentiable(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``token_entropy`` with a gradient (an entropy bonus), at the plain expression's cost."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return -(logp.exp() * logp).sum(-1)
