"""One place that turns "which engine, which model" into an engine and its tokenizer.

Used by ``rstar2 chat``, ``eval``, the demo and the trainer, so that every command and recipe
accepts the same engine names and means the same thing by them. The vocabulary is
``ENGINE_KINDS``, defined here once:

* ``hf``     -- transformers in this process (``HFEngine``, CPU or one GPU);
* ``openai`` -- an OpenAI-compatible server (vLLM, SGLang, ``rstar2 serve-model``) at a URL;
* ``vllm``   -- vLLM in this process (``VLLMEngine``, GPU).

Recipes used to call the in-process engine ``embedded`` (``rollout.engine``); the recipes now
say ``hf``, and ``embedded`` is still read as ``hf`` with a ``FutureWarning`` so older recipes
keep working (``rstar2.rl.config``). Training needs a ``TrainableEngine`` (one that takes new
weights): ``hf`` or ``vllm``; an ``openai`` server keeps its own weights, so a recipe naming it
is refused with that reason.

A rollout fleet (``rstar2.engines.fleet``) is built here too (``open_fleet``): its members
are ``MemberSpec``s -- 'hf' and 'vllm' engines in this process or in Ray actors (a 'vllm'
actor placed with its GPUs on one node), and 'openai' servers (``rstar2 serve-model`` takes
weights at ``/update_weights_from_disk``) -- behind one scheduler.

This module does not import torch (``rstar2.rl.config`` reads the vocabulary from it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rstar2.engines.base import Engine, TrainableEngine
from rstar2.engines.device import DEVICE_HELP, DeviceSetting

EngineKind = Literal["hf", "openai", "vllm"]
ENGINE_KINDS: tuple[str, ...] = get_args(EngineKind)
"""Every engine name, for ``--engine`` choices and config fields."""
TRAINABLE_ENGINE_KINDS: tuple[str, ...] = ("hf", "vllm")
"""The engines a trainer can push weights to."""


def check_engine_kind(kind: str) -> str:
    """``kind`` if it names an engine, else a one-line ``ValueError`` listing the names."""
    if kind not in ENGINE_KINDS:
        raise ValueError(f"unknown engine {kind!r}: choose one of {', '.join(ENGINE_KINDS)}")
    return kind


class EngineSpec(BaseModel):
    """Which engine serves which model."""

    kind: EngineKind = Field(
        "hf", description="'hf': transformers in this process; 'openai': an OpenAI-compatible "
        "server (vLLM, SGLang, rstar2 serve-model); 'vllm': vLLM in this process (GPU).")
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
    if spec.kind == "hf":
        from rstar2.engines.hf import HFEngine, HFEngineConfig

        engine = HFEngine(HFEngineConfig(model=spec.model, dtype=spec.dtype, seed=spec.seed,
                                         device=spec.device,
                                         max_batch_size=spec.max_batch_size),
                          model=model, tokenizer=tokenizer)
        return engine, engine.tokenizer
    if model is not None:
        raise ValueError(f"only the 'hf' engine samples from a model in this process, not {spec.kind!r}")
    from rstar2.engines.loading import ModelNotFound, load_tokenizer

    if spec.kind == "vllm":
        from rstar2.engines.vllm import VLLMEngine

        engine = VLLMEngine(model_location(spec.model), dtype=spec.dtype, seed=spec.seed)
        return engine, tokenizer or load_tokenizer(spec.tokenizer or spec.model)
    if not spec.base_url:
        raise ValueError("the 'openai' engine needs a server URL (--base-url)")
    from rstar2.engines.openai import OpenAIEngine

    source = spec.tokenizer or spec.model
    if tokenizer is None:
        try:
            tokenizer = load_tokenizer(source)
        except ModelNotFound as error:
            raise ValueError(f"cannot load a tokenizer for {source!r} ({error}): pass a local "
                             "model directory or a hub id as --tokenizer") from None
    served = None if is_local_model(spec.model) else spec.model
    return OpenAIEngine(spec.base_url, model=served), tokenizer


def open_trainable_engine(spec: EngineSpec, *, model=None, tokenizer=None) -> TrainableEngine:
    """``open_engine`` for a trainer: refuses engines that cannot receive new weights."""
    if spec.kind not in TRAINABLE_ENGINE_KINDS:
        raise ValueError(f"engine {spec.kind!r} cannot be trained: a server keeps its own weights; "
                         f"use one of {', '.join(TRAINABLE_ENGINE_KINDS)}")
    engine, _ = open_engine(spec, model=model, tokenizer=tokenizer)
    return engine


class MemberSpec(BaseModel):
    """One member of a rollout fleet."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["hf", "openai", "vllm"] = Field(
        "hf", description="'hf': an HFEngine with its own copy of the weights; 'vllm': a "
        "VLLMEngine (GPU, the [gpu] extra); 'openai': a server at base_url that takes weights "
        "at /update_weights_from_disk (rstar2 serve-model) and reports its load at /metrics "
        "under vLLM's names.")
    ray: bool = Field(False, description="'hf' and 'vllm': run the engine in a Ray actor (on "
                      "the cluster ray.init finds, else a local one); a dead actor is replaced.")
    gpus: int = Field(1, ge=0, description="'vllm' in Ray: GPUs of the member, all on one "
                      "node (its tensor_parallel_size); 0 on a CPU cluster.")
    engine_args: dict[str, Any] = Field(
        default_factory=dict, description="'vllm': more vllm.AsyncEngineArgs, e.g. "
        "{gpu_memory_utilization: 0.9, max_model_len: 20480}.")
    base_url: str | None = Field(None, description="'openai': the server's URL.")
    kv_budget_tokens: int | None = Field(None, ge=1, description="'hf': KV tokens its running "
                                         "requests may hold (its capacity as the scheduler "
                                         "sees it); None: max_batch_size x the context.")
    max_batch_size: int = Field(32, ge=1, description="'hf': sequences decoded together; "
                                "'vllm': its max_num_seqs.")
    threads: int = Field(1, ge=1, description="torch threads ('hf'; CPU cores of a Ray "
                         "member). In-process members share this process's pool, so it is "
                         "set for the whole process.")

    @model_validator(mode="after")
    def placed(self) -> MemberSpec:
        if self.kind == "openai" and not self.base_url:
            raise ValueError("an 'openai' member needs base_url")
        if self.kind == "openai" and self.ray:
            raise ValueError("only 'hf' and 'vllm' members run in Ray actors")
        return self


