"""Contract tests: rstar2 against the installed vLLM package (``vllm==`` the pin in
``scripts/vllm-test-requirements.txt``), on the CPU.

vLLM's CUDA kernels do not load here, but its Python modules do, and they are what rstar2 calls:
every vLLM object rstar2 builds is built here with vLLM's own class from the arguments rstar2
gives it; every call rstar2 makes on ``AsyncLLM`` is bound to the real signature (``inspect``);
every argument that crosses vLLM's process boundary goes through vLLM's own
``MsgpackEncoder``/``MsgpackDecoder``; the HTTP routes a ``vllm serve`` member calls are looked
up in vLLM's own router. ``test_rstar2_uses_no_vllm_name_these_tests_do_not_cover`` walks
rstar2's source for every vLLM name it uses and fails on one missing from ``COVERED``. The
stand-in the CPU tests run on (``tests/fakes/vllm_cpu``) is checked against vLLM's signatures
too. What needs a GPU (kernels, NCCL, CUDA memory) is in the tests marked ``gpu``.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rstar2.engines.base import SamplingParams

pytestmark = pytest.mark.vllm_contract

REPO = Path(__file__).resolve().parents[2]

COVERED = {
    # name rstar2 uses -> the test here that checks it against vLLM
    "vllm": "test_the_pin_is_the_installed_vllm",
    "vllm.__version__": "test_the_pin_is_the_installed_vllm",
    "vllm.AsyncLLMEngine": "test_every_call_on_asyncllm_binds_to_the_real_signature",
    "vllm.AsyncEngineArgs": "test_engine_args_are_vllms",
    "vllm.SamplingParams": "test_sampling_params_are_vllms",
    "vllm.inputs.TokensPrompt": "test_outputs_and_prompts_are_read_as_vllm_builds_them",
    "vllm.config.WeightTransferConfig": "test_engine_args_are_vllms",
    "vllm.v1.metrics.reader.get_metrics_snapshot": "test_metrics_are_read_with_vllms_reader",
    "vllm.distributed.weight_transfer.base.WeightTransferInitRequest": "test_every_rpc_survives_vllms_wire",
    "vllm.distributed.weight_transfer.base.WeightTransferUpdateRequest": "test_every_rpc_survives_vllms_wire",
    "vllm.distributed.weight_transfer.base.WeightSource": "test_the_trainer_side_is_vllms",
    "vllm.distributed.weight_transfer.base.ParamMeta": "test_the_trainer_side_is_vllms",
    "vllm.distributed.weight_transfer.ModuleSource": "test_the_trainer_side_is_vllms",
    "vllm.distributed.weight_transfer.WeightTransferTrainerFactory": "test_the_trainer_side_is_vllms",
    "vllm.distributed.weight_transfer.HTTPVLLMWeightSyncClient": "test_vllm_serve_routes_are_vllms",
    "vllm.distributed.weight_transfer.nccl_engine.NCCLTrainerInitInfo": "test_the_trainer_side_is_vllms",
    "TrainerWeightTransferEngine.send_weights": "test_the_trainer_side_is_vllms",
    "TrainerWeightTransferEngine.shutdown": "test_the_trainer_side_is_vllms",
    "TrainerWeightTransferEngine.source": "test_the_trainer_side_is_vllms",
    "Worker.get_model": "test_the_worker_extension_fits_vllms_worker",
    "model.load_weights": "test_the_worker_extension_fits_vllms_worker",
    "AsyncLLM.vllm_config": "test_every_call_on_asyncllm_binds_to_the_real_signature",
    **{f"AsyncLLM.{name}": "test_every_call_on_asyncllm_binds_to_the_real_signature"
       for name in ("generate", "collective_rpc", "reset_prefix_cache", "compute_weight_checksums",
                    "init_weight_transfer_engine", "start_weight_update", "update_weights",
                    "finish_weight_update", "shutdown_weight_transfer_engine", "shutdown")},
    **{f"route:{path}": "test_vllm_serve_routes_are_vllms"
       for path in ("/pause", "/resume", "/update_weight_version", "/shutdown_weight_transfer_engine",
                    "/weight_checker", "/get_world_size")},
}


# ---------------------------------------------------------------- the names rstar2 uses
def vllm_names_used() -> set[str]:
    """Every vLLM name in rstar2's source: imports of ``vllm``, attributes of the ``vllm``
    module, ``require(module, name)``, attributes of ``self.llm`` (an ``AsyncLLM``), of vLLM's
    trainer-side engine (``self.sender``/``self.transfer``), the worker extension's calls, and
    the routes a ``vllm serve`` member posts to."""
    used: set[str] = set()
    for path in (REPO / "rstar2").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            used |= names_in(node, path.name)
    return used


def names_in(node: ast.AST, filename: str) -> set[str]:
    found = set()
    if isinstance(node, ast.Import):
        found |= {a.name for a in node.names if a.name.split(".")[0] == "vllm"}
    elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "vllm":
        found |= {f"{node.module}.{a.name}" for a in node.names}
    elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        if node.value.id == "vllm":
            found.add(f"vllm.{node.attr}")
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "require":
        module, name = (a.value for a in node.args[:2])
        found.add(f"{module}.{name}")
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
        owner = node.value
        if isinstance(owner.value, ast.Name) and owner.value.id == "self":
            if owner.attr == "llm":
                found.add(f"AsyncLLM.{node.attr}")
            elif owner.attr in ("sender", "transfer") and filename in ("vllm_server.py", "rank.py"):
                found.add(f"TrainerWeightTransferEngine.{node.attr}")
    if filename == "vllm_worker.py" and isinstance(node, ast.Attribute):
        if node.attr == "get_model":
            found.add("Worker.get_model")
        elif node.attr == "load_weights":
            found.add("model.load_weights")
    if filename == "vllm_server.py" and isinstance(node, ast.Constant) and isinstance(node.value, str):
        if re.fullmatch(r"/[a-z_]+", node.value):
            found.add(f"route:{node.value}")
    return found


def test_rstar2_uses_no_vllm_name_these_tests_do_not_cover():
    used = vllm_names_used()
    assert {"AsyncLLM.generate", "vllm.SamplingParams", "route:/pause"} <= used  # the walk works
    assert sorted(used - set(COVERED)) == [], "vLLM names rstar2 uses without a contract test"
    missing = {test for test in COVERED.values() if test not in globals()}
    assert not missing


# ---------------------------------------------------------------- the pin
def test_the_pin_is_the_installed_vllm():
    """The gpu extra's floor is the version these tests run on (the test setup's pin), and
    the engine's feature test names what is missing."""
    import tomllib
    import vllm

    from rstar2.engines.vllm import VLLM_REQUIREMENT, require

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    assert extra == [VLLM_REQUIREMENT]
    pin = re.search(r"^vllm==(\S+)", (REPO / "scripts/vllm-test-requirements.txt").read_text(), re.M)
    assert pin and pin.group(1) == vllm.__version__
    floor = tuple(int(p) for p in VLLM_REQUIREMENT.split(">=")[1].split("."))
    assert tuple(int(p) for p in vllm.__version__.split(".")[:len(floor)]) >= floor
    with pytest.raises(ImportError, match=r"rstar2 needs vllm>=.*has no vllm.config.NoSuchThing"):
        require("vllm.config", "NoSuchThing")


