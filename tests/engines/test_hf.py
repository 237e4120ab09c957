"""HFEngine on the real SmolLM2 model: same tokens as plain transformers, exact log-probs,
continuous batching and prefix reuse that change nothing but speed."""

import asyncio
import sys
from dataclasses import dataclass

import pytest
import torch

from rstar2.engines.base import SamplingParams
from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.engines.hf import sampling as hf_sampling
from rstar2.engines.hf.requests import Resident
from rstar2.engines.sampling import sample_tokens
from rstar2.engines.seeds import request_uniform
from tests.polling import until

SYSTEM = "You are a careful assistant. Answer briefly, in one sentence, and stay on topic."
QUESTIONS = ["What is 2+2?", "Name a primary colour.", "Write a short line about the sea.",
             "Hi"]
GREEDY = SamplingParams(temperature=0, max_tokens=12)


def chat_ids(tokenizer, question):
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


@pytest.fixture(scope="module")
def prompts(tokenizer):
    return [tokenizer.encode(chat_ids(tokenizer, q), add_special_tokens=False) for q in QUESTIONS]


def reference_greedy(model, prompt, max_tokens):
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=max_tokens, do_sample=False,
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    return out[0, len(prompt):].tolist()


def reference_logprobs(model, prompt, tokens, temperature=1.0):
    """Log-probs of ``tokens`` after ``prompt`` from one plain forward pass (no engine)."""
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()
    logprobs = torch.log_softmax(logits / temperature, -1)
    return [logprobs[len(prompt) - 1 + i, t].item() for i, t in enumerate(tokens)]


def generate(engine, prompts, params):
    return asyncio.run(engine.generate(prompts, params))


def test_batched_greedy_equals_plain_generate(hf_engine, prompts):
    hf_engine.drop_caches()
    outs = generate(hf_engine, prompts, GREEDY)
    assert hf_engine.table.blocks, "the shared system prompt should have become a block"
    for prompt, out in zip(prompts, outs):
        expected = reference_greedy(hf_engine.model, prompt, GREEDY.max_tokens)
        assert out.token_ids == expected[: len(out.token_ids)]
        ended = out.token_ids[-1] in hf_engine.eos_ids
        assert out.finish_reason == ("stop" if ended else "length")
        assert ended or len(out.token_ids) == GREEDY.max_tokens


def test_sampled_logprobs_match_a_plain_forward_pass(hf_engine, prompts):
    params = SamplingParams(temperature=0.7, max_tokens=10)
    outs = generate(hf_engine, prompts[:2] * 2, params)
    for prompt, out in zip(prompts[:2] * 2, outs):
        assert len(out.logprobs) == len(out.token_ids)
        expected = reference_logprobs(hf_engine.model, prompt, out.token_ids, 0.7)
        assert out.logprobs == pytest.approx(expected, abs=2e-4)


def test_identical_prompts_are_sampled_independently(hf_engine, prompts):
    outs = generate(hf_engine, [prompts[2]] * 6, SamplingParams(temperature=1.0, max_tokens=8))
    assert len({tuple(o.token_ids) for o in outs}) > 1


def record_seeded_draws(monkeypatch):
    """Records, for every decode step that samples a seeded row, that row's uniform number, its
    logits, the token it got and how many rows shared the step."""
    draws = []

    def recording(logits, temperature, top_p, generator=None, uniforms=None, kernels=None):
        ids, logprobs = sample_tokens(logits, temperature, top_p, generator, uniforms, kernels)
        for row, u in enumerate(uniforms or []):
            if u is not None:
                draws.append(SeededDraw(u, logits[row].clone(), int(ids[row]), logits.shape[0]))
        return ids, logprobs

    monkeypatch.setattr(hf_sampling, "sample_tokens", recording)
    return draws


@dataclass
class SeededDraw:
    uniform: float
    logits: torch.Tensor
    token: int
    batch_rows: int


