"""HFEngine takes new weights while requests run (``PausableEngine``): 'keep' continues them under
the new weights with every token stamped, 'abort' ends them with what they had; queued
requests wait for ``resume``; without a pause, in-flight weights are refused."""

import asyncio

import pytest
import torch

from rstar2.engines.base import PausableEngine, SamplingParams
from rstar2.engines.hf import HFEngine, HFEngineConfig
from tests.engines.test_fused_decode import kernel_sized_model
from tests.polling import until

LONG = SamplingParams(temperature=1.0, max_tokens=60, stop_token_ids=(), seed=5)


@pytest.fixture
def engine():
    model, tokenizer = kernel_sized_model("llama", seed=0)
    engine = HFEngine(HFEngineConfig(dtype="float32"), model=model, tokenizer=tokenizer)
    asyncio.run(engine.update_weights({}, version=0))
    yield engine
    engine.shutdown()


def other_weights():
    return kernel_sized_model("llama", seed=1)[0].state_dict()


def test_the_engine_is_pausable(engine):
    assert isinstance(engine, PausableEngine)


def test_keep_goes_on_under_the_new_weights_and_stamps_each_token(engine):
    async def run():
        running = asyncio.ensure_future(engine.generate([[5, 6, 7, 8], [9, 10, 11]], LONG))
        await until(lambda: engine.table.n_active == 2 and len(engine.table.active[0].out_ids) >= 5,
                    what="both decoding")
        await engine.pause("keep")
        decoded = [len(r.out_ids) for r in engine.table.active]
        await asyncio.sleep(0.05)
        assert [len(r.out_ids) for r in engine.table.active] == decoded, "a paused engine steps"
        await engine.update_weights(other_weights(), version=1)
        await engine.resume()
        return await running, decoded

    outs, decoded = asyncio.run(run())
    for out, before in zip(outs, decoded):
        assert len(out.token_ids) == LONG.max_tokens and out.finish_reason == "length"
        assert out.weight_version == 0
        assert out.token_versions == [0] * before + [1] * (LONG.max_tokens - before)


def test_keep_drops_what_no_running_sequence_reads(engine):
    async def run():
        await engine.generate([[1, 2, 3, 4]], SamplingParams(max_tokens=3, stop_token_ids=()))
        assert len(engine.table.residents) == 1  # parked for its next turn
        running = asyncio.ensure_future(engine.generate([[9, 9, 9]], LONG))
        await until(lambda: engine.table.n_active == 1, what="decoding")
        await engine.pause("keep")
        await engine.update_weights(other_weights(), version=1)
        assert engine.table.residents == engine.table.active and not engine.table.blocks
        await engine.resume()
        await running

    asyncio.run(run())


def test_abort_ends_running_requests_and_queued_ones_wait_for_resume(engine):
    async def run():
        running = asyncio.ensure_future(engine.generate([[5, 6, 7, 8]], LONG))
        await until(lambda: engine.table.n_active == 1 and len(engine.table.active[0].out_ids) >= 3,
                    what="decoding")
        await engine.pause("abort")
        (aborted,) = await running
        waiting = asyncio.ensure_future(engine.generate([[1, 2, 3]], SamplingParams(max_tokens=4, stop_token_ids=())))
        await asyncio.sleep(0.05)
        assert not waiting.done() and engine.table.n_active == 0 and len(engine.queue) == 1
        await engine.update_weights(other_weights(), version=1)
        await engine.resume()
        return aborted, await waiting

    aborted, (later,) = asyncio.run(run())
    assert aborted.finish_reason == "abort" and 3 <= len(aborted.token_ids) < LONG.max_tokens
    assert len(aborted.logprobs) == len(aborted.token_ids) and aborted.weight_version == 0
    assert later.weight_version == 1 and len(later.token_ids) == 4
    assert engine.kv.reserved == 0


def test_new_weights_without_a_pause_are_refused_while_requests_run(engine):
    async def run():
        running = asyncio.ensure_future(engine.generate([[5, 6, 7]], LONG))
        await until(lambda: engine.table.n_active == 1, what="decoding")
        with pytest.raises(RuntimeError, match="pause first"):
            await engine.update_weights(other_weights(), version=1)
        await running

    asyncio.run(run())


def test_versions_are_one_number_when_nothing_changed_meanwhile(engine):
    (out,) = asyncio.run(engine.generate([[3, 4, 5]], SamplingParams(max_tokens=5, stop_token_ids=())))
    assert out.weight_version == 0 and out.token_versions is None
    assert torch.tensor(out.logprobs).isfinite().all()