def open_fleet(members: Sequence[MemberSpec], scheduler: str, *, model: str, dtype: str,
               seed: int, tokenizer) -> TrainableEngine:
    """A ``Fleet`` over ``members`` (each 'hf' or 'vllm' one loading ``model`` in ``dtype``),
    scheduled by ``scheduler``; the trainer pushes its weights to every member before sampling."""
    from rstar2.engines.fleet import Fleet, HTTPMember

    built, local_threads = [], None
    for index, spec in enumerate(members):
        name = f"member{index}"
        if spec.kind == "openai":
            built.append(HTTPMember(spec.base_url, name=name))
            continue
        if spec.ray:
            built.append(ray_member(spec, name, model=model, dtype=dtype, seed=seed + index))
            continue
        built.append(local_member(spec, name, model=model, dtype=dtype, seed=seed + index,
                                  tokenizer=tokenizer))
        local_threads = spec.threads
    if local_threads is not None:
        import torch

        torch.set_num_threads(local_threads)  # after the engines, which set every core
    return Fleet(built, scheduler)


def member_settings(spec: MemberSpec, *, model: str, dtype: str, seed: int) -> dict[str, Any]:
    """The engine arguments of an 'hf' or 'vllm' member."""
    if spec.kind == "vllm":
        from rstar2.engines.vllm import import_vllm

        import_vllm()  # a missing extra says so here, not as a dead actor
        return {"model": model_location(model), "dtype": dtype, "seed": seed,
                "max_num_seqs": spec.max_batch_size, **spec.engine_args}
    return {"model": model, "dtype": dtype, "seed": seed, "max_batch_size": spec.max_batch_size,
            "kv_budget_tokens": spec.kv_budget_tokens}


def ray_member(spec: MemberSpec, name: str, **engine):
    import ray

    settings = member_settings(spec, **engine)
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    if spec.kind == "vllm":
        from rstar2.engines.fleet.vllm_member import VLLMRayMember

        return VLLMRayMember(settings, name=name, gpus=spec.gpus, cpus=spec.threads)
    from rstar2.engines.fleet.ray_member import RayMember

    return RayMember(settings, name=name, threads=spec.threads, num_cpus=spec.threads)


def local_member(spec: MemberSpec, name: str, *, tokenizer, **engine):
    from rstar2.engines.fleet import LocalMember

    settings = member_settings(spec, **engine)
    if spec.kind == "vllm":
        from rstar2.engines.vllm import VLLMEngine

        return LocalMember(VLLMEngine(**settings), name)
    from rstar2.engines.hf import HFEngine, HFEngineConfig

    return LocalMember(HFEngine(HFEngineConfig(**settings), tokenizer=tokenizer), name)


def model_location(model: str) -> str:
    """The local directory of ``model`` (vLLM loads from a path: a hub id is resolved into the
    HF cache first, so that offline and gated models fail here in one line)."""
    from rstar2.engines.loading import resolve_model_dir

    return str(resolve_model_dir(model))


def is_local_model(model: str) -> bool:
    """Whether ``model`` names a model on this machine ('default', a folder, a .gguf file)
    rather than a name a server serves (which may also be a hub id)."""
    from rstar2.engines.loading import DEFAULT_MODEL

    return model == DEFAULT_MODEL or Path(model).expanduser().exists()
