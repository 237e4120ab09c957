"""The GRPO-RoC training loop (report §2.2, §4.3): one rollout step after another.

    trainer = Trainer(settings, learner, sampler, problems)   # settings: TrainerSettings
    trainer.restore(resume=True)       # the latest checkpoint of the run, or rl.init
    await trainer.run()

The trainer owns the step and the data position; it receives its own settings
(``TrainerSettings``), the ``Learner`` that holds and trains the policy (``rstar2.rl.learner``),
the ``Sampler`` that rolls out and grades (``rstar2.rl.sampler``) and the training ``problems``
(``rstar2.run.training`` builds all of them from a recipe). One step:

1. draw ``prompts_per_step`` problems (``PromptOrder``, resumable);
2. sample: 2G trajectories of each through the agent loop (G with RoC off), each graded the
   moment it ends, so grading runs beside the rollouts still generating;
3. RoC keeps G of each group (its generator seeded by ``[seed, step]``) and drops groups
   without signal;
4. advantages over the kept rollouts;
5. learn: ``updates_per_step`` optimizer updates (where the engine holds another copy of the
   weights, the old log-probs are the trainer's and the sampled ones weight each token, see
   ``learner``), then the engine gets the new weights;
6. log: metrics to ``metrics.jsonl`` and the console, sampled groups to
   ``rollouts/step_N.jsonl``; checkpoint (atomic, written while the next step runs), so a run
   killed at any moment loses at most the step in progress and the one being written.

With a ``Validator`` (the run's ``validation:`` section, ``rstar2.rl.validation``) the policy
also answers a held-out set greedily before the first step of a fresh run, after every
``every_steps``-th step and after the last; its ``val/*`` numbers join that step's row (step 0
gets a row of its own), and training's batches and random streams are the same as without it.

A run whose last ``rl.max_silent_steps`` steps all trained nothing (its policy did not change
while it met every problem), or all had every reward call fail, stops there, checkpointed, and
fails (``rstar2.rl.silence``: ``NothingLearned``; ``Trainer.silent_steps_limit``).

Randomness: the prompt order is a function of (seed, position); RoC's generator and every
rollout's sampling stream are derived from (seed, step) (the sampler gives each rollout its own
``SamplingParams.seed``); the global RNGs travel in checkpoints.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rstar2.agent.trajectory import Trajectory
from rstar2.data.problems import Problem
from rstar2.engines.seeds import derive_seed
from rstar2.reward import Score
from rstar2.rl.advantage import GroupAlgorithm, group_algorithm
from rstar2.rl.config import RLConfig
from rstar2.rl.learner import Learner
from rstar2.rl.loss import LossStats
from rstar2.rl.metrics import step_metrics, weight_version_metrics
from rstar2.rl.prompt_order import PromptOrder
from rstar2.rl.roc import GroupDecision
from rstar2.rl.rollout import Rollout
from rstar2.rl.sampler import SampledBatch, Sampler
from rstar2.rl.silence import SilenceWatch
from rstar2.rl.validation import Validator
from rstar2.training.batch import TrainSequence
from rstar2.training.config import CheckpointConfig, LoggingConfig
from rstar2.training.runlog import RunLog


@dataclass(frozen=True)
class TrainerSettings:
    """The step loop's own settings, cut from the run config once (``rstar2.run.settings``)."""

    run_dir: Path
    """Where ``metrics.jsonl`` and ``rollouts/`` go."""
    seed: int
    """Seeds the prompt order, the rollouts' sampling streams and RoC's draws."""
    rl: RLConfig
    """The algorithm: steps, batch sizes, RoC, the loss."""
    shuffle: bool
    """A fresh seeded prompt order each epoch, else the problems' own order (a curriculum)."""
    checkpoint: CheckpointConfig
    """How often the learner is asked to checkpoint."""
    logging: LoggingConfig
    """Which rollouts are logged, and the metric sinks."""
    recipe: Mapping[str, Any] = field(default_factory=dict)
    """The whole resolved run config, as the metric sinks record it (wandb's run config)."""


