"""vLLM engines and members on CPU: the real adapters (``VLLMEngine``, ``VLLMRayMember``,
``VLLMServerMember``, the learner's ``VLLMTransfer``) against the installed vLLM with only its
GPU-bound parts swapped (``tests/fakes/vllm_cpu``: the engine core is an HFEngine on the
embedded model behind vLLM's real msgpack wire, NCCL is gloo), on a real local Ray cluster with
the real FSDP2 learner. What only real vLLM on a GPU can show is in ``test_vllm.py`` (``gpu``)."""

import asyncio
import os
import sys

import pytest

from rstar2.engines.base import SamplingParams
from rstar2.weights.wire import digests
from tests.cluster.test_fsdp_learner import batch, config, distributed, of_family  # noqa: F401
from tests.cluster.test_weight_sync import answers
from tests.engines.serving import serving
from tests.polling import until, wait_until

pytestmark = pytest.mark.vllm_contract

REPO = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
GREEDY = SamplingParams(temperature=0, max_tokens=4)


@pytest.fixture
def stand_in():
    """vLLM in this process, its GPU-bound parts swapped (``tests/fakes/vllm_cpu``)."""
    from tests.fakes.vllm_cpu import install, uninstall

    install()
    yield
    uninstall()


@pytest.fixture
def no_vllm(monkeypatch):
    """``import vllm`` fails, as on a machine without the [gpu] extra."""
    monkeypatch.setitem(sys.modules, "vllm", None)


@pytest.fixture(scope="module")
def stand_in_ray():
    """A local Ray cluster whose workers swap vLLM's GPU-bound parts as they start."""
    ray = pytest.importorskip("ray", reason="needs the [ray] extra (scripts/setup.sh installs it)")
    path = os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"},
                          "worker_process_setup_hook": "tests.fakes.vllm_cpu.install"})
    yield ray
    ray.shutdown()


def prompt_of(tokenizer):
    return tokenizer.encode("<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n")


def nudged(model, factor: float = 1.01) -> dict:
    """Layer 0 of ``model`` scaled by ``factor``: weights that change what it samples."""
    return {k: v * factor for k, v in model.state_dict().items() if "layers.0." in k}


def worker_digests(per_worker: list[dict[str, str]]) -> list[dict[str, str]]:
    """vLLM's checksums of each worker, keyed by parameter name (the rank prefix dropped)."""
    return [{key.split(":", 4)[-1]: value for key, value in worker.items()} for worker in per_worker]


def test_the_adapter_samples_loads_weights_and_stamps_versions(stand_in, hf_engine, tokenizer):
    from rstar2.engines.registry import model_location
    from rstar2.engines.vllm import VLLMEngine

    engine = VLLMEngine(model_location("default"), dtype="float32", max_num_seqs=2)
    prompt = prompt_of(tokenizer)

    async def run():
        [mine] = await engine.generate([prompt], GREEDY)
        [ref] = await hf_engine.generate([prompt], GREEDY)
        assert (mine.token_ids, mine.finish_reason) == (ref.token_ids, ref.finish_reason)
        assert mine.logprobs == pytest.approx(ref.logprobs, abs=1e-5)
        assert mine.weight_version is None
        load = engine.load()  # vLLM's own reader over the registry
        assert load.kv_capacity_tokens > 0 and load.kv_used_tokens == 0 and load.running == 0
        state = nudged(hf_engine.model)
        await engine.update_weights(state, version=3)  # shared memory to the worker extension
        [loaded] = worker_digests(await engine.weight_digests())
        assert {name: loaded[name] for name in state} == digests(state)
        [moved] = await engine.generate([prompt], GREEDY)
        assert moved.weight_version == 3 and moved.logprobs != mine.logprobs
        calls = [name for name, _ in engine.llm.core.calls]
        assert calls == ["collective_rpc", "reset_prefix_cache", "compute_weight_checksums"]
        assert not [p for p in os.listdir("/dev/shm") if p.startswith("rstar2-weights-")]

    try:
        asyncio.run(run())
    finally:
        asyncio.run(engine.close())


def test_a_push_while_requests_run_never_leaves_a_stale_cache(stand_in, hf_engine, tokenizer):
    """vLLM's ``reset_prefix_cache()`` answers False while requests hold cache blocks; the
    engine then preempts them (vLLM recomputes them under the new weights)."""
    from rstar2.engines.registry import model_location
    from rstar2.engines.vllm import VLLMEngine

    engine = VLLMEngine(model_location("default"), dtype="float32", max_num_seqs=2)
    core = engine.llm.core
    long = SamplingParams(temperature=0, max_tokens=48, stop_token_ids=())

    async def run():
        running = asyncio.create_task(engine.generate([prompt_of(tokenizer)], long))
        await until(lambda: core.running == 1, what="a request in flight")
        await engine.update_weights(nudged(hf_engine.model), version=1)
        await running
        resets = [args for name, args in core.calls if name == "reset_prefix_cache"]
        assert resets == [[False, False], [True, False]] and core.preempted == 1

    try:
        asyncio.run(run())
    finally:
        asyncio.run(engine.close())


