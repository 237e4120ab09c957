"""The fused CPU decode kernels against plain PyTorch: attention over a slot and a shared block
with the new tokens' rotary embedding and cache write (one token per sequence, or several), the
RMSNorm, the gated activation and the sampler; and their refusals."""

import pytest
import torch
import torch.nn.functional as F

from rstar2.engines.cpu_kernels import KernelsUnavailable, decode_kernels

try:
    kernels = decode_kernels()
except KernelsUnavailable as error:  # another architecture: the engine falls back, tested elsewhere
    pytest.skip(f"no fused CPU kernels here: {error}", allow_module_level=True)

TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 3e-3}


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def reference_attention(qkv, cos, sin, cache_k, cache_v, layer, write_pos, blocks, row_block,
                        heads, kv_heads, scale):
    """Float64 attention of each row over its block and its slot up to its write position,
    after the row's own rotated key and value are written: the kernel's contract."""
    n = qkv.shape[0]
    dim = cache_k.shape[-1]
    group = heads // kv_heads
    q, k, v = qkv.double().split([heads * dim, kv_heads * dim, kv_heads * dim], 1)
    q = rotate(q.view(n, heads, dim), cos.double()[:, None], sin.double()[:, None])
    k = rotate(k.view(n, kv_heads, dim), cos.double()[:, None], sin.double()[:, None])
    q = q.to(qkv.dtype).double()  # the model rounds the rotated query to its dtype
    outs = []
    for b in range(n):
        keys = cache_k[layer, b, :, : write_pos[b]].double()
        values = cache_v[layer, b, :, : write_pos[b]].double()
        keys = torch.cat([keys, k[b].to(qkv.dtype).double()[:, None]], 1)
        values = torch.cat([values, v.view(n, kv_heads, dim)[b].double()[:, None]], 1)
        if row_block[b] >= 0:
            keys = torch.cat([blocks[row_block[b]][0][layer].double(), keys], 1)
            values = torch.cat([blocks[row_block[b]][1][layer].double(), values], 1)
        keys, values = keys.repeat_interleave(group, 0), values.repeat_interleave(group, 0)
        weights = ((q[b][:, None] @ keys.transpose(1, 2)) * scale).softmax(-1)
        outs.append((weights @ values)[:, 0].reshape(-1))
    return torch.stack(outs)