# ---------------------------------------------------------------- objects rstar2 builds
class Recorder:
    """Stands for an ``AsyncLLM`` instance: records every call, answers from ``answers``
    (a value, or a callable of the call's arguments), sync or async as vLLM's method is."""

    def __init__(self, answers: dict):
        from vllm.config import ParallelConfig

        self.calls: list[tuple[str, tuple, dict]] = []
        self.answers = answers
        self.vllm_config = SimpleNamespace(parallel_config=ParallelConfig(tensor_parallel_size=2))

    def __getattr__(self, name):
        from vllm.v1.engine.async_llm import AsyncLLM

        real = getattr(AsyncLLM, name)  # AttributeError: not a method of vLLM's AsyncLLM
        answer = self.answers.get(name)

        def result(args, kwargs):
            self.calls.append((name, args, kwargs))
            return answer(*args, **kwargs) if callable(answer) else answer

        if inspect.isasyncgenfunction(real):
            async def stream(*args, **kwargs):
                yield result(args, kwargs)
            return stream
        if inspect.iscoroutinefunction(real):
            async def call(*args, **kwargs):
                return result(args, kwargs)
            return call
        return lambda *args, **kwargs: result(args, kwargs)


@pytest.fixture
def model_dir(tmp_path) -> str:
    """A model folder that exists: with HF_HUB_OFFLINE (the tests' setting) vLLM's engine
    arguments resolve a path that does not exist as a hub id in the cache."""
    (tmp_path / "m").mkdir()
    return str(tmp_path / "m")


