"""The architecture numbers the memory plan needs, from a small table of known models or the
model's ``config.json``, so ``--plan`` runs on a laptop for a 14B recipe.

    arch = architecture("qwen3-14b", model_path="checkpoints/qwen3-14b-base-sft")
    arch = architecture(None, model_path="Qwen/Qwen3-1.7B-Base")   # the table knows its hub id
    arch.parameters, arch.kv_bytes_per_token(dtype_bytes=2)

A model path is read as everywhere (``rstar2.models.loading``): a local directory's
``config.json``; a hub id the table knows (``HUB_IDS``) needs nothing else; any other hub id
has its config and tokenizer files fetched into the HF cache (never the weights).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rstar2.errors import Rstar2Error


@dataclass(frozen=True)
class Architecture:
    """A decoder-only transformer with grouped-query attention and a gated MLP (Llama/Qwen)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool

    @property
    def layer_parameters(self) -> int:
        """One decoder layer: q/o over all heads, k/v over the KV heads, the gated MLP, norms."""
        attention = 2 * self.hidden * self.heads * self.head_dim
        attention += 2 * self.hidden * self.kv_heads * self.head_dim
        return attention + 3 * self.hidden * self.intermediate + 2 * self.hidden

    @property
    def embedding_parameters(self) -> int:
        """Input embedding and output head (one matrix when tied)."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def parameters(self) -> int:
        return self.layers * self.layer_parameters + self.embedding_parameters + self.hidden

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """Keys and values of one token over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


KNOWN: dict[str, Architecture] = {
    # The numbers of each model's published config.json.
    "qwen3-14b": Architecture(hidden=5120, layers=40, heads=40, kv_heads=8, head_dim=128,
                              intermediate=17408, vocab=151936, tied_embeddings=False),
    "qwen3-8b": Architecture(hidden=4096, layers=36, heads=32, kv_heads=8, head_dim=128,
                             intermediate=12288, vocab=151936, tied_embeddings=False),
    "qwen3-1.7b": Architecture(hidden=2048, layers=28, heads=16, kv_heads=8, head_dim=128,
                               intermediate=6144, vocab=151936, tied_embeddings=True),
    "smollm2-135m": Architecture(hidden=576, layers=30, heads=9, kv_heads=3, head_dim=64,
                                 intermediate=1536, vocab=49152, tied_embeddings=True),
}
HUB_IDS: dict[str, str] = {
    "Qwen/Qwen3-14B-Base": "qwen3-14b", "Qwen/Qwen3-14B": "qwen3-14b",
    "Qwen/Qwen3-8B-Base": "qwen3-8b", "Qwen/Qwen3-8B": "qwen3-8b",
    "Qwen/Qwen3-1.7B-Base": "qwen3-1.7b", "Qwen/Qwen3-1.7B": "qwen3-1.7b",
    "HuggingFaceTB/SmolLM2-135M-Instruct": "smollm2-135m",
}
"""Hub ids (revision aside) of the models in ``KNOWN``."""


class UnknownArchitecture(Rstar2Error, ValueError):
    """Neither a known name nor a readable local config.json."""


def architecture(name: str | None, model_path: str) -> Architecture:
    """``name`` from ``KNOWN``; without one, ``model_path``'s config.json ('default', the
    embedded model, is SmolLM2-135M)."""
    if name is not None:
        if name not in KNOWN:
            raise UnknownArchitecture(f"cluster.architecture {name!r} is not one of "
                                      f"{', '.join(KNOWN)}")
        return KNOWN[name]
    if model_path == "default":
        return KNOWN["smollm2-135m"]
    if model_path.split("@")[0] in HUB_IDS and not Path(model_path).exists():
        return KNOWN[HUB_IDS[model_path.split("@")[0]]]
    from rstar2.models.loading import ModelNotFound, resolve_model_dir

    try:
        config_file = resolve_model_dir(model_path, weights=False) / "config.json"
    except ModelNotFound as error:
        raise UnknownArchitecture(f"cannot read the architecture of {model_path} ({error}): set "
                                  f"cluster.architecture to one of {', '.join(KNOWN)}") from None
    return from_config_json(json.loads(config_file.read_text()))


def from_config_json(config: dict) -> Architecture:
    """A transformers ``config.json`` (Llama/Qwen/Mistral field names)."""
    heads = config["num_attention_heads"]
    return Architecture(
        hidden=config["hidden_size"], layers=config["num_hidden_layers"], heads=heads,
        kv_heads=config.get("num_key_value_heads", heads),
        head_dim=config.get("head_dim") or config["hidden_size"] // heads,
        intermediate=config["intermediate_size"], vocab=config["vocab_size"],
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
    )
