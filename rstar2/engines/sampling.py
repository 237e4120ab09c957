"""Choosing the next token of every row of a batch, each row with its own temperature/top-p.

Returns the token and its log-prob under ``softmax(logits / temperature)`` (before top-p
truncation; plain ``softmax(logits)`` for greedy rows), the convention of ``engines.base``.

The per-row settings arrive as host floats, so which branches run (all greedy? any nucleus?)
is decided on the host: on a GPU nothing here waits for the device, and the caller's one
read of the sampled ids per step is the only synchronisation.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rstar2.engines.device import host_to_device


def sample_tokens(
    logits: torch.Tensor,
    temperature: Sequence[float],
    top_p: Sequence[float],
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``logits`` ``[n, vocab]``; ``temperature``/``top_p`` ``n`` floats. Returns ``(ids, logprobs)``
    on the logits' device."""
    logits = logits.float()
    greedy_rows = [t == 0 for t in temperature]
    scale = host_to_device([1.0 if g else t for g, t in zip(greedy_rows, temperature)],
                           torch.float32, logits.device)
    logprobs = torch.log_softmax(logits / scale[:, None], dim=-1)
    if all(greedy_rows):
        ids = logprobs.argmax(dim=-1)
    else:
        probs = logprobs.exp()
        if any(p < 1 for p in top_p):
            probs = nucleus(probs, host_to_device(list(top_p), torch.float32, logits.device))
        ids = inverse_cdf_draw(probs, generator)
        if any(greedy_rows):
            greedy = host_to_device(greedy_rows, torch.bool, logits.device)
            ids = torch.where(greedy, logprobs.argmax(dim=-1), ids)
    return ids, logprobs.gather(1, ids[:, None]).squeeze(1)


def inverse_cdf_draw(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One draw per row from unnormalised ``probs`` with a single uniform number per row.

    ``torch.multinomial`` draws one exponential variate per vocabulary entry, which on a CPU
    costs more than the rest of a decode step's sampling together.
    """
    cdf = probs.cumsum(dim=-1)
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device,
                   dtype=cdf.dtype) * cdf[:, -1:]
    ids = torch.searchsorted(cdf, u, right=True).squeeze(1)
    return ids.clamp_(max=probs.shape[1] - 1)


def nucleus(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero all but the smallest set of most likely tokens whose mass reaches ``top_p``
    (per row; the most likely token always stays)."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p[:, None], 0.0)
    return torch.zeros_like(probs).scatter_(1, order, sorted_probs)
