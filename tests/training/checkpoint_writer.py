"""A process that writes checkpoints until it is killed, for the kill -9 tests.

    python -m tests.training.checkpoint_writer ROOT pause   # saves step 1, then stops inside step 2's
                                                            # write (after model.pt) and prints mid-write
    python -m tests.training.checkpoint_writer ROOT loop    # saves steps 1, 2, 3, ... printing each

Every checkpoint of step s is self-consistent: all parameters equal s, the optimizer has taken
s steps, and the data position says s; ``expected_step`` checks a loaded one.
"""

from __future__ import annotations

import sys
import time

import torch

from rstar2.training import checkpoint
from rstar2.training.config import OptimizerConfig
from rstar2.training.optim import build_optimizer, build_scheduler


def make_model() -> torch.nn.Module:
    """About 1 M parameters (4 MB): each write takes a noticeable moment."""
    return torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.Linear(1024, 512))


def make_training(model: torch.nn.Module):
    config = OptimizerConfig(lr=1e-3, warmup_steps=3)
    optimizer = build_optimizer(model.parameters(), config)
    return optimizer, build_scheduler(optimizer, config)


def advance(model, optimizer, scheduler, step: int) -> None:
    """One optimizer step, then every parameter set to ``step``."""
    sum(p.sum() for p in model.parameters()).backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float(step))


def expected_step(model, optimizer, state: checkpoint.TrainingState) -> int:
    """The step a loaded checkpoint claims, after checking every part agrees with it."""
    step = state.step
    assert state.data_position == {"step": step}
    assert all(torch.all(p == float(step)) for p in model.parameters())
    assert all(int(s["step"]) == step for s in optimizer.state.values())
    return step


def main(root: str, mode: str) -> None:
    model = make_model()
    optimizer, scheduler = make_training(model)

    def save(step: int) -> None:
        advance(model, optimizer, scheduler, step)
        checkpoint.save_checkpoint(root, step, model, optimizer, scheduler, {"step": step}, keep_last=3)
        print(step, flush=True)

    if mode == "pause":
        save(1)
        write = checkpoint.write_durably

        def write_then_stall(path, payload):
            write(path, payload)
            if path.name == "model.pt":
                print("mid-write", flush=True)
                time.sleep(600)

        checkpoint.write_durably = write_then_stall
        save(2)
    else:
        step = 1
        while True:
            save(step)
            step += 1


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