@pytest.fixture
def recorded(monkeypatch):
    """``vllm.AsyncLLMEngine`` whose ``from_engine_args`` keeps the engine arguments and
    hands out a ``Recorder``; yields ``(engine_args_seen, recorder)``."""
    import vllm.engine.async_llm_engine as module
    from vllm.v1.engine.async_llm import AsyncLLM

    seen = []
    resets = iter([False, True])  # requests were running at the first reset
    recorder = Recorder({"reset_prefix_cache": lambda *a, **k: next(resets, True),
                         "collective_rpc": lambda *a, **k: [3],
                         "compute_weight_checksums": [{"dp0:pp0:pcp0:tp0:w": "00"}],
                         "generate": lambda *a, **k: finished_output(a[0]["prompt_token_ids"])})

    class RecordingLLM(AsyncLLM):
        @classmethod
        def from_engine_args(cls, engine_args, start_engine_loop=True, usage_context=None,
                             stat_loggers=None):
            seen.append(engine_args)
            return recorder

    monkeypatch.setattr(module, "AsyncLLMEngine", RecordingLLM)
    yield seen, recorder
    from rstar2.engines import vllm as adapter

    adapter.LIVE.clear()


def finished_output(prompt_ids, reason: str = "stop", flat: bool = False):
    """vLLM's ``RequestOutput`` of a finished request, log-probs recorded as vLLM does."""
    from vllm.logprobs import append_logprobs_for_next_position, create_sample_logprobs
    from vllm.outputs import CompletionOutput, RequestOutput

    tokens, values = [5, 9], [-0.5, -1.25]
    logprobs = create_sample_logprobs(flat)
    for token, value in zip(tokens, values):
        append_logprobs_for_next_position(logprobs, [token], [value], [None], 1, 0)
    sample = CompletionOutput(index=0, text="", token_ids=tokens, cumulative_logprob=sum(values),
                              logprobs=logprobs, finish_reason=reason)
    return RequestOutput(request_id="r", prompt=None, prompt_token_ids=list(prompt_ids),
                         prompt_logprobs=None, outputs=[sample], finished=True)


def drive(engine) -> None:
    """Every path of ``VLLMEngine`` that calls vLLM."""
    async def run():
        await engine.generate([[1, 2, 3]], SamplingParams(temperature=0.7, max_tokens=2, seed=4))
        await engine.update_weights({"w": torch.ones(2, 2)}, version=1)
        await engine.weight_digests()
        engine.transfer_workers()
        await engine.init_weight_transfer_engine({"master_address": "h", "master_port": 1,
                                                  "rank_offset": 1, "world_size": 3})
        await engine.start_weight_update()
        await engine.receive_weight_update({"names": ["w"], "dtype_names": ["float32"],
                                            "shapes": [[2, 2]]})
        await engine.finish_weight_update()
        await engine.weights_loaded(2)
        await engine.end_weight_transfer()
        await engine.close()
    asyncio.run(run())


