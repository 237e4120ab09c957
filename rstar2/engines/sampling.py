"""Choosing the next token of every row of a batch, each row with its own temperature/top-p.

Returns the token and its log-prob under ``softmax(logits / temperature)`` (before top-p
truncation; plain ``softmax(logits)`` for greedy rows), the convention of ``engines.base``.
Every row keeps at least its most likely token, whatever its temperature (down to
``engines.base.SMALLEST_SAMPLED``) and top-p, so a vanishing one samples greedily rather than
from an empty or non-finite distribution.

The per-row settings arrive as host floats, so which branches run (all greedy? any nucleus?)
is decided on the host: on a GPU nothing here waits for the device, and the caller's one
read of the sampled ids per step is the only synchronisation.

Seeded requests draw their uniforms from ``seeds.request_uniform`` (see there).

Given the CPU kernels (``rstar2.engines.cpu_kernels``), a batch without nucleus truncation is
drawn by their ``sample``: the same uniforms and the same inverse-CDF draw, in three passes over
each row's logits instead of some ten passes of PyTorch operators over float32 copies of the
whole batch, which cost a third of a CPU decode step at a hundred rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rstar2.models.device import host_to_device


def sample_tokens(
    logits: torch.Tensor,
    temperature: Sequence[float],
    top_p: Sequence[float],
    generator: torch.Generator | None = None,
    uniforms: Sequence[float | None] | None = None,
    kernels=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``logits`` ``[n, vocab]``; ``temperature``/``top_p`` ``n`` floats; ``uniforms``, where given,
    the seeded rows' draws (None for rows that draw from ``generator``); ``kernels``, the CPU
    kernels where CPU logits may be drawn by them. Returns ``(ids, logprobs)`` on the logits'
    device."""
    greedy_rows = [t == 0 for t in temperature]
    if kernels is not None and logits.device.type == "cpu" and all(p >= 1 for p in top_p):
        u = (torch.zeros(len(temperature)) if all(greedy_rows)
             else row_uniforms(len(temperature), logits.device, generator, uniforms))
        return kernels.sample(logits.contiguous(), torch.tensor(temperature, dtype=torch.float32), u)
    logits = logits.float()
    scale = host_to_device([1.0 if g else t for g, t in zip(greedy_rows, temperature)],
                           torch.float32, logits.device)
    # shifted so that the largest logit is 0: dividing by a tiny temperature then gives 0 or
    # large negatives, never an overflow to +inf that log_softmax would turn into NaN
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    logprobs = torch.log_softmax(shifted.div_(scale[:, None]), dim=-1)
    if all(greedy_rows):
        ids = logprobs.argmax(dim=-1)
    else:
        probs = logprobs.exp()
        if any(p < 1 for p in top_p):
            probs = nucleus(probs, host_to_device(list(top_p), torch.float32, logits.device))
        ids = inverse_cdf_draw(probs, row_uniforms(len(probs), probs.device, generator, uniforms))
        if any(greedy_rows):
            greedy = host_to_device(greedy_rows, torch.bool, logits.device)
            ids = torch.where(greedy, logprobs.argmax(dim=-1), ids)
    return ids, logprobs.gather(1, ids[:, None]).squeeze(1)


def row_uniforms(n: int, device: torch.device, generator: torch.Generator | None,
                 uniforms: Sequence[float | None] | None) -> torch.Tensor:
    """One float32 uniform number per row: the seeded rows' given ones, the others from
    ``generator``."""
    drawn = None
    if uniforms is None or None in uniforms:
        drawn = torch.rand(n, generator=generator, device=device, dtype=torch.float32)
    if uniforms is None:
        return drawn
    given = host_to_device([0.0 if u is None else u for u in uniforms], torch.float32, device)
    if drawn is None:
        return given
    return torch.where(host_to_device([u is not None for u in uniforms], torch.bool, device), given, drawn)


def inverse_cdf_draw(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One draw per row from unnormalised ``probs`` with the row's uniform number ``u``.

    ``torch.multinomial`` draws one exponential variate per vocabulary entry, which on a CPU
    costs more than the rest of a decode step's sampling together.
    """
    cdf = probs.cumsum(dim=-1)
    ids = torch.searchsorted(cdf, u[:, None] * cdf[:, -1:], right=True).squeeze(1)
    return ids.clamp_(max=probs.shape[1] - 1)


def nucleus(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero all but the smallest set of most likely tokens whose mass reaches ``top_p``
    (per row). The most likely token always stays, even for a ``top_p`` of 0 (a float64 top-p
    below float32's range arrives as 0): a row left with no mass would draw the last id."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    dropped = mass_before >= top_p[:, None]
    dropped[:, 0] = False
    sorted_probs = sorted_probs.masked_fill(dropped, 0.0)
    return torch.zeros_like(probs).scatter_(1, order, sorted_probs)
