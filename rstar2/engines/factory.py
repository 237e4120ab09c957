"""One place that turns "which engine, which model" into an engine and its tokenizer.

Used by ``rstar2 chat``, ``eval`` and the trainer, so that every command accepts the same
``--engine hf|openai|vllm --model ... --base-url ...`` and means the same thing by it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from rstar2.engines.base import Engine
from rstar2.engines.loading import DEFAULT_MODEL, ModelNotFound, load_tokenizer, resolve_model_dir


class EngineSpec(BaseModel):
    """Which engine serves which model."""

    kind: Literal["hf", "openai", "vllm"] = Field(
        "hf", description="'hf': transformers in this process; 'openai': an OpenAI-compatible "
        "server (vLLM, SGLang, rstar2 serve-model); 'vllm': vLLM in this process (GPU).")
    model: str = Field(DEFAULT_MODEL, description="'default', a .gguf file or a local model "
                       "directory; for 'openai' also the name a server serves.")
    base_url: str | None = Field(None, description="Server URL for 'openai', e.g. "
                                 "http://localhost:8000/v1.")
    tokenizer: str | None = Field(None, description="Where to load the tokenizer from when "
                                  "'model' is not a local model (a served name).")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "bfloat16", description="Weights dtype for 'hf' and 'vllm'.")
    max_batch_size: int = Field(32, ge=1, description="Sequences decoded together ('hf').")


def open_engine(spec: EngineSpec) -> tuple[Engine, object]:
    """The engine ``spec`` describes and the tokenizer its token ids belong to."""
    if spec.kind == "hf":
        from rstar2.engines.hf import HFEngine, HFEngineConfig

        engine = HFEngine(HFEngineConfig(model=spec.model, dtype=spec.dtype,
                                         max_batch_size=spec.max_batch_size))
        return engine, engine.tokenizer
    if spec.kind == "vllm":
        from rstar2.engines.vllm import VLLMEngine

        model_dir = str(resolve_model_dir(spec.model)) if is_local(spec.model) else spec.model
        return VLLMEngine(model_dir, dtype=spec.dtype), load_tokenizer(spec.tokenizer or spec.model)
    if not spec.base_url:
        raise ValueError("the 'openai' engine needs a server URL (--base-url)")
    from rstar2.engines.openai import OpenAIEngine

    source = spec.tokenizer or spec.model
    if not is_local(source):
        raise ValueError(f"cannot load a tokenizer for {source!r}: pass a local model directory "
                         "(or 'default') as the tokenizer")
    served = None if is_local(spec.model) else spec.model
    return OpenAIEngine(spec.base_url, model=served), load_tokenizer(source)


def is_local(model: str) -> bool:
    try:
        resolve_model_dir(model)
    except ModelNotFound:
        return False
    return True