def test_vllms_own_finish_reason_is_recorded_and_one_engine_per_process(stand_in, tokenizer):
    from rstar2.engines.registry import model_location
    from rstar2.engines.vllm import VLLMEngine

    engine = VLLMEngine(model_location("default"), dtype="float32", max_num_seqs=2)
    long = SamplingParams(temperature=0, max_tokens=48, stop_token_ids=())

    async def run():
        running = asyncio.create_task(engine.generate([prompt_of(tokenizer)], long))
        await until(lambda: engine.llm.core.running == 1, what="a request in flight")
        await engine.llm.pause_generation(mode="abort")  # e.g. an operator's pause
        [aborted] = await running
        await engine.llm.resume_generation()
        return aborted

    try:
        with pytest.raises(RuntimeError, match="one vLLM engine per process"):
            VLLMEngine(model_location("default"), dtype="float32")
        assert asyncio.run(run()).finish_reason == "abort"
    finally:
        asyncio.run(engine.close())


def test_a_missing_vllm_is_said_before_any_actor_starts(no_vllm, tokenizer):
    """(The CLI's one line for the 14B recipes: ``tests/rl/test_train_command.py``.)"""
    import ray

    from rstar2.fleet.rollout_engine import MemberSpec, open_fleet

    with pytest.raises(ImportError, match=r"pip install -e '\.\[gpu\]'"):
        open_fleet([MemberSpec(kind="vllm", ray=True)], "kv_aware", model="default",
                   dtype="float32", seed=0, tokenizer=tokenizer)
    assert not ray.is_initialized()


def member_digests(fleet) -> list[list[dict[str, str]]]:
    async def read():
        return [worker_digests(await member.weight_digests()) for member in fleet.members]
    return asyncio.run(read())


def versions(fleet, tokenizer):
    """The weight version each member stamps on a completion now."""
    prompt = prompt_of(tokenizer)
    return [asyncio.run(member.generate([prompt], GREEDY))[0].weight_version
            for member in fleet.members]


def expected(learner, workers: list[dict[str, str]]) -> dict[str, str]:
    """The learner's digests of the parameters the workers hold (tied ones appear once)."""
    state = learner.full_state_dict()
    return digests({name: state[name] for name in workers[0]})


async def push_and_settle(learner, fleet, version: int) -> None:
    """One push, then wait for the replacements the fleet started during it."""
    await learner.push_weights(version)
    while fleet.restarts:
        await asyncio.gather(*fleet.restarts)


def test_vllm_members_take_weights_by_vllms_transfer_and_stamp_versions(
        stand_in_ray, config, tiny_models):  # noqa: F811
    """Two Ray members, one with two tensor-parallel workers: the learner's rank 0 and the
    three workers form one group (ranks 1-2 and 3), and every worker ends up bitwise equal; a
    member replaced after dying is caught up through the fleet's ``on_replaced``. On a tiny
    random Qwen3: the transfer does not depend on the model's size."""
    from rstar2.cluster.weight_strategies import GroupSync, VLLMTransfer
    from rstar2.fleet.rollout_engine import MemberSpec, open_fleet
    from rstar2.fleet.vllm_member import VLLMRayMember
    from rstar2.models.loading import load_tokenizer

    config = of_family(config, "qwen3", tiny_models)
    tokenizer = load_tokenizer(config.model.path)
    config = config.model_copy(update={"cluster": config.cluster.model_copy(update={
        "weight_sync": "broadcast", "learner": config.cluster.learner.model_copy(update={"ranks": 1})})})
    specs = [MemberSpec(kind="vllm", ray=True, gpus=0, max_batch_size=2,
                        engine_args={"tensor_parallel_size": 2}),
             MemberSpec(kind="vllm", ray=True, gpus=0, max_batch_size=2)]
    fleet = open_fleet(specs, "static", model=config.model.path, dtype="float32", seed=0,
                       tokenizer=tokenizer, on_replaced=lambda m: learner.catch_up(m))
    assert all(isinstance(m, VLLMRayMember) for m in fleet.members)
    learner = distributed(config, fleet, tokenizer)
    try:
        load = asyncio.run(fleet.members[0].load())  # from the engine's own gauges, via the actor
        assert load.kv_capacity_tokens > 0 and load.running == 0
        asyncio.run(learner.push_weights(1))
        assert isinstance(learner.sync, GroupSync) and isinstance(learner.sync.transport, VLLMTransfer)
        [[a0, a1], [b0]] = member_digests(fleet)
        first = expected(learner, [a0])
        assert a0 == a1 == b0 == first
        assert versions(fleet, tokenizer) == [1, 1]
        learner.learn(batch(tokenizer))  # step 2's weights, deliberately not pushed
        assert expected(learner, [a0]) != first and member_digests(fleet)[1] == [first]
        assert versions(fleet, tokenizer) == [1, 1]  # the skipped sync shows
        asyncio.run(learner.push_weights(2))
        moved = expected(learner, [a0])
        assert member_digests(fleet) == [[moved, moved], [moved]]
        assert versions(fleet, tokenizer) == [2, 2]
        killed = fleet.members[1].actor  # dies between steps: the push forms a group without
        stand_in_ray.kill(killed)       # it, its replacement is caught up in a group of its own
        wait_until(lambda: not answers(fleet.members[1]), what="the killed actor gone")  # kill is asynchronous
        learner.learn(batch(tokenizer))
        asyncio.run(push_and_settle(learner, fleet, 3))
        assert fleet.replaced == 1 and fleet.members[1].actor != killed
        latest = expected(learner, [a0])
        assert latest != moved and member_digests(fleet) == [[latest, latest], [latest]]
        assert versions(fleet, tokenizer) == [3, 3]
    finally:
        learner.close()
        asyncio.run(fleet.close())


