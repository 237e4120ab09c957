"""Checkpoints: exact resume (written in place or in the background), LoRA and tied weights,
atomicity under kill -9, retention."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from rstar2.rl.prompt_order import PromptOrder
from rstar2.training.checkpoint import (
    CheckpointError,
    CheckpointWriter,
    latest_checkpoint,
    load_checkpoint,
    resolve_checkpoint,
    save_checkpoint,
)
from rstar2.training.config import CheckpointConfig, OptimizerConfig
from rstar2.training.optim import build_optimizer, build_scheduler
from tests.training.checkpoint_writer import expected_step, make_model, make_training

REPO = Path(__file__).resolve().parents[2]
DATA = torch.linspace(-1, 1, 20 * 8).reshape(20, 8)


class Tiny(torch.nn.Module):
    """A small real network with dropout, so training draws from torch's RNG."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.Dropout(0.3), torch.nn.Tanh(), torch.nn.Linear(16, 1)
        )

    def forward(self, x):
        return self.net(x)


class Run:
    """A miniature training run that consumes every kind of state a checkpoint must restore."""

    def __init__(self, init_seed: int):
        torch.manual_seed(init_seed)
        self.model = Tiny()
        config = OptimizerConfig(lr=1e-2, warmup_steps=3)
        self.optimizer = build_optimizer(self.model.parameters(), config)
        self.scheduler = build_scheduler(self.optimizer, config)
        self.order = PromptOrder(len(DATA), seed=5)

    def step(self) -> None:
        batch = DATA[self.order.next_batch(6)]
        noise = torch.randn(6, 1) + float(np.random.rand()) + random.random()  # all three RNGs
        loss = ((self.model(batch) - noise) ** 2).mean()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad()

    def save(self, root, step):
        return save_checkpoint(root, step, self.model, self.optimizer, self.scheduler, self.order.position())

    def load(self, path):
        state = load_checkpoint(path, self.model, self.optimizer, self.scheduler)
        self.order = PromptOrder(len(DATA), seed=5, **state.data_position)
        return state


def scramble_rngs():
    torch.manual_seed(999)
    np.random.seed(999)
    random.seed(999)


def assert_same_optimizer_state(a: torch.optim.Optimizer, b: torch.optim.Optimizer):
    state_a, state_b = a.state_dict(), b.state_dict()
    assert state_a["param_groups"] == state_b["param_groups"]
    assert state_a["state"].keys() == state_b["state"].keys()
    for key in state_a["state"]:
        for name, value in state_a["state"][key].items():
            assert torch.equal(value, state_b["state"][key][name]), name


@pytest.mark.parametrize("background", [False, True], ids=["in-place", "background"])
def test_resume_equals_an_uninterrupted_run(tmp_path, background):
    """In the background case the run goes on training (changing the very tensors the
    checkpoint is of) before the write is waited for: the checkpoint must hold step 2."""
    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    straight = Run(init_seed=1)
    for _ in range(5):
        straight.step()
    straight_next = (straight.order.next_batch(6), torch.rand(3), np.random.rand(), random.random())

    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    first = Run(init_seed=1)
    for _ in range(2):
        first.step()
    writer = CheckpointWriter(tmp_path) if background else None
    if writer is None:
        path = first.save(tmp_path, step=2)
    else:
        path = writer.submit(2, first.model, first.optimizer, first.scheduler, first.order.position())
    for _ in range(2):
        first.step()  # what a killed run did after its checkpoint is lost
    if writer is not None:
        writer.wait()

    scramble_rngs()
    resumed = Run(init_seed=2)  # a new process: other initial weights, fresh optimizer
    assert resumed.load(latest_checkpoint(tmp_path)).step == 2 and latest_checkpoint(tmp_path) == path
    for _ in range(3):
        resumed.step()
    resumed_next = (resumed.order.next_batch(6), torch.rand(3), np.random.rand(), random.random())

    for a, b in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert_same_optimizer_state(straight.optimizer, resumed.optimizer)
    assert straight.scheduler.get_last_lr() == resumed.scheduler.get_last_lr()
    assert straight_next[0] == resumed_next[0]
    assert torch.equal(straight_next[1], resumed_next[1])
    assert straight_next[2:] == resumed_next[2:]


def test_loading_without_optimizer_keeps_weights_and_starts_afresh(tmp_path):
    run = Run(init_seed=1)
    run.step()
    path = run.save(tmp_path, step=1)
    fresh = Run(init_seed=2)
    load_checkpoint(path, fresh.model)  # stage 3: reset optimizer
    assert all(torch.equal(a, b) for a, b in zip(run.model.parameters(), fresh.model.parameters()))
    assert fresh.optimizer.state_dict()["state"] == {}


def tiny_llama(tie: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=tie)
    return LlamaForCausalLM(config)


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")  # peft's, not ours
def test_lora_checkpoints_hold_only_the_adapter(tmp_path):
    from peft import LoraConfig, get_peft_model

    def lora_model(seed):
        torch.manual_seed(0)
        base = tiny_llama(tie=False)
        torch.manual_seed(seed)
        lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        return get_peft_model(base, lora)

    trained = lora_model(seed=1)
    optimizer, scheduler = make_training(trained)
    path = save_checkpoint(tmp_path, 1, trained, optimizer, scheduler, {})
    saved = torch.load(path / "model.pt", weights_only=True)
    assert saved and all("lora_" in name for name in saved)
    assert len(saved) == 2 * 2 * 2  # A and B, for q and v, in 2 layers

    other = lora_model(seed=2)
    before = {n: p.clone() for n, p in other.named_parameters()}
    load_checkpoint(path, other)
    for name, p in other.named_parameters():
        reference = dict(trained.named_parameters())[name]
        assert torch.equal(p, reference)
        if "lora_" in name:
            assert not torch.equal(p, before[name])  # the adapter really came from the checkpoint

    with pytest.raises(CheckpointError, match="does not fit this model"):
        load_checkpoint(path, tiny_llama(tie=False))


