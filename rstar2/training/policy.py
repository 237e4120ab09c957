"""The trained policy: loading it, optional LoRA, and saving it as a model directory.

    model = load_policy(config.model)          # train mode, trainable parameters set
    save_policy(model, tokenizer, run_dir / "final")

``load_policy`` loads the starting weights with the engines' loader (so 'default', GGUF files
and local directories mean what they mean everywhere) in the configured dtype, on the configured
device. With ``model.lora`` the weights are frozen and peft adapters are added to the target
layers; the adapter weights are kept in float32 whatever the base dtype, since AdamW updates of
size lr·g vanish in bfloat16's 8-bit mantissa.

``save_policy`` writes a plain transformers directory (adapters merged into the weights), so a
trained model is used like any other: ``rstar2 chat --model runs/<name>/final``. It is
written to a temporary directory and renamed, so a killed save never leaves half a model.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import torch

from rstar2.agent.card import ModelCard, write_card
from rstar2.models.device import resolve_device
from rstar2.models.loading import load_model
from rstar2.training.config import ModelConfig


def load_policy(config: ModelConfig) -> torch.nn.Module:
    """The policy in train mode on ``config.device``, with LoRA adapters when configured."""
    model = load_model(config.path, config.dtype, resolve_device(config.device))
    if config.lora is not None:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(
            r=config.lora.rank, lora_alpha=config.lora.alpha, lora_dropout=config.lora.dropout,
            target_modules=list(config.lora.target_modules),
        ))
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.data = parameter.data.float()
    if config.gradient_checkpointing:
        checkpoint_activations(model)
        if config.lora is not None:
            model.enable_input_require_grads()
    return model.train()


def checkpoint_activations(model: torch.nn.Module, **checkpoint_kwargs) -> None:
    """Recompute each decoder layer's activations in the backward pass instead of keeping them.
    transformers renamed ``gradient_checkpointing_enable`` to ``activation_checkpointing_enable``
    (the old name warns on every call); whichever the installed version has is called, with
    ``checkpoint_kwargs`` for ``torch.utils.checkpoint``."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs=checkpoint_kwargs or None)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=checkpoint_kwargs or None)


def activations_checkpointed(model: torch.nn.Module) -> bool:
    """Whether ``checkpoint_activations`` applies to ``model`` (under either of transformers'
    names; False for a model that has neither)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        value = getattr(model, name, None)
        if value is not None:
            return bool(value)
    return False


def is_lora(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a peft model (peft's wrappers are the ones with ``merge_and_unload``;
    asked by attribute so that peft is imported only by runs that use LoRA)."""
    return hasattr(model, "merge_and_unload")


def save_policy(model: torch.nn.Module, tokenizer, target: str | Path, card: ModelCard | None = None) -> Path:
    """Write ``model`` (LoRA merged) and ``tokenizer`` as a transformers directory at ``target``,
    with ``card`` (how it was trained to be prompted) beside the weights, and the copies of its
    own tools' modules and option files that the card names (``write_card``), which the
    rename moves with the rest of the folder."""
    target = Path(target)
    staging = target.with_name(f".tmp-{target.name}")
    shutil.rmtree(staging, ignore_errors=True)
    plain = copy.deepcopy(model).merge_and_unload() if is_lora(model) else model
    plain.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    if card is not None:
        write_card(staging, card)
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return target
