"""HFEngine's GPU path (flat attention, bucketed fixed-shape decode steps) run on the CPU: the
same tokens as plain transformers, exact log-probs, blocks copied into slots, and padding rows
that never touch another sequence's keys. Only the CUDA graph capture itself needs a GPU
(tests/engines/test_cuda.py)."""

import pytest
import torch

from rstar2.engines.base import SamplingParams
from rstar2.engines.bucketed import MIN_LENGTH, batch_bucket, length_bucket
from rstar2.engines.hf import HFEngine, HFEngineConfig
from tests.engines.test_hf import GREEDY, generate, prompts, reference_greedy, reference_logprobs  # noqa: F401


@pytest.fixture(scope="module")
def flat_engine(hf_engine):
    engine = HFEngine(HFEngineConfig(dtype="float32", min_shared_prefix=16, attention="flat"),
                      model=hf_engine.model, tokenizer=hf_engine.tokenizer)
    yield engine
    engine.shutdown()


def test_buckets():
    assert [batch_bucket(n, 32) for n in (1, 2, 3, 5, 17, 32)] == [1, 2, 4, 8, 32, 32]
    assert batch_bucket(40, 48) == 48 and batch_bucket(3, 3) == 3
    assert [length_bucket(n) for n in (1, MIN_LENGTH, MIN_LENGTH + 1, 1000)] == [
        MIN_LENGTH, MIN_LENGTH, 2 * MIN_LENGTH, 1024]


def test_flat_greedy_equals_plain_generate_with_a_padded_batch(flat_engine, prompts):
    flat_engine.drop_caches()
    outs = generate(flat_engine, prompts[:3], GREEDY)  # 3 rows: a batch bucket of 4
    assert flat_engine.table.blocks, "the shared system prompt should have become a block"
    assert all(r.block is None for r in flat_engine.table.residents), "blocks are copied into slots"
    for prompt, out in zip(prompts, outs):
        expected = reference_greedy(flat_engine.model, prompt, GREEDY.max_tokens)
        assert out.token_ids == expected[: len(out.token_ids)]


def test_flat_logprobs_match_a_plain_forward_pass(flat_engine, prompts):
    params = SamplingParams(temperature=0.7, max_tokens=10)
    outs = generate(flat_engine, prompts[:2] * 2, params)  # identical prompts: prefilled once
    for prompt, out in zip(prompts[:2] * 2, outs):
        expected = reference_logprobs(flat_engine.model, prompt, out.token_ids, 0.7)
        assert out.logprobs == pytest.approx(expected, abs=2e-4)


def test_padding_rows_leave_parked_keys_alone_and_the_next_turn_resumes(flat_engine, prompts, tokenizer):
    flat_engine.drop_caches()
    first = generate(flat_engine, prompts, GREEDY)  # four parked sequences
    parked = {id(r): (r, flat_engine.table.cache.k[:, i, :, : r.used].clone())
              for i, r in enumerate(flat_engine.table.residents)}
    others = [tokenizer.encode(f"Count to {n}.", add_special_tokens=False) for n in (3, 4, 5)]
    generate(flat_engine, others, SamplingParams(temperature=0, max_tokens=6, stop_token_ids=()))
    for r, keys in parked.values():
        if r in flat_engine.table.residents:
            slot = flat_engine.table.residents.index(r)
            assert torch.equal(flat_engine.table.cache.k[:, slot, :, : r.used], keys)
    follow_up = tokenizer.encode("\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n",
                                 add_special_tokens=False)
    second_prompt = prompts[0] + first[0].token_ids + follow_up
    second = generate(flat_engine, [second_prompt], GREEDY)[0]
    assert second.token_ids == reference_greedy(flat_engine.model, second_prompt, 12)[
        : len(second.token_ids)]