def test_every_call_on_asyncllm_binds_to_the_real_signature(recorded, model_dir):
    from vllm.distributed.weight_transfer.base import (
        WeightTransferInitRequest,
        WeightTransferUpdateRequest,
    )
    from vllm.v1.engine.async_llm import AsyncLLM

    from rstar2.engines.vllm import ASYNC_LLM_CALLS, VLLMEngine

    _, recorder = recorded
    engine = VLLMEngine(model_dir, dtype="bfloat16")
    drive(engine)
    assert engine.transfer_workers() == 2  # vllm_config.parallel_config.world_size
    assert {name for name, _, _ in recorder.calls} == set(ASYNC_LLM_CALLS)
    for name, args, kwargs in recorder.calls:
        inspect.signature(getattr(AsyncLLM, name)).bind(recorder, *args, **kwargs)
    requests = {name: args[0] for name, args, _ in recorder.calls
                if name in ("init_weight_transfer_engine", "update_weights")}
    assert isinstance(requests["init_weight_transfer_engine"], WeightTransferInitRequest)
    assert isinstance(requests["update_weights"], WeightTransferUpdateRequest)
    resets = [kwargs for name, _, kwargs in recorder.calls if name == "reset_prefix_cache"]
    assert resets[:2] == [{}, {"reset_running_requests": True}]  # False, then preempt


def test_engine_args_are_vllms(recorded, model_dir):
    """Built with vLLM's ``AsyncEngineArgs`` from the arguments an in-process engine and a Ray
    member pass (a dataclass: an unknown field is a TypeError)."""
    from vllm.config import WeightTransferConfig
    from vllm.engine.arg_utils import AsyncEngineArgs

    from rstar2.fleet.rollout_engine import MemberSpec, member_settings
    from rstar2.engines.vllm import VLLMEngine
    from rstar2.engines.vllm_worker import EXTENSION

    seen, _ = recorded
    spec = MemberSpec(kind="vllm", ray=True, gpus=2, max_batch_size=8,
                      engine_args={"gpu_memory_utilization": 0.8, "max_model_len": 4096})
    settings = member_settings(spec, model="default", dtype="bfloat16", seed=3)
    settings.update(tensor_parallel_size=2, distributed_executor_backend="mp")  # VLLMRayMember
    asyncio.run(VLLMEngine(model_dir, dtype="bfloat16", seed=1).close())
    asyncio.run(VLLMEngine(**settings).close())
    for args in seen:
        assert isinstance(args, AsyncEngineArgs) and args.logprobs_mode == "processed_logprobs"
        assert args.enable_prefix_caching and args.worker_extension_cls == EXTENSION
        assert args.weight_transfer_config == WeightTransferConfig(backend="nccl")
    assert (seen[1].tensor_parallel_size, seen[1].max_num_seqs, seen[1].max_model_len) == (2, 8, 4096)


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=0, max_tokens=5),
    SamplingParams(temperature=1.0, top_p=0.9, max_tokens=7, seed=11),
    SamplingParams(temperature=0.6, max_tokens=3, stop=("</code>",), stop_token_ids=(2, 7)),
    SamplingParams(max_tokens=4, stop_token_ids=()),
])
def test_sampling_params_are_vllms(recorded, model_dir, params):
    import vllm

    from rstar2.engines.vllm import VLLMEngine

    engine = VLLMEngine(model_dir)
    sampling = engine.sampling_params(params)
    asyncio.run(engine.close())
    assert isinstance(sampling, vllm.SamplingParams)
    assert (sampling.temperature, sampling.top_p, sampling.max_tokens, sampling.seed) == (
        params.temperature, params.top_p, params.max_tokens, params.seed)
    assert sampling.logprobs == 0 and sampling.stop == list(params.stop)
    assert sampling.ignore_eos == (params.stop_token_ids is not None)
    assert sampling.stop_token_ids == list(params.stop_token_ids or ())
    assert sampling.detokenize == bool(params.stop)  # vLLM matches stop strings on text


@pytest.mark.parametrize("flat", [False, True])
def test_outputs_and_prompts_are_read_as_vllm_builds_them(recorded, model_dir, flat):
    """Every finish reason vLLM has is kept; log-probs are read from both of vLLM's layouts;
    the prompt goes in as vLLM's ``TokensPrompt``."""
    from vllm.v1.engine import FINISH_REASON_STRINGS

    from rstar2.engines.vllm import FINISH_REASONS, VLLMEngine

    _, recorder = recorded
    assert set(FINISH_REASONS) == set(FINISH_REASON_STRINGS)
    engine = VLLMEngine(model_dir)
    for reason in FINISH_REASON_STRINGS:
        recorder.answers["generate"] = lambda prompt, *a, **k: finished_output(
            prompt["prompt_token_ids"], reason, flat)
        [out] = asyncio.run(engine.generate([[4, 4]], SamplingParams()))
        assert (out.token_ids, out.logprobs, out.finish_reason) == ([5, 9], [-0.5, -1.25], reason)
    asyncio.run(engine.close())
    prompt = recorder.calls[0][1][0]
    assert prompt == {"prompt_token_ids": [4, 4]}


