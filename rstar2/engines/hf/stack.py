"""The CPU decode step on fused kernels: the model's layers as plain weights, nine calls each.

    reason = DecodeStack.why_not(model)       # None where the kernels and the model fit
    stack = DecodeStack(model, decode_kernels())
    logits = stack.step(ids, positions, write_pos, slot, cache_k, cache_v, blocks, row_block, last)

A transformers decoder layer is some forty small operators; at one token per sequence each
pays the framework's dispatch, and the attention kernels PyTorch has for the CPU read the
cached keys several times slower than memory allows (``rstar2.engines.cpu_kernels`` says
more). ``step`` runs the same computation as the model's forward pass for one new token of
every row: the fused kernels for the norms, the attention (rotary embedding, the key/value
written into the row's slot, then one pass over its shared block and its slot) and the gated
activation, and one matmul for the query/key/value projections and one for the gate/up
projections, whose weights are concatenated here. Those two concatenations are copies, so
``refresh`` renews them whenever the model's weights may have changed (the engine calls it
on every ``update_weights``); every other weight is the model's own tensor.

A step takes any number of new tokens per sequence: one for a sequence that decodes, several
for one whose next turn (a tool's output) or prompt is fed in the same step. Feeding them here
rather than through the model's forward pass saves that pass's framework overhead and a second
read of every weight per step (docs/benchmarks.md has the cost).

Llama (SmolLM2, Llama 3), Qwen2/2.5 and Qwen3 layers are read, with plain ``nn.Linear``
projections (not a peft model's adapters) and the full-width rotary embedding; any other model
is left to its own forward pass (``why_not`` says why).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rstar2.engines.cpu_kernels import KernelsUnavailable, decode_kernels

FAMILIES = ("llama", "qwen2", "qwen3")
HEAD_DIMS = (64, 128)  # what decode.cpp is compiled for (every supported family's real sizes)
MAX_GROUP = 8  # query heads per KV head, likewise


@dataclass(eq=False)
class LayerWeights:
    input_norm: torch.Tensor
    qkv: torch.Tensor  # [(heads + 2 kv_heads) * head_dim, hidden], a copy (``refresh``)
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor  # [2 * intermediate, hidden], a copy
    down: torch.Tensor
    q_norm: torch.Tensor | None  # Qwen3's per-head norms
    k_norm: torch.Tensor | None


class DecodeStack:
    """One decode step of ``model`` with the fused kernels (module docstring)."""

    def __init__(self, model, kernels):
        self.model, self.kernels = model, kernels
        config = model.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        inner = model.model
        self.eps = inner.norm.variance_epsilon
        self.scale = inner.layers[0].self_attn.scaling
        self.layers: list[LayerWeights] = []
        self.refresh()

    @staticmethod
    def why_not(model) -> str | None:
        """Why the fused step cannot decode ``model`` here, or None when it can."""
        config = getattr(model, "config", None)
        if getattr(config, "model_type", None) not in FAMILIES:
            return f"model type {getattr(config, 'model_type', None)!r} is not one of {', '.join(FAMILIES)}"
        if model.device.type != "cpu":
            return "the fused kernels are for the CPU"
        if getattr(config, "partial_rotary_factor", 1.0) != 1.0:
            return "a partial rotary embedding"
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        if head_dim not in HEAD_DIMS or heads % kv_heads or heads // kv_heads > MAX_GROUP:
            return (f"head size {head_dim} with {heads // kv_heads} query heads per KV head (the "
                    f"kernels have {' and '.join(map(str, HEAD_DIMS))}, up to {MAX_GROUP})")
        layers = getattr(getattr(model, "model", None), "layers", None)
        if layers is None or not hasattr(model, "lm_head"):
            return "not a plain transformers causal LM (a peft model?)"
        for layer in layers:
            attention, mlp = layer.self_attn, layer.mlp
            linears = [attention.q_proj, attention.k_proj, attention.v_proj, attention.o_proj,
                       mlp.gate_proj, mlp.up_proj, mlp.down_proj]
            if any(type(m) is not torch.nn.Linear for m in linears):
                return "projections that are not plain nn.Linear (adapters?)"
            if attention.o_proj.bias is not None or mlp.down_proj.bias is not None or mlp.gate_proj.bias is not None:
                return "biased output or MLP projections"
            if getattr(config, "hidden_act", "silu") != "silu":
                return f"activation {config.hidden_act!r}"
            if getattr(attention, "sliding_window", None):
                return "sliding-window attention"
        try:
            decode_kernels()
        except KernelsUnavailable as error:
            return str(error)
        return None

    def refresh(self) -> None:
        """Re-read the model's weights (after they changed)."""
        self.layers = []
        for layer in self.model.model.layers:
            a, m = layer.self_attn, layer.mlp
            bias = None
            if a.q_proj.bias is not None:
                bias = torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]).detach()
            q_norm, k_norm = getattr(a, "q_norm", None), getattr(a, "k_norm", None)
            self.layers.append(LayerWeights(
                input_norm=layer.input_layernorm.weight.detach(),
                qkv=torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).detach(),
                qkv_bias=bias, o=a.o_proj.weight.detach(),
                post_norm=layer.post_attention_layernorm.weight.detach(),
                gate_up=torch.cat([m.gate_proj.weight, m.up_proj.weight]).detach(),
                down=m.down_proj.weight.detach(),
                q_norm=None if q_norm is None else q_norm.weight.detach(),
                k_norm=None if k_norm is None else k_norm.weight.detach()))

    def step(self, ids: torch.Tensor, positions: torch.Tensor, write_pos: torch.Tensor,
             slot: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor, blocks: list,
             row_block: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """Logits ``[len(last), vocab]`` after the tokens ``last`` (indices into ``ids``): token
        ``i`` is ``ids[i]`` at rotary position ``positions[i]``, writes its key/value at
        ``write_pos[i]`` of slot ``slot[i]`` and reads ``blocks[row_block[i]]`` (a
        ``PrefixBlock``; -1: none) and its slot up to ``write_pos[i]``; the new tokens of one
        sequence are consecutive, in order."""
        k, model = self.kernels, self.model
        inner = model.model
        x = inner.embed_tokens(ids)
        cos, sin = inner.rotary_emb(x, positions[None])  # in the model's dtype, as its layers use them
        cos, sin = cos[0].float().contiguous(), sin[0].float().contiguous()
        block_k = [b.k for b in blocks]
        block_v = [b.v for b in blocks]
        for index, w in enumerate(self.layers):
            qkv = F.linear(k.rms_norm(x, w.input_norm, self.eps), w.qkv, w.qkv_bias)
            attended = k.attend(qkv, cos, sin, w.q_norm, w.k_norm, self.eps, cache_k, cache_v, index,
                                slot, write_pos, block_k, block_v, row_block, self.heads,
                                self.kv_heads, self.scale)
            x = x + F.linear(attended, w.o)
            x = x + F.linear(k.silu_mul(F.linear(k.rms_norm(x, w.post_norm, self.eps), w.gate_up)), w.down)
        if len(last) != len(ids):
            x = x[last].contiguous()
        return model.lm_head(k.rms_norm(x, inner.norm.weight, self.eps))