def test_a_seeded_request_draws_its_own_stream_however_it_is_batched(hf_engine, prompts, monkeypatch):
    """The engine's promise: a seeded request's i-th token is drawn with ``request_uniform(seed,
    i)`` and depends on nothing but that number and the request's own logits. Alone, or joining
    three requests already decoding (with the engine's generator reseeded in between), it draws
    the same numbers; where its logits are equal its tokens are. (The logits themselves may
    differ in the last bits when other rows share the step: kernels of another shape round
    differently, so equal tokens in a crowd are not promised.)"""
    seeded = SamplingParams(temperature=1.0, max_tokens=24, stop_token_ids=(), seed=11)
    crowd = SamplingParams(temperature=1.0, max_tokens=200, stop_token_ids=())
    draws = record_seeded_draws(monkeypatch)

    async def crowded():
        hf_engine.reseed(99)
        busy = asyncio.ensure_future(hf_engine.generate([prompts[0], prompts[1], prompts[3]], crowd))
        await until(lambda: hf_engine.table.n_active == 3, what="the crowd decoding")
        mine = await hf_engine.generate([prompts[2]], seeded)
        busy.cancel()  # the crowd only had to be there
        await asyncio.gather(busy, return_exceptions=True)
        await until(lambda: hf_engine.table.n_active == 0, what="the crowd gone")
        return mine[0]

    hf_engine.reseed(1)
    alone = generate(hf_engine, [prompts[2]], seeded)[0]
    alone_draws, draws[:] = list(draws), []
    hf_engine.drop_caches()
    in_crowd = asyncio.run(crowded())
    crowd_draws = list(draws)

    stream = [request_uniform(11, i) for i in range(seeded.max_tokens)]
    assert [d.uniform for d in alone_draws] == stream == [d.uniform for d in crowd_draws]
    assert max(d.batch_rows for d in crowd_draws) > 1, "the seeded request never shared a step"
    assert [d.token for d in alone_draws] == alone.token_ids
    assert [d.token for d in crowd_draws] == in_crowd.token_ids
    for d in alone_draws + crowd_draws:  # the token is a function of the logits and the uniform
        redrawn, _ = sample_tokens(d.logits[None], [1.0], [1.0], uniforms=[d.uniform],
                                   kernels=hf_engine.compute.kernels)
        assert int(redrawn) == d.token
    other_seed = generate(hf_engine, [prompts[2]], seeded.model_copy(update={"seed": 12}))[0]
    assert other_seed.token_ids != alone.token_ids


def test_next_turn_resumes_the_parked_sequence(hf_engine, prompts, tokenizer):
    first = generate(hf_engine, [prompts[0]], GREEDY)[0]
    follow_up = tokenizer.encode("\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n",
                                 add_special_tokens=False)
    second_prompt = prompts[0] + first.token_ids + follow_up
    assert isinstance(hf_engine.table.source(second_prompt), Resident)
    second = generate(hf_engine, [second_prompt], GREEDY)[0]
    assert second.token_ids == reference_greedy(hf_engine.model, second_prompt, 12)[
        : len(second.token_ids)]


def test_requests_joining_mid_decode_do_not_disturb_others(hf_engine, prompts):
    long = SamplingParams(temperature=0, max_tokens=40, stop_token_ids=())

    async def staggered():
        early = asyncio.ensure_future(hf_engine.generate([prompts[1]], long))
        await until(lambda: hf_engine.table.n_active == 1, what="the early request decoding")
        late = await hf_engine.generate([prompts[3], prompts[2]], GREEDY)
        return (await early)[0], late

    early, late = asyncio.run(staggered())
    hf_engine.drop_caches()
    assert early.token_ids == generate(hf_engine, [prompts[1]], long)[0].token_ids
    solo = [generate(hf_engine, [p], GREEDY)[0].token_ids for p in (prompts[3], prompts[2])]
    assert [o.token_ids for o in late] == solo


def test_limits_and_stops(hf_engine, prompts, tokenizer):
    never = generate(hf_engine, [prompts[0]], SamplingParams(temperature=0, max_tokens=30,
                                                             stop_token_ids=()))[0]
    assert len(never.token_ids) == 30 and never.finish_reason == "length"
    greedy = generate(hf_engine, [prompts[0]], SamplingParams(temperature=0, max_tokens=30))[0]
    text = tokenizer.decode(greedy.token_ids)
    stop_word = text.split()[2]
    stopped = generate(hf_engine, [prompts[0]], SamplingParams(
        temperature=0, max_tokens=30, stop=(stop_word,)))[0]
    assert stopped.finish_reason == "stop"
    assert stop_word in tokenizer.decode(stopped.token_ids)
    assert len(stopped.token_ids) < len(greedy.token_ids)
    one = generate(hf_engine, [prompts[0]], SamplingParams(temperature=0, max_tokens=1))[0]
    assert len(one.token_ids) == 1 and one.finish_reason == "length"