# ---------------------------------------------------------------- vLLM's wire
def round_trip(message):
    """``message`` encoded by vLLM's ``MsgpackEncoder`` and decoded by its ``MsgpackDecoder``,
    the way a utility call reaches the engine core."""
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    return MsgpackDecoder().decode(MsgpackEncoder().encode(message))


def plain(value):
    """``value`` with tuples as lists, as msgpack hands them back."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def load_weights(worker, weights):  # the function the old weight path sent to the workers
    worker.model_runner.model.load_weights(weights=weights)


def test_the_old_collective_rpc_weight_path_fails_on_vllms_wire(monkeypatch):
    """Sending a function with tensors through ``collective_rpc`` (rstar2's weight path before
    the worker extension) is refused by vLLM's encoder; allowed by the insecure setting, the
    tensors arrive as lists, not tensors."""
    weights = [("w", torch.ones(2, 2))]
    old_call = (0, 1, "collective_rpc", (load_weights, None, (weights,), {}))
    with pytest.raises(TypeError, match="is not serializable"):
        round_trip(old_call)
    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    [_, _, _, [_, _, [arrived], _]] = round_trip(old_call)
    assert not isinstance(arrived[0][1], torch.Tensor) and arrived[0][1][:2] == ["float32", [2, 2]]


def test_every_rpc_survives_vllms_wire(recorded, model_dir):
    """What rstar2 sends through ``collective_rpc`` and vLLM's weight-transfer requests arrives
    unchanged (as lists), and the worker extension reads the tensors back from it."""
    from vllm.distributed.weight_transfer.nccl_common import NCCLWeightTransferInitInfo
    from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferUpdateInfo

    from rstar2.engines.vllm import VLLMEngine
    from rstar2.engines.vllm_worker import read_rows

    _, recorder = recorded
    engine = VLLMEngine(model_dir)
    state = {"a": torch.arange(6, dtype=torch.bfloat16).view(2, 3), "b": torch.ones(5)}
    loaded = {}

    def worker(method, args=(), **kwargs):  # what a worker gets, read as the extension reads it
        [_, _, _, [method, _, args, _]] = round_trip((0, 1, "collective_rpc", (method, None, args, None)))
        assert method == "rstar2_load_shared"
        loaded.update((name, t.clone()) for name, t in read_rows(*args))  # before the next bucket

    recorder.answers["collective_rpc"] = worker
    asyncio.run(engine.update_weights(state, version=1))
    assert {k: v.tolist() for k, v in loaded.items()} == {k: v.tolist() for k, v in state.items()}
    assert all(loaded[k].dtype == v.dtype for k, v in state.items())
    recorder.answers["collective_rpc"] = [1]
    drive(engine)
    for name, args, kwargs in recorder.calls:
        if name in ("init_weight_transfer_engine", "update_weights"):
            payload = {"init_info": args[0].init_info} if name.startswith("init") else {
                "update_info": args[0].update_info}
            [_, _, _, [method, _, _, kwargs_back]] = round_trip(
                (0, 1, "collective_rpc", (name, None, (), payload)))
            assert method == name and kwargs_back == plain(payload)
    info = NCCLWeightTransferInitInfo(**round_trip({"master_address": "h", "master_port": 1,
                                                    "rank_offset": 1, "world_size": 3}))
    assert info.world_size == 3
    NCCLWeightTransferUpdateInfo(**round_trip({"names": ["w"], "dtype_names": ["float32"],
                                               "shapes": [[2, 2]]}))


# ---------------------------------------------------------------- the weight transfer
def test_the_trainer_side_is_vllms():
    """The learner's client hands every member's workers their own ranks in one group
    (vLLM's ``_worker_group_rank`` adds each worker's rank within its engine), built from the
    payload vLLM's trainer builds; the trainer init info and sources are vLLM's classes."""
    from vllm.config import ParallelConfig
    from vllm.distributed.weight_transfer import ModuleSource
    from vllm.distributed.weight_transfer.base import TrainerWeightTransferEngine, WeightSource
    from vllm.distributed.weight_transfer.nccl_common import (
        NCCLWeightTransferInitInfo,
        _worker_group_rank,
        build_worker_init_payload,
    )
    from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

    from rstar2.fleet.vllm_transfer import FanOutClient, state_dict_source

    class Member:
        def __init__(self):
            self.payloads = []

        def init_weight_transfer_engine(self, init_info):
            self.payloads.append(init_info)

    members = [Member(), Member(), Member()]
    workers = [2, 1, 4]
    trainer = NCCLTrainerInitInfo(master_address="10.0.0.1", master_port=2900,
                                  world_size=1 + sum(workers), rank=0)
    FanOutClient(members, workers).init_weight_transfer_engine(build_worker_init_payload(trainer))
    ranks = []
    for member, count in zip(members, workers):
        [payload] = member.payloads
        info = NCCLWeightTransferInitInfo(**round_trip(payload))
        ranks += [_worker_group_rank(info.rank_offset, ParallelConfig(
            tensor_parallel_size=count, rank=r)) for r in range(count)]
    assert ranks == list(range(1, 1 + sum(workers)))
    state = {"w": torch.ones(2, 3), "b": torch.zeros(3, dtype=torch.bfloat16)}
    source = state_dict_source(state)
    assert isinstance(source, WeightSource) and source.implements_iter_full()
    assert [(m.name, m.dtype, m.shape) for m in source.metadata] == [
        ("w", torch.float32, (2, 3)), ("b", torch.bfloat16, (3,))]
    source.tensors = {k: v + 1 for k, v in state.items()}  # the next round's dict
    assert [t.sum().item() for _, t in source.iter_full()] == [12.0, 3.0]
    assert ModuleSource(torch.nn.Linear(2, 2)).implements_iter_full()
    for attr in ("send_weights", "shutdown"):
        assert callable(getattr(TrainerWeightTransferEngine, attr))
    assert "source" in inspect.signature(TrainerWeightTransferEngine.__init__).parameters


def test_the_worker_extension_fits_vllms_worker():
    """vLLM resolves the extension by name and refuses one whose attributes clash with the
    worker's; the extension uses the worker's ``get_model`` and the model's ``load_weights``."""
    from vllm.model_executor.models.interfaces import SupportsQuant  # noqa: F401 - vLLM's model API
    from vllm.utils.import_utils import resolve_obj_by_qualname
    from vllm.v1.worker.gpu_worker import Worker

    from rstar2.engines.vllm_worker import EXTENSION, WeightLoader

    assert resolve_obj_by_qualname(EXTENSION) is WeightLoader
    own = [a for a in dir(WeightLoader) if not a.startswith("__")]
    assert own == ["rstar2_load_shared"] and not [a for a in own if hasattr(Worker, a)]
    assert inspect.signature(Worker.get_model).parameters.keys() == {"self"}
    from vllm.model_executor.models.llama import LlamaForCausalLM

    assert "weights" in inspect.signature(LlamaForCausalLM.load_weights).parameters