def test_a_vllm_serve_member_takes_weights_through_vllms_routes(stand_in, hf_engine, tokenizer):
    """vLLM's own RL router and request models over the stand-in engine; the member sends a
    state dict from this process (vLLM's trainer-side engine, handshake through vLLM's HTTP
    client), pausing the server around each round."""
    import vllm
    from vllm.config import WeightTransferConfig

    from rstar2.engines.registry import model_location
    from rstar2.fleet.vllm_server import VLLMServerMember
    from tests.fakes.vllm_cpu.server import serve_app

    llm = vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(
        model=model_location("default"), dtype="float32", max_num_seqs=2,
        logprobs_mode="processed_logprobs", weight_transfer_config=WeightTransferConfig("nccl")))
    prompt = prompt_of(tokenizer)
    params = SamplingParams(temperature=0, max_tokens=4)

    async def run(url):
        member = VLLMServerMember(url, name="served")
        try:
            assert await member.transfer_workers() == 1
            [before] = await member.generate([prompt], params)
            for version, factor in ((1, 1.01), (2, 0.99)):  # the second reuses the metadata
                state = nudged(hf_engine.model, factor)
                await member.update_weights(state, version=version)
                [loaded] = worker_digests(await member.weight_digests())
                assert {name: loaded[name] for name in state} == digests(state)
            [after] = await member.generate([prompt], params)
            assert after.weight_version == 2 and after.logprobs != before.logprobs
            assert await llm.get_weight_version() == "2"
        finally:
            await member.close()

    try:
        with serving(serve_app(llm)) as url:
            asyncio.run(run(url))
        pauses = [args for name, args in llm.core.calls if name == "pause_generation"]
        assert pauses == [["wait", True], ["wait", True]]
        assert [name for name, _ in llm.core.calls].count("resume_scheduler") == 2
    finally:
        llm.shutdown()


@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_the_adapter_serves_and_loads_weights_for_every_family(family, stand_in, tiny_models):
    """A tiny random Qwen2.5 and Qwen3 through the adapter: the tokens of an HFEngine on the same
    model, before and after new weights are loaded by name (Llama: the tests above)."""
    import torch

    from rstar2.agent.prompt import ChatFormat
    from rstar2.engines.registry import model_location
    from rstar2.engines.hf import HFEngine, HFEngineConfig
    from rstar2.engines.vllm import VLLMEngine

    path = str(tiny_models[family])
    engine = VLLMEngine(model_location(path), dtype="float32", max_num_seqs=2)
    reference = HFEngine(HFEngineConfig(model=path, dtype="float32", device="cpu"))
    prompt = ChatFormat(reference.tokenizer).prompt_ids("What is 2 + 2?")
    params = SamplingParams(temperature=0, max_tokens=12)
    noise = torch.Generator().manual_seed(0)
    state = {name: tensor + 0.2 * torch.randn(tensor.shape, generator=noise)
             for name, tensor in reference.model.state_dict().items()}

    async def run():
        [before] = await engine.generate([prompt], params)
        [expected] = await reference.generate([prompt], params)
        await engine.update_weights(state, version=3)
        await reference.update_weights(state)
        [after] = await engine.generate([prompt], params)
        [expected_after] = await reference.generate([prompt], params)
        return before, expected, after, expected_after

    try:
        before, expected, after, expected_after = asyncio.run(run())
    finally:
        asyncio.run(engine.close())
        reference.shutdown()
    assert before.token_ids == expected.token_ids and after.token_ids == expected_after.token_ids
    assert after.logprobs == pytest.approx(expected_after.logprobs, abs=1e-5)
    assert after.logprobs != pytest.approx(before.logprobs, abs=1e-2) and after.weight_version == 3
