"""One device setting everywhere: the config fields, batches built on the model's device, and
checkpoints that load on another device than the one that wrote them.

Without a GPU the device logic is checked on torch's 'meta' device (parameters without data):
a batch for a meta model must be built on 'meta', which a batch built on the CPU is not.
"""

import io

import pytest
import torch
import torch.serialization
from transformers import LlamaForCausalLM

from rstar2.rl.update import policy_update, recompute_logprobs
from rstar2.sft.config import SFTSettings
from rstar2.sft.train import sft_step
from rstar2.run.recipe import ConfigError, load_config
from rstar2.training import checkpoint
from rstar2.training.config import OptimizerConfig
from rstar2.training.optim import build_optimizer, build_scheduler
from tests.run.test_config import RECIPES
from tests.rl.test_update import SEQUENCES, SETTINGS, tiny_model


def test_model_and_engine_device_settings(tmp_path):
    recipe = RECIPES / "cpu-demo.yaml"
    config = load_config(recipe)
    assert config.model.device == "auto" and config.engine.device is None
    config = load_config(recipe, ["model.device=cuda:1", "engine.device=cpu"])
    assert config.model.device == "cuda:1" and config.engine.device == "cpu"
    with pytest.raises(ConfigError, match=r"model.device: device must be 'auto' .* or 'cuda:N' \(got 'gpu'\)"):
        load_config(recipe, ["model.device=gpu"])
    with pytest.raises(ConfigError, match="engine.device"):
        load_config(recipe, ["engine.device=tpu"])


def meta_model() -> LlamaForCausalLM:
    """The tiny test model with its parameters on the 'meta' device."""
    with torch.device("meta"):
        return tiny_model()


class ForwardSeen(Exception):
    """Raised by the probe once the model's forward has been called."""


def probe_inputs(model) -> dict[str, torch.device]:
    """Record the device of every tensor the model's forward gets, then stop the caller (a
    forward pass cannot compute on 'meta')."""
    seen: dict[str, torch.device] = {}

    def hook(_module, args, kwargs):
        seen.update({f"arg{i}": v.device for i, v in enumerate(args) if isinstance(v, torch.Tensor)})
        seen.update({k: v.device for k, v in kwargs.items() if isinstance(v, torch.Tensor)})
        raise ForwardSeen

    model.get_decoder().register_forward_pre_hook(hook, with_kwargs=True)  # every pass goes through it
    return seen


def rescore(model, optimizer, scheduler):
    recompute_logprobs(model, SEQUENCES, SETTINGS)


def update(model, optimizer, scheduler):
    policy_update(model, optimizer, scheduler, SEQUENCES, SETTINGS)


def sft(model, optimizer, scheduler):
    sft_step(model, optimizer, SEQUENCES, SFTSettings(compute_dtype="float32"))


@pytest.mark.parametrize("run", [rescore, update, sft])
def test_trainer_passes_feed_the_model_on_its_device(run):
    model = meta_model()
    seen = probe_inputs(model)
    optimizer = build_optimizer(model.parameters(), OptimizerConfig())
    with pytest.raises(ForwardSeen):
        run(model, optimizer, build_scheduler(optimizer, OptimizerConfig()))
    assert {"input_ids", "position_ids"} <= seen.keys()
    assert {d.type for d in seen.values()} == {"meta"}


class FakeCudaStorageLocations:
    """Makes ``torch.save`` record every CPU tensor as living on ``cuda:0``, as a checkpoint
    written by a GPU run does, through torch's own storage-location registry."""

    def __enter__(self):
        self.entry = (1, self.tag, lambda obj, location: None)
        torch.serialization._package_registry.insert(0, self.entry)
        return self

    @staticmethod
    def tag(storage):
        return "cuda:0" if storage.device.type == "cpu" else None

    def __exit__(self, *exc):
        torch.serialization._package_registry.remove(self.entry)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks loading on a machine without CUDA")
def test_a_checkpoint_written_on_a_gpu_resumes_on_the_cpu(tmp_path):
    model = tiny_model(seed=1)
    optimizer = build_optimizer(model.parameters(), OptimizerConfig(lr=1e-2, warmup_steps=1))
    scheduler = build_scheduler(optimizer, OptimizerConfig(lr=1e-2, warmup_steps=1))
    policy_update(model, optimizer, scheduler, SEQUENCES, SETTINGS)
    with FakeCudaStorageLocations():
        path = checkpoint.save_checkpoint(tmp_path, 1, model, optimizer, scheduler, {"at": 3})
        rng = torch.load(path / "rng.pt", map_location="cpu", weights_only=True)
        rng["cuda"] = [torch.zeros(16, dtype=torch.uint8)]  # a GPU run also saves CUDA RNG states
        checkpoint.write_durably(path / "rng.pt", rng)
    with pytest.raises(RuntimeError, match="CUDA"):  # the files really name a CUDA device
        torch.load(io.BytesIO((path / "model.pt").read_bytes()), weights_only=True)

    resumed = tiny_model(seed=2)
    resumed_optimizer = build_optimizer(resumed.parameters(), OptimizerConfig(lr=1e-2, warmup_steps=1))
    resumed_scheduler = build_scheduler(resumed_optimizer, OptimizerConfig(lr=1e-2, warmup_steps=1))
    state = checkpoint.load_checkpoint(path, resumed, resumed_optimizer, resumed_scheduler)
    assert state.step == 1 and state.data_position == {"at": 3}
    for a, b in zip(model.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b) and b.device.type == "cpu"
    moments = [s["exp_avg"] for s in resumed_optimizer.state.values()]
    assert moments and all(m.device.type == "cpu" for m in moments)
    assert resumed_scheduler.get_last_lr() == scheduler.get_last_lr()


@pytest.mark.gpu
def test_a_checkpoint_moves_between_cpu_and_gpu(tmp_path):
    """Saved by a CPU run, resumed on the GPU, saved there and resumed on the CPU again."""
    config = OptimizerConfig(lr=1e-2, warmup_steps=1)
    runs = []
    for device in ("cpu", "cuda", "cpu"):
        model = tiny_model(seed=len(runs)).to(device)
        optimizer = build_optimizer(model.parameters(), config)
        scheduler = build_scheduler(optimizer, config)
        if runs:
            checkpoint.load_checkpoint(checkpoint.latest_checkpoint(tmp_path), model, optimizer, scheduler)
            for a, b in zip(runs[-1].parameters(), model.parameters(), strict=True):
                assert torch.equal(a.cpu(), b.cpu()) and b.device.type == device
        policy_update(model, optimizer, scheduler, SEQUENCES, SETTINGS)
        assert {s["exp_avg"].device.type for s in optimizer.state.values()} == {device}
        checkpoint.save_checkpoint(tmp_path, len(runs) + 1, model, optimizer, scheduler, {})
        runs.append(model)
