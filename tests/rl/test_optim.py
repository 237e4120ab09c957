"""AdamW with linear warm-up then constant lr; the resumable prompt order."""

import pytest
import torch

from rstar2.rl.config import OptimizerConfig
from rstar2.rl.optim import build_optimizer, build_scheduler
from rstar2.rl.prompt_order import PromptOrder


def learning_rates(config, updates):
    model = torch.nn.Linear(2, 1)
    optimizer = build_optimizer(model.parameters(), config)
    scheduler = build_scheduler(optimizer, config)
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


def test_optimizer_takes_config_and_only_trainable_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    model[0].requires_grad_(False)
    config = OptimizerConfig(lr=3e-4, betas=(0.8, 0.9), eps=1e-7, weight_decay=0.1)
    optimizer = build_optimizer(model.parameters(), config)
    group = optimizer.param_groups[0]
    assert isinstance(optimizer, torch.optim.AdamW)
    assert [p.shape for p in group["params"]] == [p.shape for p in model[1].parameters()]
    assert (group["betas"], group["eps"], group["weight_decay"]) == ((0.8, 0.9), 1e-7, 0.1)


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
