"""Choosing the next token of every row of a batch, each row with its own temperature/top-p.

Returns the token and its log-prob under ``softmax(logits / temperature)`` (before top-p
truncation; plain ``softmax(logits)`` for greedy rows), the convention of ``engines.base``.
"""

from __future__ import annotations

import torch


def sample_tokens(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``logits`` ``[n, vocab]``; ``temperature``/``top_p`` ``[n]``. Returns ``(ids, logprobs)``."""
    logits = logits.float()
    greedy = temperature == 0
    scale = torch.where(greedy, torch.ones_like(temperature), temperature)
    logprobs = torch.log_softmax(logits / scale[:, None], dim=-1)
    if bool(greedy.all()):
        ids = logprobs.argmax(dim=-1)
    else:
        probs = nucleus(logprobs.exp(), top_p) if bool((top_p < 1).any()) else logprobs.exp()
        ids = inverse_cdf_draw(probs, generator)
        if bool(greedy.any()):
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
