"""vLLM engines as fleet members, on CPU: the real adapters (``VLLMEngine``, ``VLLMRayMember``,
``VLLMTransferSync``) against ``tests/fakes/vllm`` -- the subset of vLLM's API they call,
backed by a real HFEngine on the embedded model -- on a real local Ray cluster, with the real
FSDP2 learner. What only real vLLM on a GPU can show is in ``test_vllm.py`` (marked ``gpu``)."""

import asyncio
import os
import sys

import pytest

from rstar2.engines.base import SamplingParams
from tests.cluster.test_fsdp_learner import batch, config  # noqa: F401

FAKES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fakes")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
GREEDY = SamplingParams(temperature=0, max_tokens=4)


def forget_vllm():
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]


@pytest.fixture
def fake_vllm(monkeypatch):
    """``import vllm`` finds the stand-in, in this process."""
    monkeypatch.syspath_prepend(FAKES)
    forget_vllm()
    yield
    forget_vllm()


@pytest.fixture
def no_vllm(monkeypatch):
    """``import vllm`` fails, as on a machine without the [gpu] extra."""
    forget_vllm()
    monkeypatch.setitem(sys.modules, "vllm", None)


@pytest.fixture(scope="module")
def fake_ray():
    """A local Ray cluster whose workers import the stand-in as ``vllm``."""
    ray = pytest.importorskip("ray", reason="needs the [ray] extra (scripts/setup.sh installs it)")
    path = os.pathsep.join([FAKES, REPO, os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}})
    yield ray
    ray.shutdown()


def prompt_of(tokenizer):
    return tokenizer.encode("<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n")


def test_the_adapter_samples_reads_its_load_and_stamps_versions(fake_vllm, hf_engine, tokenizer):
    from rstar2.engines.factory import model_location
    from rstar2.engines.vllm import VLLMEngine

    engine = VLLMEngine(model_location("default"), dtype="float32", max_num_seqs=2)
    prompt = prompt_of(tokenizer)
    try:
        assert engine.native_transfer  # the installed "vLLM" has WeightTransferConfig
        [mine] = asyncio.run(engine.generate([prompt], GREEDY))
        [ref] = asyncio.run(hf_engine.generate([prompt], GREEDY))
        assert (mine.token_ids, mine.finish_reason) == (ref.token_ids, ref.finish_reason)
        assert mine.logprobs == pytest.approx(ref.logprobs, abs=1e-5)
        assert mine.weight_version is None
        load = engine.load()
        assert load.kv_capacity_tokens > 0 and load.kv_used_tokens == 0 and load.running == 0
        state = {k: v * 1.01 for k, v in hf_engine.model.state_dict().items() if "layers.0." in k}
        asyncio.run(engine.update_weights(state, version=3))
        [moved] = asyncio.run(engine.generate([prompt], GREEDY))
        assert moved.weight_version == 3 and moved.logprobs != mine.logprobs
    finally:
        asyncio.run(engine.close())


def test_a_missing_vllm_is_said_before_any_actor_starts(no_vllm, tokenizer):
    """(The CLI's one line for the 14B recipes: ``tests/rl/test_train_command.py``.)"""
    import ray

    from rstar2.engines.factory import MemberSpec, open_fleet

    with pytest.raises(ImportError, match=r"pip install -e '\.\[gpu\]'"):
        open_fleet([MemberSpec(kind="vllm", ray=True)], "kv_aware", model="default",
                   dtype="float32", seed=0, tokenizer=tokenizer)
    assert not ray.is_initialized()


def member_checksums(fleet):
    import ray

    return [ray.get(member.actor.weights_checksum.remote()) for member in fleet.members]


def versions(fleet, tokenizer):
    """The weight version each member stamps on a completion now."""
    prompt = prompt_of(tokenizer)
    return [asyncio.run(member.generate([prompt], GREEDY))[0].weight_version
            for member in fleet.members]


def test_vllm_members_take_weights_by_vllms_transfer_and_stamp_versions(
        fake_vllm, fake_ray, config, tokenizer):  # noqa: F811
    from rstar2.cluster.learner import DistributedLearner
    from rstar2.cluster.launch import cluster_engine
    from rstar2.cluster.vllm_sync import VLLMTransferSync
    from rstar2.cluster.weight_sync import checksum
    from rstar2.engines.fleet.vllm_member import VLLMRayMember

    config = config.model_copy(update={
        "rollout": config.rollout.model_copy(update={"engine": "vllm"}),
        "cluster": config.cluster.model_copy(update={
            "weight_sync": "broadcast", "learner": config.cluster.learner.model_copy(update={"ranks": 1}),
            "engines": config.cluster.engines.model_copy(update={
                "members": 2, "gpus_per_member": 0, "max_num_seqs": 2})})})
    fleet = cluster_engine(config, tokenizer)
    assert all(isinstance(m, VLLMRayMember) for m in fleet.members)
    learner = DistributedLearner(config, fleet, pad_id=tokenizer.pad_token_id)
    try:
        load = asyncio.run(fleet.members[0].load())  # from the engine's own gauges, via the actor
        assert load.kv_capacity_tokens > 0 and load.running == 0
        asyncio.run(learner.push_weights(1))
        assert isinstance(learner.sync, VLLMTransferSync)
        first = checksum(learner.full_state_dict())
        assert member_checksums(fleet) == [[first], [first]]
        assert versions(fleet, tokenizer) == [1, 1]
        learner.learn(batch(tokenizer))  # step 2's weights, deliberately not pushed
        moved = checksum(learner.full_state_dict())
        assert moved != first and member_checksums(fleet) == [[first], [first]]
        assert versions(fleet, tokenizer) == [1, 1]  # the skipped sync shows
        asyncio.run(learner.push_weights(2))
        assert member_checksums(fleet) == [[moved], [moved]]
        assert versions(fleet, tokenizer) == [2, 2]
    finally:
        learner.close()
        asyncio.run(fleet.close())


@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_the_adapter_serves_and_loads_weights_for_every_family(family, fake_vllm, tiny_models):
    """A tiny random Qwen2.5 and Qwen3 through the adapter: the tokens of an HFEngine on the same
    model, before and after new weights are loaded by name (Llama: the tests above)."""
    import torch

    from rstar2.agent.prompt import ChatFormat
    from rstar2.engines.factory import model_location
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
