"""AdamW with linear warm-up then a constant lr or a cosine decay, resumed where it stopped;
the resumable prompt order."""

import copy
import math
from pathlib import Path

import pytest
import torch

from rstar2.rl.prompt_order import PromptOrder
from rstar2.run.recipe import load_config
from rstar2.run.settings import learner_settings
from rstar2.sft.config import SFTSettings
from rstar2.sft.train import sft_optimizer
from rstar2.training.checkpoint import load_checkpoint, save_checkpoint
from rstar2.training.config import OptimizerConfig
from rstar2.training.optim import build_optimizer, build_scheduler, fusable

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def learning_rates(config, updates, total_updates=None):
    model = torch.nn.Linear(2, 1)
    optimizer = build_optimizer(model.parameters(), config)
    return rates_of(optimizer, build_scheduler(optimizer, config, total_updates), updates)


def rates_of(optimizer, scheduler, updates):
    """The learning rate of each of the next ``updates`` updates."""
    rates = []
    for _ in range(updates):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def test_linear_warmup_then_constant():
    rates = learning_rates(OptimizerConfig(lr=1.0, warmup_steps=4), 7)
    assert rates == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0])


def test_no_warmup_is_constant():
    assert learning_rates(OptimizerConfig(lr=1e-6, warmup_steps=0), 3) == pytest.approx([1e-6] * 3)


def test_constant_is_the_default_and_ignores_the_run_length():
    config = OptimizerConfig(lr=1.0, warmup_steps=2)
    assert config.schedule == "constant"
    assert learning_rates(config, 5, total_updates=3) == learning_rates(config, 5) == pytest.approx(
        [0.5, 1.0, 1.0, 1.0, 1.0])


def test_cosine_decays_from_the_end_of_warmup_to_the_floor_at_the_last_update():
    config = OptimizerConfig(lr=2.0, warmup_steps=4, schedule="cosine", min_lr_ratio=0.1)
    rates = learning_rates(config, 14, total_updates=12)  # updates 0-11, then two beyond
    assert rates[:4] == pytest.approx([0.5, 1.0, 1.5, 2.0])  # warm-up, its last at the full rate
    assert rates[7] == pytest.approx(2.0 * (0.1 + 0.9 * 0.5))  # half-way from update 3 to 11
    assert rates[5] == pytest.approx(2.0 * (0.1 + 0.9 * (1 + math.cos(math.pi / 4)) / 2))
    assert rates[11] == pytest.approx(0.2)  # the last update: lr x min_lr_ratio
    assert rates[12:] == pytest.approx([0.2, 0.2])  # a longer run stays at the floor
    assert all(a > b for a, b in zip(rates[3:11], rates[4:12]))


def test_cosine_without_warmup_starts_at_lr_and_decays_to_zero_by_default():
    rates = learning_rates(OptimizerConfig(lr=1.0, warmup_steps=0, schedule="cosine"), 5, total_updates=5)
    assert rates == pytest.approx([1.0, (1 + math.cos(math.pi / 4)) / 2, 0.5,
                                   (1 + math.cos(3 * math.pi / 4)) / 2, 0.0])


def test_cosine_needs_the_run_length():
    with pytest.raises(ValueError, match="total number of optimizer updates"):
        learning_rates(OptimizerConfig(schedule="cosine"), 1)


def test_a_resumed_schedule_continues_the_curve(tmp_path):
    """Checkpointed after 5 updates (the trainer's files), restored into a new optimizer and
    schedule built from the same settings: the next rates are the uninterrupted run's."""
    config = OptimizerConfig(lr=1.0, warmup_steps=3, schedule="cosine", min_lr_ratio=0.2)
    uninterrupted = learning_rates(config, 10, total_updates=10)

    model = torch.nn.Linear(2, 1)
    optimizer = build_optimizer(model.parameters(), config)
    scheduler = build_scheduler(optimizer, config, 10)
    first = rates_of(optimizer, scheduler, 5)
    save_checkpoint(tmp_path, 5, model, optimizer, scheduler, {})

    model = torch.nn.Linear(2, 1)
    optimizer = build_optimizer(model.parameters(), config)
    scheduler = build_scheduler(optimizer, config, 10)
    load_checkpoint(tmp_path / "step_00000005", model, optimizer, scheduler)
    assert first + rates_of(optimizer, scheduler, 5) == pytest.approx(uninterrupted)


def test_a_run_ends_its_cosine_at_its_last_planned_update():
    config = load_config(RECIPES / "cpu-demo.yaml", ["rl.steps=7", "rl.updates_per_step=4",
                                                     "rl.optimizer.schedule=cosine"])
    settings = learner_settings(config)
    assert settings.total_updates == 28 and settings.optimizer.schedule == "cosine"