def test_tied_weights_are_saved_once_and_stay_tied(tmp_path):
    torch.manual_seed(1)
    model = tiny_llama(tie=True)
    optimizer, scheduler = make_training(model)
    path = save_checkpoint(tmp_path, 1, model, optimizer, scheduler, {})
    assert "lm_head.weight" not in torch.load(path / "model.pt", weights_only=True)
    torch.manual_seed(2)
    other = tiny_llama(tie=True)
    load_checkpoint(path, other)
    assert torch.equal(other.lm_head.weight, model.model.embed_tokens.weight)
    assert other.lm_head.weight.data_ptr() == other.model.embed_tokens.weight.data_ptr()


def start_writer(root: Path, mode: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.training.checkpoint_writer", str(root), mode],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )


def load_for_check(path: Path) -> int:
    model = make_model()
    optimizer, scheduler = make_training(model)
    return expected_step(model, optimizer, load_checkpoint(path, model, optimizer, scheduler))


def test_kill_9_in_the_middle_of_a_write_leaves_the_previous_checkpoint(tmp_path):
    with start_writer(tmp_path, "pause") as writer:
        try:
            assert writer.stdout.readline().strip() == "1"
            assert writer.stdout.readline().strip() == "mid-write"
        finally:
            os.kill(writer.pid, signal.SIGKILL)
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    assert len(leftovers) == 1 and (leftovers[0] / "model.pt").is_file()  # really killed mid-write
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("step_")] == ["step_00000001"]
    assert load_for_check(latest_checkpoint(tmp_path)) == 1

    model = make_model()
    optimizer, scheduler = make_training(model)
    load_checkpoint(latest_checkpoint(tmp_path), model, optimizer, scheduler)
    save_checkpoint(tmp_path, 2, model, optimizer, scheduler, {"step": 2})
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]  # cleaned up


@pytest.mark.parametrize("delay_s", [0.02, 0.1])
def test_kill_9_at_any_moment_leaves_a_consistent_latest_checkpoint(tmp_path, delay_s):
    with start_writer(tmp_path, "loop") as writer:
        try:
            for step in ("1", "2", "3"):  # saving in a steady loop by now (and pruning: keep_last 3)
                assert writer.stdout.readline().strip() == step
            time.sleep(delay_s)
        finally:
            os.kill(writer.pid, signal.SIGKILL)
        written = [int(line) for line in writer.stdout.read().split()]
    latest = latest_checkpoint(tmp_path)
    step = load_for_check(latest)
    assert step >= max(written, default=3)  # nothing reported as saved was lost
    for path in tmp_path.iterdir():
        if path.name.startswith("step_"):
            assert load_for_check(path) <= step  # every complete checkpoint loads


def test_a_failed_background_write_is_raised_when_waited_for(tmp_path):
    run = Run(init_seed=1)
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the checkpoints should go")
    writer = CheckpointWriter(blocked)
    writer.submit(1, run.model, run.optimizer, run.scheduler, run.order.position())
    with pytest.raises(OSError):
        writer.wait()
    writer.wait()  # the error is raised once; nothing is left in flight


def test_retention_and_resolution(tmp_path):
    model = make_model()
    optimizer, scheduler = make_training(model)
    for step in (1, 2, 3, 4):
        save_checkpoint(tmp_path, step, model, optimizer, scheduler, {"step": step}, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000003", "step_00000004"]
    assert resolve_checkpoint(tmp_path) == tmp_path / "step_00000004"
    assert resolve_checkpoint(tmp_path / "step_00000003") == tmp_path / "step_00000003"
    # resuming from step 3 and saving it again abandons step 4's future
    save_checkpoint(tmp_path, 3, model, optimizer, scheduler, {"step": 3}, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000003"]
    assert latest_checkpoint(tmp_path) == tmp_path / "step_00000003"


def test_missing_checkpoints_are_clear_errors(tmp_path):
    assert latest_checkpoint(tmp_path / "absent") is None
    with pytest.raises(CheckpointError, match="no checkpoint"):
        resolve_checkpoint(tmp_path)
    (tmp_path / "step_00000001").mkdir()  # a directory without state.json is never loaded
    assert latest_checkpoint(tmp_path) is None
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        load_checkpoint(tmp_path / "step_00000001", make_model())


def test_the_checkpoint_schedule_by_steps_by_minutes_or_both_saves_the_last_step_unless_told():
    by_steps = CheckpointConfig(every_steps=3)
    assert [s for s in range(1, 9) if by_steps.due(s, 8, since_last_s=0.0)] == [3, 6, 8]
    by_time = CheckpointConfig(every_steps=None, every_minutes=10)
    assert not by_time.due(1, 8, since_last_s=599.0)
    assert by_time.due(2, 8, since_last_s=600.0) and by_time.due(8, 8, since_last_s=0.0)
    both = CheckpointConfig(every_steps=4, every_minutes=0.5)
    assert both.due(4, 8, since_last_s=0.0) and both.due(1, 8, since_last_s=30.0)
    assert not both.due(3, 8, since_last_s=29.9)
    no_last = CheckpointConfig(every_steps=None, every_minutes=10, last=False)
    assert not no_last.due(8, 8, since_last_s=0.0) and no_last.due(8, 8, since_last_s=600.0)
    with pytest.raises(ValueError, match="every_steps, every_minutes or both"):
        CheckpointConfig(every_steps=None)
    with pytest.raises(ValueError, match="every_minutes"):
        CheckpointConfig(every_minutes=0)
