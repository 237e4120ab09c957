"""One place that turns "which engine, which model" into an engine and its tokenizer.

Used by ``rstar2 chat``, ``eval``, the demo and the trainer, so that every command and recipe
accepts the same engine names and means the same thing by them. The vocabulary is
``ENGINE_KINDS``, defined here once:

* ``hf``     -- transformers in this process (``HFEngine``, CPU or one GPU);
* ``openai`` -- an OpenAI-compatible server (vLLM, SGLang, ``rstar2 serve-model``) at a URL;
* ``vllm``   -- vLLM in this process (``VLLMEngine``, GPU).

Training needs a ``TrainableEngine`` (one that takes new weights): ``hf`` or ``vllm``; an
``openai`` server keeps its own weights. A rollout fleet over several engines is built one
layer up (``rstar2.fleet.rollout_engine``).

This module does not import torch (the run config reads the vocabulary from it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from rstar2.engines.base import Engine, TrainableEngine
from rstar2.models.device import DEVICE_HELP, DeviceSetting

@dataclass(frozen=True)
class EngineKindInfo:
    """One engine kind: what it is, whether a trainer can push weights to it, how to open it."""

    help: str
    trainable: bool
    open: Callable[..., tuple[Engine, object]]


def open_hf(spec: EngineSpec, model, tokenizer) -> tuple[Engine, object]:
    from rstar2.engines.hf import HFEngine, HFEngineConfig

    engine = HFEngine(HFEngineConfig(model=spec.model, dtype=spec.dtype, seed=spec.seed,
                                     device=spec.device, max_batch_size=spec.max_batch_size),
                      model=model, tokenizer=tokenizer)
    return engine, engine.tokenizer


def open_vllm(spec: EngineSpec, model, tokenizer) -> tuple[Engine, object]:
    from rstar2.engines.vllm import VLLMEngine
    from rstar2.models.loading import load_tokenizer

    engine = VLLMEngine(model_location(spec.model), dtype=spec.dtype, seed=spec.seed)
    return engine, tokenizer or load_tokenizer(spec.tokenizer or spec.model)


def open_openai(spec: EngineSpec, model, tokenizer) -> tuple[Engine, object]:
    if not spec.base_url:
        raise ValueError("the 'openai' engine needs a server URL (--base-url)")
    from rstar2.engines.openai import OpenAIEngine
    from rstar2.models.loading import ModelNotFound, load_tokenizer

    source = spec.tokenizer or spec.model
    if tokenizer is None:
        try:
            tokenizer = load_tokenizer(source)
        except ModelNotFound as error:
            raise ValueError(f"cannot load a tokenizer for {source!r} ({error}): pass a local "
                             "model directory or a hub id as --tokenizer") from None
    served = None if is_local_model(spec.model) else spec.model
    return OpenAIEngine(spec.base_url, model=served), tokenizer


ENGINES: dict[str, EngineKindInfo] = {
    "hf": EngineKindInfo("transformers in this process", trainable=True, open=open_hf),
    "openai": EngineKindInfo("an OpenAI-compatible server (vLLM, SGLang, rstar2 serve-model)",
                             trainable=False, open=open_openai),
    "vllm": EngineKindInfo("vLLM in this process (GPU)", trainable=True, open=open_vllm),
}
"""Every engine kind; each vocabulary below is read from it."""
ENGINE_KINDS: tuple[str, ...] = tuple(ENGINES)
"""Every engine name, for ``--engine`` choices and config fields."""
EngineKind = Literal[ENGINE_KINDS]
TRAINABLE_ENGINE_KINDS: tuple[str, ...] = tuple(k for k, info in ENGINES.items() if info.trainable)
"""The engines a trainer can push weights to."""
ENGINE_HELP = "; ".join(f"'{kind}': {info.help}" for kind, info in ENGINES.items()) + "."


def check_engine_kind(kind: str) -> str:
    """``kind`` if it names an engine, else a one-line ``ValueError`` listing the names."""
    if kind not in ENGINE_KINDS:
        raise ValueError(f"unknown engine {kind!r}: choose one of {', '.join(ENGINE_KINDS)}")
    return kind


class EngineSpec(BaseModel):
    """Which engine serves which model."""

    kind: EngineKind = Field("hf", description=ENGINE_HELP)
    model: str = Field("default", description="'default', a .gguf file, a local model "
                       "directory or a Hugging Face hub id (org/name[@revision]); for 'openai' "
                       "also the name a server serves.")
    base_url: str | None = Field(None, description="Server URL for 'openai', e.g. "
                                 "http://localhost:8000/v1.")
    tokenizer: str | None = Field(None, description="Where to load the tokenizer from when "
                                  "'model' is not a local model (a served name).")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "bfloat16", description="Weights dtype for 'hf' and 'vllm'.")
    max_batch_size: int = Field(32, ge=1, description="Sequences decoded together ('hf').")
    seed: int = Field(0, description="Seed of the engine's sampling ('hf' and 'vllm').")
    device: DeviceSetting = Field("auto", description="Where 'hf' runs the model: "
                        + DEVICE_HELP + " Ignored when a model object is passed in.")


def open_engine(spec: EngineSpec, *, model=None, tokenizer=None) -> tuple[Engine, object]:
    """The engine ``spec`` describes and the tokenizer its token ids belong to.

    ``model``: an already loaded transformers model for 'hf' to sample from itself (colocated
    with a trainer that owns it) instead of loading ``spec.model``; ``tokenizer``: an already
    loaded tokenizer to use instead of loading one."""
    if model is not None and spec.kind != "hf":
        raise ValueError(f"only the 'hf' engine samples from a model in this process, not {spec.kind!r}")
    return ENGINES[spec.kind].open(spec, model, tokenizer)


def open_trainable_engine(spec: EngineSpec, *, model=None, tokenizer=None) -> TrainableEngine:
    """``open_engine`` for a trainer: refuses engines that cannot receive new weights."""
    if spec.kind not in TRAINABLE_ENGINE_KINDS:
        raise ValueError(f"engine {spec.kind!r} cannot be trained: a server keeps its own weights; "
                         f"use one of {', '.join(TRAINABLE_ENGINE_KINDS)}")
    engine, _ = open_engine(spec, model=model, tokenizer=tokenizer)
    return engine


def model_location(model: str) -> str:
    """The local directory of ``model`` (vLLM loads from a path: a hub id is resolved into the
    HF cache first, so that offline and gated models fail here in one line)."""
    from rstar2.models.loading import resolve_model_dir

    return str(resolve_model_dir(model))


def is_local_model(model: str) -> bool:
    """Whether ``model`` names a model on this machine ('default', a folder, a .gguf file)
    rather than a name a server serves (which may also be a hub id)."""
    from rstar2.models.loading import DEFAULT_MODEL

    return model == DEFAULT_MODEL or Path(model).expanduser().exists()