def test_sft_takes_the_same_schedules():
    settings = SFTSettings(lr=1.0, warmup_steps=0, schedule="cosine", min_lr_ratio=0.5)
    optimizer, scheduler = sft_optimizer(torch.nn.Linear(2, 1), settings, total_steps=3)
    assert rates_of(optimizer, scheduler, 3) == pytest.approx([1.0, 0.75, 0.5])
    optimizer, scheduler = sft_optimizer(torch.nn.Linear(2, 1), SFTSettings(lr=1.0, warmup_steps=2))
    assert rates_of(optimizer, scheduler, 3) == pytest.approx([0.5, 1.0, 1.0])


def test_optimizer_takes_config_and_only_trainable_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    model[0].requires_grad_(False)
    config = OptimizerConfig(lr=3e-4, betas=(0.8, 0.9), eps=1e-7, weight_decay=0.1)
    optimizer = build_optimizer(model.parameters(), config)
    group = optimizer.param_groups[0]
    assert isinstance(optimizer, torch.optim.AdamW)
    assert [p.shape for p in group["params"]] == [p.shape for p in model[1].parameters()]
    assert (group["betas"], group["eps"], group["weight_decay"]) == ((0.8, 0.9), 1e-7, 0.1)


def test_plain_parameters_take_the_fused_kernel_with_the_default_result():
    """The fused AdamW steps a CPU model as PyTorch's default loop does (the same update to
    float32 rounding), weight decay, bias correction and the warm-up included."""
    config = OptimizerConfig(lr=1e-2, warmup_steps=2, weight_decay=0.1)
    torch.manual_seed(0)
    fused_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    plain_model, start = copy.deepcopy(fused_model), copy.deepcopy(fused_model)
    fused = build_optimizer(fused_model.parameters(), config)
    plain = torch.optim.AdamW(plain_model.parameters(), lr=config.lr, betas=config.betas, eps=config.eps,
                              weight_decay=config.weight_decay)
    assert fused.param_groups[0]["fused"] and not plain.param_groups[0]["fused"]
    schedules = build_scheduler(fused, config), build_scheduler(plain, config)
    inputs = torch.randn(32, 8)
    for _ in range(4):
        for model, optimizer, scheduler in zip((fused_model, plain_model), (fused, plain), schedules):
            optimizer.zero_grad()
            model(inputs).pow(2).mean().backward()
            optimizer.step()
            scheduler.step()
    for a, b in zip(fused_model.parameters(), plain_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(fused_model[0].weight, start[0].weight, atol=1e-3)  # they moved


def test_parameters_the_fused_kernel_cannot_take_keep_the_default():
    """A parameter on a device without the fused kernel (here 'meta', as a sharded or offloaded
    policy's may be) keeps PyTorch's default implementation, and no parameter at all is an error
    AdamW itself reports."""
    on_meta = torch.nn.Linear(2, 1, device="meta")
    assert not fusable(list(on_meta.parameters()))
    assert not build_optimizer(on_meta.parameters(), OptimizerConfig()).param_groups[0]["fused"]
    assert fusable(list(torch.nn.Linear(2, 1).parameters()))
    with pytest.raises(ValueError, match="empty parameter list"):
        build_optimizer(on_meta.requires_grad_(False).parameters(), OptimizerConfig())


def test_every_prompt_once_per_epoch_and_batches_cross_epochs():
    order = PromptOrder(10, seed=1)
    first = order.next_batch(4) + order.next_batch(4)
    crossing = order.next_batch(4)  # 2 from epoch 0, 2 from epoch 1
    assert sorted(first + crossing[:2]) == list(range(10))
    assert order.position() == {"epoch": 1, "offset": 2}
    assert crossing[2:] == PromptOrder(10, seed=1, epoch=1).next_batch(2)
    assert order.permutation(0).tolist() != order.permutation(1).tolist()


def test_position_resumes_the_same_batches():
    order = PromptOrder(7, seed=3)
    order.next_batch(5)
    resumed = PromptOrder(7, seed=3, **order.position())
    assert [order.next_batch(5) for _ in range(3)] == [resumed.next_batch(5) for _ in range(3)]


def test_batches_larger_than_the_data_wrap_around():
    batch = PromptOrder(3, seed=0).next_batch(7)
    assert len(batch) == 7 and sorted(batch[:3]) == sorted(batch[3:6]) == [0, 1, 2]


def test_bad_positions_are_rejected():
    with pytest.raises(ValueError, match="offset"):
        PromptOrder(3, seed=0, offset=3)
    with pytest.raises(ValueError, match="no training prompts"):
        PromptOrder(0, seed=0)