def attention_case(dtype, heads, kv_heads, dim, write_pos, block_lens, row_block, layers=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    n, length = len(write_pos), max(write_pos) + 3

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(dtype)

    cache_k, cache_v = rand(layers, n, kv_heads, length, dim), rand(layers, n, kv_heads, length, dim)
    blocks = [(rand(layers, kv_heads, m, dim), rand(layers, kv_heads, m, dim)) for m in block_lens]
    qkv = rand(n, (heads + 2 * kv_heads) * dim)
    angles = torch.rand(n, dim // 2, generator=g) * 6
    cos, sin = torch.cat([angles.cos()] * 2, 1), torch.cat([angles.sin()] * 2, 1)
    return dict(qkv=qkv, cos=cos, sin=sin, cache_k=cache_k, cache_v=cache_v, blocks=blocks,
                write_pos=torch.tensor(write_pos), row_block=torch.tensor(row_block), heads=heads,
                kv_heads=kv_heads, scale=dim ** -0.5)


def run_attend(case, layer, slot=None, q_norm=None, k_norm=None):
    slot = torch.arange(len(case["write_pos"])) if slot is None else torch.tensor(slot)
    return kernels.attend(case["qkv"], case["cos"], case["sin"], q_norm, k_norm, 1e-6,
                          case["cache_k"], case["cache_v"], layer, slot, case["write_pos"],
                          [b[0] for b in case["blocks"]], [b[1] for b in case["blocks"]],
                          case["row_block"], case["heads"], case["kv_heads"], case["scale"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("heads,kv_heads,dim", [(9, 3, 64), (16, 8, 128), (14, 2, 64), (4, 4, 64)])
def test_attention_matches_plain_softmax_attention(dtype, heads, kv_heads, dim):
    # write positions around the kernel's 64-key chunks, rows with and without blocks
    case = attention_case(dtype, heads, kv_heads, dim, write_pos=[0, 17, 63, 64, 65, 130],
                          block_lens=[100, 1], row_block=[0, -1, 1, 0, -1, 1])
    before_k, before_v = case["cache_k"].clone(), case["cache_v"].clone()
    expected = reference_attention(case["qkv"], case["cos"], case["sin"], before_k, before_v, 1,
                                   case["write_pos"], case["blocks"], case["row_block"], heads,
                                   kv_heads, case["scale"])
    out = run_attend(case, layer=1)
    assert out.dtype == dtype and out.shape == (6, heads * dim)
    torch.testing.assert_close(out.double(), expected, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])


def test_the_new_key_and_value_land_in_their_slot_and_nothing_else_changes():
    case = attention_case(torch.bfloat16, 9, 3, 64, write_pos=[5, 0, 40], block_lens=[], row_block=[-1] * 3)
    before_k, before_v = case["cache_k"].clone(), case["cache_v"].clone()
    run_attend(case, layer=1)
    n, dim = 3, 64
    _, k, v = case["qkv"].float().split([9 * dim, 3 * dim, 3 * dim], 1)
    rotated = rotate(k.view(n, 3, dim), case["cos"][:, None], case["sin"][:, None]).to(torch.bfloat16)
    for b, pos in enumerate([5, 0, 40]):
        torch.testing.assert_close(case["cache_k"][1, b, :, pos], rotated[b], atol=1e-2, rtol=0)
        assert torch.equal(case["cache_v"][1, b, :, pos], v.view(n, 3, dim)[b].to(torch.bfloat16))
        before_k[1, b, :, pos] = case["cache_k"][1, b, :, pos]
        before_v[1, b, :, pos] = case["cache_v"][1, b, :, pos]
    assert torch.equal(before_k, case["cache_k"]) and torch.equal(before_v, case["cache_v"])


def test_each_token_reads_and_writes_the_slot_it_is_given():
    case = attention_case(torch.float32, 4, 2, 64, write_pos=[3, 9], block_lens=[], row_block=[-1, -1])
    # the same two sequences in slots 3 and 1 of five
    spread = dict(case, cache_k=torch.zeros(2, 5, 2, 12, 64), cache_v=torch.zeros(2, 5, 2, 12, 64))
    for slot, row in ((3, 0), (1, 1)):
        spread["cache_k"][:, slot] = case["cache_k"][:, row]
        spread["cache_v"][:, slot] = case["cache_v"][:, row]
    torch.testing.assert_close(run_attend(spread, 0, slot=[3, 1]), run_attend(case, 0))
    torch.testing.assert_close(spread["cache_k"][:, [3, 1]], case["cache_k"])
    assert not spread["cache_k"][:, [0, 2, 4]].any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_sequences_new_tokens_in_one_call_attend_as_if_fed_one_by_one(dtype):
    """A prefill: slot 0 brings four new tokens (positions 5-8), slot 1 one (position 2), slot 2
    seventy that cross the kernel's 64-key chunks; each token sees the keys of those before it."""
    write = [5, 6, 7, 8, 2] + list(range(70))
    slot = [0] * 4 + [1] + [2] * 70
    case = attention_case(dtype, 9, 3, 64, write_pos=write, block_lens=[30], row_block=[0] * 5 + [-1] * 70)
    cache = dict(cache_k=case["cache_k"][:, :3].clone(), cache_v=case["cache_v"][:, :3].clone())
    together = dict(case, **cache)
    out = run_attend(together, 1, slot=slot)
    one_by_one = dict(case, cache_k=case["cache_k"][:, :3].clone(), cache_v=case["cache_v"][:, :3].clone())
    for i in range(len(write)):
        single = dict(one_by_one, qkv=case["qkv"][i:i + 1], cos=case["cos"][i:i + 1],
                      sin=case["sin"][i:i + 1], write_pos=case["write_pos"][i:i + 1],
                      row_block=case["row_block"][i:i + 1])
        torch.testing.assert_close(run_attend(single, 1, slot=[slot[i]])[0], out[i], atol=0, rtol=0)
    assert torch.equal(together["cache_k"], one_by_one["cache_k"])
    assert torch.equal(together["cache_v"], one_by_one["cache_v"])


def test_rms_norm_and_gated_activation_match_transformers_modules():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(0)
        norm = LlamaRMSNorm(576, eps=1e-5).to(dtype)
        norm.weight.data = torch.randn(576).to(dtype)
        x = (torch.randn(7, 576) * 3).to(dtype)
        ulp = 1e-6 if dtype == torch.float32 else 2 ** -7  # a sum's order may move the last bit
        torch.testing.assert_close(kernels.rms_norm(x, norm.weight, 1e-5).float(), norm(x).float(),
                                   rtol=ulp, atol=ulp)
        gate_up = (torch.randn(5, 2 * 1536) * 4).to(dtype)
        gate, up = gate_up.chunk(2, 1)
        torch.testing.assert_close(kernels.silu_mul(gate_up).float(), (F.silu(gate) * up).float(),
                                   rtol=ulp, atol=ulp)


@pytest.mark.parametrize("change,message", [
    (dict(write_pos=[0, 500]), "write position beyond the slot"),
    (dict(slot=[0, 2]), "a token beyond the slots"),
    (dict(row_block=[0, 3]), "no such block"),
    (dict(qkv="half the width"), "qkv must be a contiguous"),
    (dict(cache_k="float32"), "dtypes differ"),
])
def test_bad_inputs_are_refused_with_their_reason(change, message):
    case = attention_case(torch.bfloat16, 4, 2, 64, write_pos=[1, 2], block_lens=[8], row_block=[0, -1])
    if "write_pos" in change:
        case["write_pos"] = torch.tensor(change["write_pos"])
    if "row_block" in change:
        case["row_block"] = torch.tensor(change["row_block"])
    if "qkv" in change:
        case["qkv"] = case["qkv"][:, : case["qkv"].shape[1] // 2].contiguous()
    if "cache_k" in change:
        case["cache_k"] = case["cache_k"].float()
        case["cache_v"] = case["cache_v"].float()
    with pytest.raises(RuntimeError, match=message):
        run_attend(case, layer=0, slot=change.get("slot"))


def test_a_head_size_without_a_kernel_is_refused():
    case = attention_case(torch.float32, 4, 2, 32, write_pos=[1], block_lens=[], row_block=[-1])
    with pytest.raises(RuntimeError, match="head_dim 32"):
        run_attend(case, layer=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sample_draws_what_the_pytorch_sampler_draws_with_the_same_uniforms(dtype):
    from rstar2.engines.sampling import sample_tokens

    g = torch.Generator().manual_seed(0)
    n, vocab = 400, 49152 + 5  # a tail beyond the vector width
    logits = (torch.randn(n, vocab, generator=g) * 4).to(dtype)
    temperature = [0.0 if i % 4 == 0 else [0.6, 1.0, 1.7][i % 3] for i in range(n)]
    uniforms = torch.rand(n, generator=g).tolist()
    ids, logprobs = kernels.sample(logits, torch.tensor(temperature), torch.tensor(uniforms))
    ref_ids, ref_logprobs = sample_tokens(logits, temperature, [1.0] * n, uniforms=uniforms)
    # the same token but where u lands within float32 rounding of a boundary of the CDF
    assert (ids == ref_ids).float().mean() >= 0.99
    scaled = logits.double() / torch.tensor([t or 1.0 for t in temperature]).double()[:, None]
    expected = torch.log_softmax(scaled, -1).gather(1, ids[:, None]).squeeze(1)
    torch.testing.assert_close(logprobs.double(), expected, atol=1e-4, rtol=0)
    greedy = torch.tensor(temperature) == 0
    assert torch.equal(ids[greedy], logits[greedy].float().argmax(-1))


def test_sample_never_draws_a_masked_token_and_greedy_takes_the_first_largest():
    inf = float("inf")
    logits = torch.tensor([[-inf] * 20 + [1.0, 2.0] + [-inf] * 20] * 3 + [[0.0, 3.0, 3.0, 1.0] + [0.0] * 38])
    ids, logprobs = kernels.sample(logits, torch.tensor([1.0, 1.0, 1e-30, 0.0]),
                                   torch.tensor([0.0, 1.0 - 2 ** -24, 0.5, 0.0]))
    assert ids.tolist() == [20, 21, 21, 1]
    assert logprobs[2].item() == 0.0 and torch.isfinite(logprobs).all()


def test_sample_refuses_mismatched_inputs():
    with pytest.raises(RuntimeError, match="temperature and uniform"):
        kernels.sample(torch.randn(3, 10), torch.ones(2), torch.zeros(3))
