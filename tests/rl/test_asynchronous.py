"""Asynchronous training's bookkeeping, with the timing of rollouts and updates drawn at random:
the staleness bound holds whatever order groups finish in, every batch is trained once and in
order, a kept rollout's tokens are counted at their own versions, k = 0 is the synchronous loop,
a resumed run trains the same batches as one that was never stopped, and an engine that cannot
take weights while it generates is refused."""

import asyncio
import random
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstar2.agent.trajectory import Trajectory, Turn
from rstar2.data.problems import Problem
from rstar2.reward import Score
from rstar2.rl.asynchronous import NotPausable, SampledAhead, token_staleness
from rstar2.rl.config import AsyncConfig, RLConfig
from rstar2.rl.roc import trajectory_facts
from rstar2.rl.rollout import Rollout
from rstar2.rl.sampler import SampledBatch
from rstar2.rl.trainer import Trainer, TrainerSettings
from rstar2.training.checkpoint import TrainingState
from rstar2.training.config import CheckpointConfig, LoggingConfig
from rstar2.training.runlog import read_metrics

GROUP = 2  # G; RoC samples 2G = 4


class Engine:
    """A pausable engine that only keeps the weight version."""

    def __init__(self):
        self.version = None
        self.paused = None
        self.pauses = []
        self.releases = 0  # by the synchronous step, before each update

    def samples_from(self, model):
        return False

    def reseed(self, seed):
        pass

    async def generate(self, prompts, params):
        raise AssertionError("the fake sampler does not generate")

    async def close(self):
        pass

    async def update_weights(self, state_dict, version=None):
        assert self.paused is not None or self.version is None or not self.running, "in flight, unpaused"
        self.version = version

    async def release_cache(self):
        self.releases += 1

    async def pause(self, mode):
        self.paused = mode
        self.pauses.append(mode)

    async def resume(self):
        self.paused = None

    running = 0


class Sampler:
    """Samples a batch in a random time; each rollout's tokens from the version the engine held
    when it started, and (like a 'keep' push) later ones from the version it holds as it ends."""

    def __init__(self, engine: Engine, delays: random.Random):
        self.engine, self.delays = engine, delays
        self.tokenizer = None
        self.started: list[tuple[list[str], int]] = []  # per batch, in the order they start

    async def sample(self, problems, seed):
        start = self.engine.version
        self.started.append((sorted(p.id for p in problems), start))
        self.engine.running += 1
        try:
            await asyncio.sleep(self.delays.uniform(0, 0.02))
        finally:
            self.engine.running -= 1
        end = self.engine.version
        groups = [[rollout(p, k, start, end) for k in range(2 * GROUP)] for p in problems]
        return SampledBatch(groups, {"rollout": 0.0, "tools": 0.0, "reward": 0.0})


def rollout(problem: Problem, k: int, start: int, end: int) -> Rollout:
    versions = [start] * 3 + [end] * 3
    trajectory = Trajectory(
        prompt_ids=[int(problem.id[1:])], prompt_text=problem.id, response_ids=[1] * 6, loss_mask=[1] * 6,
        logprobs=[-1.0] * 6, turns=[Turn(role="assistant", text="x", start=0, end=6)], tool_calls=[],
        num_assistant_turns=1, final_answer=str(k % 2), stop_reason="answer", temperature=1.0,
        weight_version=start, token_versions=versions if end != start else None)
    reward = float(k % 2)  # both outcomes in every group: RoC keeps it
    return Rollout(trajectory, trajectory_facts(trajectory, reward), None, Score(reward=reward))


class Learner:
    """Learns in a random time; records which problems each step trained on; checkpoints in memory."""

    def __init__(self, engine: Engine, delays: random.Random, checkpoints: dict | None = None):
        self.engine, self.delays = engine, delays
        self.trained: list[list[str]] = []
        self.checkpoints = {} if checkpoints is None else checkpoints

    def restore(self, resume):
        if resume and self.checkpoints:
            step = max(self.checkpoints)
            return TrainingState(step=step, data_position=self.checkpoints[step])
        return None

    def learning_rate(self):
        return 1e-6

    def learn(self, sequences):
        time.sleep(self.delays.uniform(0, 0.02))
        self.trained.append(sorted({f"p{s.prompt_ids[0]}" for s in sequences}))
        return None, None

    async def push_weights(self, version=None):
        await self.engine.update_weights({}, version)

    def save(self, step, data_position):
        self.checkpoints[step] = dict(data_position)
        return Path("/nonexistent")

    def wait_saved(self):
        pass


class Killed(Exception):
    """The process dying, at a moment the test chooses."""


PROBLEMS = [Problem(f"p{i}", f"problem {i}", "1") for i in range(20)]


def trainer(tmp_path, engine, sampler, learner, k, steps=8, enabled=True):
    rl = RLConfig(steps=steps, prompts_per_step=3, group_size=GROUP, max_silent_steps=100,
                  asynchronous=AsyncConfig(enabled=enabled, max_staleness=k))
    settings_ = TrainerSettings(run_dir=tmp_path, seed=3, rl=rl, shuffle=True,
                                checkpoint=CheckpointConfig(every_steps=1), logging=LoggingConfig(rollouts_per_step=0))
    return Trainer(settings_, learner, sampler, PROBLEMS)


