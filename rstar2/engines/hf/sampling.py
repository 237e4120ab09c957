"""The next token of each row, and when a sequence is finished.

Each row samples with its own request's temperature and top-p (``rstar2.engines.sampling``);
a request with a ``seed`` draws from its own random stream (the uniform of its n-th token is a
function of the seed and n), so its tokens do not depend on what is batched beside it. A
sequence finishes at a stop token, a stop string, ``max_tokens`` or the end of the context.
"""

from __future__ import annotations

import torch

from rstar2.engines.hf.requests import Resident
from rstar2.engines.sampling import sample_tokens
from rstar2.engines.seeds import request_uniform


def draw(rows: list[Resident], logits: torch.Tensor, generator: torch.Generator, kernels=None
         ) -> list[tuple[int, float]]:
    """Each row's next token and its log-prob, read from the device once (drawn by the CPU
    kernels ``kernels`` where given: ``sample_tokens``)."""
    params = [r.request.params for r in rows]
    uniforms = None
    if any(p.seed is not None for p in params):  # a seeded row's draw: its own stream
        uniforms = [None if p.seed is None else request_uniform(p.seed, len(r.out_ids))
                    for p, r in zip(params, rows)]
    ids, logprobs = sample_tokens(logits, [p.temperature for p in params],
                                  [p.top_p for p in params], generator, uniforms, kernels)
    picked = torch.stack((ids.double(), logprobs.double())).tolist()  # ids are exact in float64
    return list(zip(map(int, picked[0]), picked[1]))


def finish_reason(r: Resident, tokenizer, max_length: int) -> str | None:
    """'stop', 'length', or None while the sequence goes on."""
    request = r.request
    if r.out_ids[-1] in request.stop_ids:
        return "stop"
    if request.params.stop:
        longest = max(map(len, request.params.stop))
        tail = tokenizer.decode(r.out_ids[-longest:])
        if any(s in tail for s in request.params.stop):
            return "stop"
    if len(r.out_ids) >= request.params.max_tokens or len(r.cached) + 1 >= max_length:
        return "length"
    return None