def test_bad_prompts_are_refused(hf_engine):
    with pytest.raises(ValueError, match="empty"):
        generate(hf_engine, [[]], GREEDY)
    with pytest.raises(ValueError, match="vocabulary"):
        generate(hf_engine, [[1, 10**7]], GREEDY)


def test_parked_sequences_are_bounded(hf_engine, prompts):
    engine = HFEngine(HFEngineConfig(dtype="float32", max_batch_size=2, max_parked=1),
                      model=hf_engine.model, tokenizer=hf_engine.tokenizer)
    try:
        outs = generate(engine, prompts, GREEDY)
        assert len(outs) == 4 and len(engine.table.residents) <= 1 and engine.table.n_active == 0
    finally:
        engine.shutdown()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the cache is mapped on Linux")
def test_the_cpu_cache_spans_every_slot_the_table_may_fill_and_never_moves(hf_engine, prompts):
    """Mapped once for max_batch_size + max_parked slots of the whole context (address space:
    tests/engines/test_slots.py has what becomes resident), so no later request copies it."""
    engine = HFEngine(HFEngineConfig(dtype="float32", max_batch_size=2, max_parked=1),
                      model=hf_engine.model, tokenizer=hf_engine.tokenizer)
    try:
        first = generate(engine, prompts[:1], GREEDY)[0]
        cache = engine.table.cache
        assert (cache.slots, cache.length) == (3, engine.max_length)
        where = cache.k.data_ptr()
        outs = generate(engine, prompts, GREEDY)
        assert engine.table.cache.k.data_ptr() == where
        assert outs[0].token_ids == first.token_ids
    finally:
        engine.shutdown()


class BusyNeighbour:
    """A governor that always sees the other cores taken: one thread while stepping."""

    def __init__(self, most: int):
        self.most = most

    def threads(self) -> int:
        return 1


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs two threads to give one up")
def test_the_engine_gives_the_threads_back_when_it_stops_stepping(hf_engine, prompts):
    """The count is the whole process's: a colocated trainer's update after the rollouts must
    not inherit the one thread the governor left the engine at its last busy step."""
    most = torch.get_num_threads()
    seen = []
    engine = HFEngine(HFEngineConfig(dtype="float32"), model=hf_engine.model, tokenizer=hf_engine.tokenizer)
    engine.governor = BusyNeighbour(most)
    step = engine.step
    engine.step = lambda admitted: (step(admitted), seen.append(torch.get_num_threads()))
    try:
        async def run():
            out = await engine.generate(prompts[:1], SamplingParams(max_tokens=4, temperature=0.0))
            await until(lambda: engine.stepper is None, what="the stepper's end")
            return out
        asyncio.run(run())
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == most
    finally:
        torch.set_num_threads(most)
        engine.shutdown()


def test_update_weights_keeps_outputs_for_same_weights_and_drops_caches(hf_engine, prompts):
    before = generate(hf_engine, prompts[:1], GREEDY)[0]
    asyncio.run(hf_engine.update_weights(hf_engine.model.state_dict()))
    assert not hf_engine.table.residents and not hf_engine.table.blocks
    assert generate(hf_engine, prompts[:1], GREEDY)[0].token_ids == before.token_ids


def test_release_cache_frees_the_slots_and_refuses_while_requests_run(hf_engine, prompts):
    before = generate(hf_engine, prompts[:1], GREEDY)[0]
    assert hf_engine.table.cache.k.numel() > 0 and hf_engine.table.residents
    asyncio.run(hf_engine.release_cache())
    assert hf_engine.table.cache.k.numel() == 0 and not hf_engine.table.residents
    assert not hf_engine.table.blocks and hf_engine.load().kv_used_tokens == 0
    assert generate(hf_engine, prompts[:1], GREEDY)[0].token_ids == before.token_ids

    async def while_running():
        running = asyncio.ensure_future(hf_engine.generate(prompts[:1], GREEDY))
        await until(lambda: hf_engine.table.n_active, what="decoding")
        with pytest.raises(RuntimeError, match="in flight"):
            await hf_engine.release_cache()
        return await running
    assert asyncio.run(while_running())[0].token_ids == before.token_ids