class Trainer:
    """The step loop. It owns the step count and the data position; the policy belongs to the
    learner and the rollouts to the sampler, so either can change without touching the step."""

    def __init__(self, config: TrainerSettings, learner: Learner, sampler: Sampler,
                 problems: Sequence[Problem], console=None, validator: Validator | None = None):
        self.config = config
        self.learner = learner
        self.sampler = sampler
        self.problems = list(problems)
        self.console = console
        self.validator = validator
        self.order = PromptOrder(len(self.problems), config.seed, shuffle=config.shuffle)
        self.completed_steps = 0
        self.last_checkpoint_at = time.monotonic()  # or the start: what a crash would lose
        self.algorithm = group_algorithm(config.rl)

    def restore(self, resume: bool) -> None:
        """Continue the run's latest checkpoint (``resume``), else start from ``rl.init``."""
        state = self.learner.restore(resume)
        if state is not None:
            self.completed_steps = state.step
            self.order = PromptOrder(len(self.problems), self.config.seed, **state.data_position,
                                     shuffle=self.config.shuffle)

    async def run(self) -> list[dict]:
        """Train until ``rl.steps`` are complete; returns the metrics of the steps run now.
        Raises ``NothingLearned`` (``rstar2.rl.silence``) when the run stopped because it
        learned nothing, after its last step is logged and checkpointed."""
        log = RunLog(self.config.run_dir, self.config.logging, self.config.rl.steps,
                     resume_step=self.completed_steps, console=self.console,
                     run_config=self.config.recipe)
        history = []
        watch = SilenceWatch(self.silent_steps_limit())
        try:
            # the restored (or initial) policy samples the next step
            await self.learner.push_weights(self.completed_steps)
            if self.completed_steps == 0 and self.validator is not None:
                log.step(0, await self.validate())  # a resumed run logged its own
            async with self.batches() as batches:
                while self.completed_steps < self.config.rl.steps and not watch.reached():
                    metrics, rows, trained, scores = await self.train_step(self.completed_steps, batches)
                    self.completed_steps += 1
                    watch.record(trained, scores)
                    if self.validator is not None and self.validator.due(self.completed_steps, self.config.rl.steps):
                        metrics.update(await self.validate())
                    log.rollouts(self.completed_steps, rows)
                    log.step(self.completed_steps, metrics)  # before the checkpoint: a resume
                    self.save_if_due(batches, force=watch.reached())  # from the previous one drops this line
                    history.append(metrics)
        finally:
            log.close()
            self.learner.wait_saved()
        if watch.reached():
            raise watch.verdict(self.completed_steps, self.config.rl.steps, self.config.run_dir,
                                self.config.rl.reward)
        return history

    def batches(self) -> StepBatches:
        """Where the steps' batches come from: sampled in the step (``InStep``), or ahead of
        the learner (``rl.asynchronous``: ``rstar2.rl.asynchronous.SampledAhead``)."""
        if not self.config.rl.asynchronous.enabled:
            return InStep(self)
        from rstar2.rl.asynchronous import SampledAhead

        return SampledAhead(self)

    async def validate(self) -> dict[str, float]:
        """The validator's probe of the weights the engine holds, which are then pushed again
        (the same version) so that nothing the probe left cached reaches the next step; an
        asynchronous run, whose next batches are already sampling beside the probe, keeps its
        caches (every rollout draws from its own seeded stream either way)."""
        metrics = await self.validator()
        if not self.config.rl.asynchronous.enabled:
            await self.learner.push_weights(self.completed_steps)
        return metrics

    def silent_steps_limit(self) -> int:
        """``rl.max_silent_steps``, or one pass over the problems and at least 3 steps."""
        rl = self.config.rl
        return rl.max_silent_steps or max(-(-len(self.problems) // rl.prompts_per_step), 3)

    def draw(self, step: int) -> tuple[list[Problem], int]:
        """The problems of ``step``'s batch (the next in the prompt order) and the seed they
        are sampled with."""
        indices = self.order.next_batch(self.config.rl.prompts_per_step)
        return [self.problems[i] for i in indices], derive_seed(self.config.seed, step)

    async def train_step(self, step: int, batches: StepBatches) -> tuple[dict, list[dict], bool, list[Score]]:
        """One rollout step (module docstring); returns its metrics, its rollout log rows,
        whether an update ran (False when RoC dropped every group) and its reward calls."""
        started = time.perf_counter()
        problems, batch = await batches.batch(step)
        rng = np.random.default_rng([self.config.seed, step])
        decisions = [self.algorithm.select([r.facts for r in group], rng) for group in batch.groups]
        decisions = batches.within_bound(step, batch.groups, decisions)
        lr = self.learner.learning_rate()
        update_started = time.perf_counter()
        sequences = training_sequences(batch.groups, decisions, self.algorithm)
        stats, grad_norm = await batches.learn(sequences)
        await batches.push(step + 1)
        timings = {**batch.timings, "update": time.perf_counter() - update_started,
                   "step": time.perf_counter() - started}
        metrics = step_metrics(batch.groups, decisions, stats, grad_norm, lr, timings)
        metrics.update(weight_version_metrics([r for g in batch.groups for r in g], step))
        metrics.update(batches.metrics(step, kept_rollouts(batch.groups, decisions)))
        scores = [r.score for g in batch.groups for r in g if r.score is not None]
        self.report_reward_failures(step + 1, scores)
        shown = self.config.logging.rollouts_per_step
        rows = rollout_rows(step + 1, problems[:shown], batch.groups[:shown], decisions[:shown],
                            self.sampler.tokenizer)
        return metrics, rows, stats is not None, scores

    def report_reward_failures(self, step: int, scores) -> None:
        """One console line for a step whose reward calls failed (the counts are metrics)."""
        failed = [scored for scored in scores if scored.failure is not None]
        if failed and self.console is not None:
            self.console.print(f"[yellow]step {step}: {len(failed)} of {len(scores)} reward calls failed and "
                               f"scored 0; the first: {failed[0].failure}: {failed[0].message}[/]")

    def save_if_due(self, batches: StepBatches, force: bool = False) -> None:
        step = self.completed_steps
        since_last = time.monotonic() - self.last_checkpoint_at
        if force or self.config.checkpoint.due(step, self.config.rl.steps, since_last):
            self.learner.save(step, batches.position(step))
            self.last_checkpoint_at = time.monotonic()


class StepBatches(Protocol):
    """Where each step's sampled batch comes from, and how its update reaches the engine:
    ``InStep`` (the synchronous loop) or ``rstar2.rl.asynchronous.SampledAhead``. An async
    context: entered before the first step, left after the last (or a failure)."""

    async def __aenter__(self) -> StepBatches: ...

    async def __aexit__(self, *exc_info) -> None: ...

    async def batch(self, step: int) -> tuple[list[Problem], SampledBatch]:
        """The problems of ``step`` and their graded groups."""
        ...

    def within_bound(self, step: int, groups: Sequence[Sequence[Rollout]],
                     decisions: list[GroupDecision]) -> list[GroupDecision]:
        """``decisions``, with a group that may not train at ``step`` dropped."""
        ...

    async def learn(self, sequences: list[TrainSequence]) -> tuple[LossStats | None, float | None]:
        """The step's update (``Learner.learn``)."""
        ...

    async def push(self, version: int) -> None:
        """The updated weights, as ``version``, to the engine."""
        ...

    def position(self, next_step: int) -> dict[str, int]:
        """The prompt order's position a run resumed before ``next_step`` draws from."""
        ...

    def metrics(self, step: int, kept: Sequence[Rollout]) -> dict[str, float]:
        """This way of sampling's own numbers for ``step`` (``kept``: the rollouts trained on)."""
        ...


class InStep:
    """Each step samples its batch, then learns from it and pushes, one after the other."""

    def __init__(self, trainer: Trainer):
        self.trainer = trainer

    async def __aenter__(self) -> InStep:
        return self

    async def __aexit__(self, *exc_info) -> None:
        pass

    async def batch(self, step: int) -> tuple[list[Problem], SampledBatch]:
        problems, seed = self.trainer.draw(step)
        return problems, await self.trainer.sampler.sample(problems, seed)

    def within_bound(self, step, groups, decisions):
        return decisions

    async def learn(self, sequences):
        await self.trainer.sampler.engine.release_cache()  # nothing samples until the push
        return self.trainer.learner.learn(sequences)

    async def push(self, version: int) -> None:
        await self.trainer.learner.push_weights(version)

    def position(self, next_step: int) -> dict[str, int]:
        return self.trainer.order.position()

    def metrics(self, step, kept):
        return {}


def kept_rollouts(groups: Sequence[Sequence[Rollout]], decisions: Sequence[GroupDecision]) -> list[Rollout]:
    """The rollouts RoC kept, over the groups it used."""
    return [group[i] for group, decision in zip(groups, decisions) for i in decision.kept]


def training_sequences(groups: Sequence[Sequence[Rollout]], decisions: Sequence[GroupDecision],
                       algorithm: GroupAlgorithm) -> list[TrainSequence]:
    """The kept rollouts of the groups RoC used, each with the algorithm's advantage."""
    sequences = []
    for group, decision in zip(groups, decisions):
        if not decision.kept:
            continue
        kept = [group[i] for i in decision.kept]
        for rollout, advantage in zip(kept, algorithm.advantages([r.facts.reward for r in kept])):
            t = rollout.trajectory
            sequences.append(TrainSequence(t.prompt_ids, t.response_ids, t.loss_mask, t.logprobs, advantage))
    return sequences


def rollout_rows(step: int, problems: Sequence[Problem], groups: Sequence[Sequence[Rollout]],
                 decisions: Sequence[GroupDecision], tokenizer) -> list[dict]:
    """One JSON row per sampled rollout of the logged groups, with RoC's verdict on it and, for
    ``rstar2 view``'s per-token shading, each response token's text with its sampled log-prob
    (null for tokens the model did not sample: tool responses, template separators), and for its
    timeline when the rollout started, ended and was graded (``Rollout.span_s``), and the weight
    version it was sampled under (``Trajectory.weight_version``). The first row of each group also
    carries what its rollouts share (``group_prompt``), once rather than in every row."""
    rows = []
    for group_index, (problem, group, decision) in enumerate(zip(problems, groups, decisions)):
        for index, rollout in enumerate(group):
            t = rollout.trajectory
            rows.append({
                "step": step, "group": group_index, "problem_id": problem.id, "gold": problem.answer,
                "rollout": index, "reward": rollout.facts.reward, "penalty": decision.penalties[index],
                "kept": index in decision.kept, "group_dropped": decision.dropped,
                "answer": t.final_answer, "stop_reason": t.stop_reason,
                "response_tokens": len(t.response_ids),
                "tool_calls": [{"tool": c.tool, "code": c.code, "arguments": c.arguments, "status": c.status,
                                "output": c.output, "duration_s": c.duration_s} for c in t.tool_calls],
                "reward_failure": rollout.score.failure if rollout.score else None,
                "reward_message": rollout.score.message if rollout.score else None,
                "response": "".join(turn.text for turn in t.turns),
                "token_logprobs": token_logprobs(t, tokenizer),
                "span_s": rollout.span_s,
                "weight_version": t.weight_version,
                **(group_prompt(t, tokenizer) if index == 0 else {}),
            })
    return rows


def token_logprobs(trajectory: Trajectory, tokenizer) -> list[list]:
    """``[text, log-prob or None]`` per response token (None where the mask is 0)."""
    pieces = tokenizer.batch_decode([[token] for token in trajectory.response_ids])
    return [[piece, round(logprob, 4) if sampled else None]
            for piece, logprob, sampled in zip(pieces, trajectory.logprobs, trajectory.loss_mask)]


def group_prompt(trajectory: Trajectory, tokenizer) -> dict:
    """The prompt as the model saw it (its token ids decoded: chat template, system prompt with
    the tool description, question) and the tokenizer's special tokens, which the log keeps in
    the text (it is what the model produced) and ``rstar2 view`` hides."""
    return {"prompt": tokenizer.decode(trajectory.prompt_ids),
            "special_tokens": list(tokenizer.all_special_tokens)}

