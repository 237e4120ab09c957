"""The compute dtype of a training forward and backward pass, as a context around them.

    with packed_attention(model), autocast(model, "bfloat16"):
        loss = packed_nll(model, row)

The RL update (``model.compute_dtype``) and the SFT step (``train.compute_dtype``) both run
under it: 'bfloat16' over float32 weights is mixed precision (``torch.autocast``), 'float32' is
no context at all, and 'auto' is made concrete before training starts
(``rstar2.models.dtype_choice``).
"""

from __future__ import annotations

import contextlib

import torch

from rstar2.models.device import module_device


def autocast(model: torch.nn.Module, compute_dtype: str):
    """The mixed-precision context of ``compute_dtype`` on the model's device (none for float32;
    'auto' must have been made concrete first, ``rstar2.models.dtype_choice``)."""
    if compute_dtype == "float32":
        return contextlib.nullcontext()
    if compute_dtype != "bfloat16":
        raise ValueError(f"compute dtype must be float32 or bfloat16 here, not {compute_dtype!r}")
    return torch.autocast(module_device(model).type, dtype=torch.bfloat16)