def test_metrics_are_read_with_vllms_reader():
    """What ``VLLMEngine.load`` reads: vLLM's snapshot records of its registry (counters
    without ``_total``, a histogram's sum and count), summed per engine label."""
    from prometheus_client import REGISTRY
    from vllm.v1.metrics.reader import Counter, Gauge, Histogram, get_metrics_snapshot

    from rstar2.engines.vllm import metric_samples
    from rstar2.engines.vllm_metrics import load_from_samples
    from tests.fakes.vllm_cpu.metrics import StandInCollector, register_metrics

    llm = SimpleNamespace(engine=SimpleNamespace(load=lambda: SimpleNamespace(
        kv_capacity_tokens=320, kv_used_tokens=32, running=2, waiting=1, preemptions=0,
        generation_tokens=90, inter_tokens=88, inter_token_seconds=4.4)),
        core=SimpleNamespace(preempted=4))
    register_metrics(llm)
    try:
        snapshot = get_metrics_snapshot()
        assert {type(m) for m in snapshot} == {Gauge, Counter, Histogram}
        load = load_from_samples(metric_samples(snapshot))
        assert (load.kv_capacity_tokens, load.kv_used_tokens, load.running, load.waiting,
                load.preemptions) == (320, 32, 2, 1, 4)
        assert (load.generation_tokens, load.inter_tokens, load.inter_token_seconds) == \
            (90, 88, 4.4)
    finally:
        for collector in list(REGISTRY._collector_to_names):
            if isinstance(collector, StandInCollector):
                REGISTRY.unregister(collector)