def run(tmp_path, k, seed, steps=8, enabled=True, checkpoints=None, resume=False, stop_after=None):
    engine = Engine()
    rng = random.Random(seed)
    sampler = Sampler(engine, rng)
    learner = Learner(engine, rng, checkpoints)
    t = trainer(tmp_path, engine, sampler, learner, k, steps, enabled)
    t.restore(resume)
    if stop_after is not None:  # a run killed after this many steps
        original = learner.learn

        def learn(sequences):
            if len(learner.trained) == stop_after:
                raise Killed
            return original(sequences)

        learner.learn = learn
    try:
        asyncio.run(t.run())
    except Killed:
        pass
    return t, engine, sampler, learner


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(k=st.integers(0, 3), seed=st.integers(0, 10_000))
def test_the_staleness_bound_holds_whatever_order_groups_finish_in(tmp_path, k, seed):
    _, engine, sampler, learner = run(tmp_path / f"{k}-{seed}", k, seed)
    assert len(learner.trained) == 8
    for step, problems in enumerate(learner.trained):
        drawn, start = sampler.started[step]
        assert drawn == problems and start >= step - k, (step, problems)
    rows = [r for r in read_metrics(tmp_path / f"{k}-{seed}") if "async/wait_s" in r]
    assert len(rows) == 8 and all(r["async/staleness_max"] <= k for r in rows)
    assert all(r["roc/dropped_stale"] == 0 for r in rows)
    assert set(engine.pauses) == {"keep"}


def test_each_batch_is_trained_once_in_the_synchronous_order(tmp_path):
    _, engine, _, sync = run(tmp_path / "sync", 0, seed=1, enabled=False)
    assert engine.releases == len(sync.trained)  # the cache freed for every update
    for k in (0, 2):
        _, engine, _, ahead = run(tmp_path / f"k{k}", k, seed=1)
        assert ahead.trained == sync.trained  # the same problems at the same steps
        assert engine.releases == 0  # the engine samples on beside the update


def test_k_zero_samples_every_batch_under_the_weights_of_its_own_step(tmp_path):
    _, _, sampler, learner = run(tmp_path, 0, seed=5)
    for step, problems in enumerate(learner.trained):
        assert sampler.started[step] == (problems, step)
    rows = [r for r in read_metrics(tmp_path) if "async/wait_s" in r]
    assert all(r["async/staleness_max"] == 0 and r["async/staleness_share_0"] == 1.0 for r in rows)


def test_updates_run_beside_the_sampling_thread_only_where_they_overlap_it(tmp_path):
    import threading

    for k, beside in ((0, False), (1, True)):
        engine = Engine()
        rng = random.Random(k)
        learner = Learner(engine, rng)
        threads = []
        original = learner.learn
        learner.learn = lambda sequences: threads.append(threading.get_ident()) or original(sequences)
        t = trainer(tmp_path / str(k), engine, Sampler(engine, rng), learner, k, steps=3)
        asyncio.run(t.run())
        assert len(threads) == 3 and all((ident != threading.get_ident()) == beside for ident in threads), k


def test_a_resumed_run_trains_what_an_unstopped_one_does(tmp_path):
    _, _, _, whole = run(tmp_path / "whole", 2, seed=9)
    checkpoints: dict = {}
    _, _, _, first = run(tmp_path / "cut", 2, seed=9, checkpoints=checkpoints, stop_after=3)
    assert len(first.trained) == 3 and max(checkpoints) == 3
    _, _, _, rest = run(tmp_path / "cut", 2, seed=10, checkpoints=checkpoints, resume=True)
    assert first.trained + rest.trained == whole.trained  # nothing lost, nothing twice


def test_tokens_count_at_the_version_that_sampled_them():
    problem = PROBLEMS[0]
    kept = rollout(problem, 1, start=3, end=4)
    assert kept.trajectory.token_versions == [3, 3, 3, 4, 4, 4]
    assert token_staleness([kept], step=5) == [2, 2, 2, 1, 1, 1]
    assert token_staleness([rollout(problem, 1, start=5, end=5)], step=5) == [0] * 6


class Plain:
    """An engine that takes weights only between steps."""

    version = None
    running = 0

    def samples_from(self, model):
        return False

    def reseed(self, seed):
        pass

    async def generate(self, prompts, params):
        raise AssertionError

    async def close(self):
        pass

    async def update_weights(self, state_dict, version=None):
        self.version = version


def test_an_engine_that_cannot_pause_is_refused(tmp_path):
    engine = Plain()
    t = trainer(tmp_path, engine, Sampler(engine, random.Random(0)), Learner(engine, random.Random(0)), 1)
    with pytest.raises(NotPausable, match="cannot take weights while it generates"):
        SampledAhead(t)
