"""Helpers of the tests that run ``rstar2 train recipes/cpu-cluster.yaml`` as a user does (a
subprocess), kill it and resume it: the command line, the run's logs, and ``held_reward``.

``held_reward`` is a run's own reward (``rl.reward``) that lets a test kill the run at a known
point instead of racing it: it scores 0, but once the checkpoint directory named by
``$RSTAR2_TEST_HOLD_AFTER`` exists it touches ``$RSTAR2_TEST_HELD`` and never returns. The
trainer grades a step's rollouts before it writes that step's checkpoint, so a run holding
after checkpoint *k* is stuck inside step *k+1*, having logged and saved steps 1..k, however fast
or slow the machine is. The reward workers are the run's own processes, killed with its group.
This module imports only the standard library: the run's reward workers import it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "cpu-cluster.yaml"
HOLD_AFTER = "RSTAR2_TEST_HOLD_AFTER"
HELD = "RSTAR2_TEST_HELD"


def held_reward(response: str, gold: str, row: dict) -> float:
    """See the module docstring."""
    after = os.environ.get(HOLD_AFTER)
    if after and Path(after).is_dir():
        Path(os.environ[HELD]).touch()
        while True:  # until the test kills the run (rl.reward_deadline_s is set long enough)
            time.sleep(1)
    return 0.0


def train_command(name: str, settings: list[str], *extra: str) -> list[str]:
    """``rstar2 train recipes/cpu-cluster.yaml --name NAME --set S ...`` and ``extra``."""
    return [sys.executable, "-m", "rstar2", "train", str(RECIPE), "--name", name,
            *[arg for s in settings for arg in ("--set", s)], *extra]


def run_env(ray_address: str | None = None, **extra: str) -> dict[str, str]:
    """The runs' environment: one thread per process (the cores are shared), this checkout
    importable (``held_reward``), and ``RAY_ADDRESS`` to join a cluster or none to start one."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), **extra}
    env.pop("RAY_ADDRESS", None)
    if ray_address is not None:
        env["RAY_ADDRESS"] = ray_address
    return env


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the run's whole process group (started with ``start_new_session``), as a
    preempted node would: the driver, its reward workers and, for a run that started its own
    Ray cluster, that cluster."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:  # the group is gone already: the run ended by itself
        pass
    process.wait()


def step_problems(run: Path, step: int) -> list[str]:
    """The problem ids of the rollouts logged for ``step``."""
    rows = [json.loads(line) for line in (run / "rollouts" / f"step_{step}.jsonl").open()]
    return sorted({row["problem_id"] for row in rows})