def test_vllm_serve_routes_are_vllms():
    """Every route the member calls is in vLLM's RL router, with the query and body fields
    the member sends; the client a learner rank drives posts to routes that exist too."""
    from vllm.distributed.weight_transfer import HTTPVLLMWeightSyncClient
    from vllm.entrypoints.rl.online.api_router import router

    from rstar2.fleet.vllm_server import VLLMServerMember

    routes = {route.path: route for route in router.routes}
    sent = {  # route -> (method, query fields, body fields) as VLLMServerMember sends them
        "/pause": ("POST", {"mode", "clear_cache"}, set()),
        "/resume": ("POST", set(), set()),
        "/update_weight_version": ("POST", set(), {"new_version"}),
        "/shutdown_weight_transfer_engine": ("POST", set(), set()),
        "/weight_checker": ("POST", set(), {"action"}),
        "/get_world_size": ("GET", {"include_dp"}, set()),
    }
    source = inspect.getsource(VLLMServerMember)
    assert set(re.findall(r'"(/[a-z_]+)"', source)) == set(sent)
    for path, (method, query, body) in sent.items():
        route = routes[path]
        assert method in route.methods
        assert query <= {p.name for p in route.dependant.query_params}
        assert body <= {p.name for p in route.dependant.body_params}
    client = inspect.getsource(HTTPVLLMWeightSyncClient)
    for path in re.findall(r'_post\(\s*"([a-z_]+)"', client):
        assert f"/{path}" in routes


# ---------------------------------------------------------------- the stand-in
def same_parameters(mine, real) -> bool:
    return [(p.name, p.kind, p.default) for p in inspect.signature(mine).parameters.values()] == \
        [(p.name, p.kind, p.default) for p in inspect.signature(real).parameters.values()]


def test_the_stand_in_keeps_vllms_signatures():
    """The CPU stand-in's overrides take exactly vLLM's parameters, so a call real vLLM would
    reject fails on the stand-in too."""
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.engine.core import EngineCore, EngineCoreProc
    from vllm.v1.engine.core_client import AsyncMPClient
    from vllm.v1.worker.gpu_worker import Worker

    from tests.fakes.vllm_cpu.engine import FakeAsyncLLM, FakeCoreClient, FakeEngineCore
    from tests.fakes.vllm_cpu.worker import FakeWorker

    assert same_parameters(FakeAsyncLLM.generate, AsyncLLM.generate)
    assert [p for p in inspect.signature(FakeAsyncLLM.from_engine_args).parameters] == \
        [p for p in inspect.signature(AsyncLLM.from_engine_args).parameters]
    assert same_parameters(FakeCoreClient._call_utility_async, AsyncMPClient._call_utility_async)
    for name in ("collective_rpc", "reset_prefix_cache", "set_weight_version",
                 "get_weight_version", "resume_scheduler", "is_scheduler_paused"):
        assert same_parameters(getattr(FakeEngineCore, name), getattr(EngineCore, name)), name
    assert same_parameters(FakeEngineCore.pause_generation, EngineCoreProc.pause_generation)
    for name in ("init_weight_transfer_engine", "shutdown_weight_transfer_engine",
                 "start_weight_update", "update_weights", "finish_weight_update",
                 "compute_weight_checksums", "get_model"):
        assert same_parameters(getattr(FakeWorker, name), getattr(Worker, name)), name
    overridden = {name for name in vars(FakeAsyncLLM) if not name.startswith("_")}
    assert overridden == {"generate", "from_engine_args"}  # the rest is vLLM's own code
