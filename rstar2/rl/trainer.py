"""The GRPO-RoC training loop (report §2.2, §4.3): one rollout step after another.

    trainer = Trainer(config, model, tokenizer, engine, code_runner, grader, problems)
    trainer.restore(resume=True)       # the latest checkpoint of the run, or config.rl.init
    await trainer.run()

The trainer receives everything it works with: the policy ``model``, the ``engine`` that samples
from it, the sandbox ``code_runner``, the reward ``grader`` and the training ``problems``
(``rstar2.rl.launch`` builds them from a recipe). One step:

1. draw ``prompts_per_step`` problems (``PromptOrder``, resumable);
2. roll out 2G trajectories of each through the agent loop (G with RoC off); each one is graded
   the moment it ends, in a thread, so grading runs beside the rollouts still generating;
3. RoC keeps G of each group (its generator seeded by ``[seed, step]``) and drops groups
   without signal;
4. advantages over the kept rollouts; if the engine holds its own copy of the weights, the old
   log-probs are recomputed by the trainer's model (otherwise the sampled ones are the old
   policy's, exactly); ``updates_per_step`` optimizer updates, each over micro-batches with
   gradient accumulation;
5. the engine gets the new weights (colocated: it shares the model, and only drops the KV it
   computed with the old ones);
6. metrics to ``metrics.jsonl`` and the console, sampled groups to ``rollouts/step_N.jsonl``,
   and a checkpoint (atomic), so a run killed at any moment loses at most the step in progress.

Randomness: the prompt order is a function of (seed, position); RoC and the engine's sampling
generator are reseeded from (seed, step) every step; the global RNGs travel in checkpoints.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Sequence

import numpy as np
import torch

from rstar2.agent.prompt import PromptConfig
from rstar2.agent.rollout import Agent, CodeRunner
from rstar2.agent.rollout import RolloutConfig as AgentRolloutConfig
from rstar2.agent.trajectory import Trajectory
from rstar2.data.problems import Problem
from rstar2.reward import Grader
from rstar2.rl.advantage import group_advantages
from rstar2.rl.batch import TrainSequence
from rstar2.rl.checkpoint import latest_checkpoint, load_checkpoint, resolve_checkpoint, save_checkpoint
from rstar2.rl.config import RolloutConfig, RunConfig
from rstar2.rl.metrics import Rollout, step_metrics
from rstar2.rl.optim import build_optimizer, build_scheduler
from rstar2.rl.prompt_order import PromptOrder
from rstar2.rl.roc import GroupDecision, select_group, trajectory_facts
from rstar2.rl.runlog import RunLog
from rstar2.rl.timing import TimedRunner
from rstar2.rl.update import UpdateSettings, policy_update, with_current_logprobs


class Trainer:
    def __init__(self, config: RunConfig, model: torch.nn.Module, tokenizer, engine,
                 code_runner: CodeRunner, grader: Grader, problems: Sequence[Problem], console=None):
        self.config = config
        self.model = model
        self.engine = engine
        self.tokenizer = tokenizer
        self.grader = grader
        self.problems = list(problems)
        self.console = console
        self.tools = TimedRunner(code_runner)
        self.agent = Agent(engine, tokenizer, self.tools, agent_config(config.rollout))
        self.optimizer = build_optimizer(model.parameters(), config.rl.optimizer)
        self.scheduler = build_scheduler(self.optimizer, config.rl.optimizer)
        self.order = PromptOrder(len(self.problems), config.seed)
        self.completed_steps = 0
        self.reference: torch.nn.Module | None = None
        self.checkpoints = config.run_dir / "checkpoints"
        self.settings = UpdateSettings(
            loss=config.rl.loss, temperature=config.rollout.temperature,
            micro_batch_tokens=config.rl.micro_batch_tokens,
            max_grad_norm=config.rl.optimizer.max_grad_norm,
            pad_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0,
            compute_dtype=config.model.compute_dtype,
        )

    @property
    def colocated(self) -> bool:
        """The engine samples from this very model (so its log-probs are the old policy's)."""
        return getattr(self.engine, "model", None) is self.model

    # ----------------------------------------------------------------- state
    def restore(self, resume: bool) -> None:
        """Continue the run's latest checkpoint (``resume``), else start from ``rl.init``."""
        if self.config.rl.loss.kl_coef > 0:
            self.reference = self.reference_policy()
        latest = latest_checkpoint(self.checkpoints) if resume else None
        if latest is not None:
            state = load_checkpoint(latest, self.model, self.optimizer, self.scheduler)
            self.completed_steps = state.step
            self.order = PromptOrder(len(self.problems), self.config.seed, **state.data_position)
        elif self.config.rl.init.checkpoint is not None:
            keep_optimizer = not self.config.rl.init.reset_optimizer  # stage 3 resets it
            load_checkpoint(resolve_checkpoint(self.config.rl.init.checkpoint), self.model,
                            self.optimizer if keep_optimizer else None,
                            self.scheduler if keep_optimizer else None, restore_rng=False)
        self.push_weights()

    def reference_policy(self) -> torch.nn.Module:
        """The KL reference: ``model.path``'s weights, or with ``init.reset_reference`` the
        stage's starting checkpoint. Built from the policy before any checkpoint is loaded
        into it, so a resumed run gets the same reference as the run it continues."""
        reference = copy.deepcopy(self.model)
        init = self.config.rl.init
        if init.checkpoint is not None and init.reset_reference:
            load_checkpoint(resolve_checkpoint(init.checkpoint), reference, restore_rng=False)
        reference.eval().requires_grad_(False)
        return reference

    # ----------------------------------------------------------------- the loop
    async def run(self) -> list[dict]:
        """Train until ``rl.steps`` are complete; returns the metrics of the steps run now."""
        log = RunLog(self.config.run_dir, self.config.logging, self.config.rl.steps,
                     resume_step=self.completed_steps, console=self.console,
                     run_config=self.config.model_dump())
        history = []
        try:
            while self.completed_steps < self.config.rl.steps:
                metrics, rows = await self.train_step(self.completed_steps)
                self.completed_steps += 1
                log.rollouts(self.completed_steps, rows)
                log.step(self.completed_steps, metrics)  # before the checkpoint: a resume
                self.save_if_due()                       # from the previous one drops this line
                history.append(metrics)
        finally:
            log.close()
        return history

    async def train_step(self, step: int) -> tuple[dict, list[dict]]:
        """One rollout step (module docstring); returns its metrics and its rollout log rows."""
        started = time.perf_counter()
        problems = [self.problems[i] for i in self.order.next_batch(self.config.rl.prompts_per_step)]
        groups, timings = await self.sample(problems, seed_of(self.config.seed, step))
        rng = np.random.default_rng([self.config.seed, step])
        decisions = [select_group([r.facts for r in group], self.config.rl.roc, rng) for group in groups]
        lr = self.scheduler.get_last_lr()[0]
        update_started = time.perf_counter()
        stats, grad_norm = self.update(training_sequences(groups, decisions, self.config.rl.loss.std_epsilon))
        self.push_weights()
        timings["update"] = time.perf_counter() - update_started
        timings["step"] = time.perf_counter() - started
        metrics = step_metrics(groups, decisions, stats, grad_norm, lr, timings)
        shown = self.config.logging.rollouts_per_step
        rows = rollout_rows(step + 1, problems[:shown], groups[:shown], decisions[:shown], self.tokenizer)
        return metrics, rows

    async def sample(self, problems: list[Problem], seed: int) -> tuple[list[list[Rollout]], dict]:
        """All rollouts of the step, graded; and the wall seconds of rollout, tools and reward
        (the part of grading left after the last rollout ended)."""
        seed_engine(self.engine, seed)
        self.model.eval()
        self.tools.reset()
        started = time.perf_counter()
        last_rollout_end = started

        async def one(problem: Problem) -> Rollout:
            nonlocal last_rollout_end
            trajectory = await self.agent.rollout(problem.problem)
            last_rollout_end = max(last_rollout_end, time.perf_counter())
            grade = await asyncio.to_thread(
                self.grader.grade_many, [(trajectory.assistant_text, problem.answer)])
            return Rollout(trajectory, trajectory_facts(trajectory, grade[0].reward))

        n = self.config.rl.rollouts_per_prompt
        groups = await asyncio.gather(*(asyncio.gather(*(one(p) for _ in range(n))) for p in problems))
        timings = {"rollout": last_rollout_end - started, "tools": self.tools.busy_s,
                   "reward": time.perf_counter() - last_rollout_end}
        return [list(group) for group in groups], timings

    def update(self, sequences: list[TrainSequence]):
        """``updates_per_step`` optimizer updates over the kept rollouts; (None, None) when RoC
        left nothing to learn from (the step is skipped, as in the release)."""
        if not sequences:
            return None, None
        if not self.colocated:
            sequences = with_current_logprobs(self.model, sequences, self.settings)
        stats, norms = None, []
        for part in np.array_split(np.arange(len(sequences)), self.config.rl.updates_per_step):
            if len(part) == 0:
                continue
            part_stats, norm = policy_update(self.model, self.optimizer, self.scheduler,
                                             [sequences[i] for i in part], self.settings, self.reference)
            stats = part_stats if stats is None else stats + part_stats
            norms.append(norm)
        return stats, float(np.mean(norms))

    def push_weights(self) -> None:
        """Hand the current weights to the engine. A colocated engine already reads them and
        only drops the keys/values the previous weights computed; another copy is loaded."""
        state = {} if self.colocated else self.model.state_dict()
        self.engine.update_weights(state)

    def save_if_due(self) -> None:
        step, every = self.completed_steps, self.config.checkpoint.every_steps
        if step % every == 0 or step == self.config.rl.steps:
            save_checkpoint(self.checkpoints, step, self.model, self.optimizer, self.scheduler,
                            self.order.position(), keep_last=self.config.checkpoint.keep_last)


def agent_config(rollout: RolloutConfig) -> AgentRolloutConfig:
    """The agent loop's settings for training rollouts."""
    return AgentRolloutConfig(
        max_turns=rollout.max_turns, max_response_tokens=rollout.max_response_tokens,
        temperature=rollout.temperature, top_p=rollout.top_p, tool_timeout_s=rollout.tool_timeout_s,
        prompt=PromptConfig(variant=rollout.prompt),
    )


def training_sequences(groups: Sequence[Sequence[Rollout]], decisions: Sequence[GroupDecision],
                       std_epsilon: float) -> list[TrainSequence]:
    """The kept rollouts of the groups RoC used, each with its group-normalised advantage."""
    sequences = []
    for group, decision in zip(groups, decisions):
        if not decision.kept:
            continue
        kept = [group[i] for i in decision.kept]
        rewards = torch.tensor([[r.facts.reward for r in kept]])
        for rollout, advantage in zip(kept, group_advantages(rewards, std_epsilon)[0].tolist()):
            t = rollout.trajectory
            sequences.append(TrainSequence(t.prompt_ids, t.response_ids, t.loss_mask, t.logprobs, advantage))
    return sequences


def rollout_rows(step: int, problems: Sequence[Problem], groups: Sequence[Sequence[Rollout]],
                 decisions: Sequence[GroupDecision], tokenizer) -> list[dict]:
    """One JSON row per sampled rollout of the logged groups, with RoC's verdict on it and, for
    ``rstar2 view``'s per-token shading, each response token's text with its sampled log-prob
    (null for tokens the model did not sample: tool responses, template separators)."""
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
                "tool_calls": [{"code": c.code, "status": c.status, "output": c.output, "duration_s": c.duration_s}
                               for c in t.tool_calls],
                "response": "".join(turn.text for turn in t.turns),
                "token_logprobs": token_logprobs(t, tokenizer),
            })
    return rows


def token_logprobs(trajectory: Trajectory, tokenizer) -> list[list]:
    """``[text, log-prob or None]`` per response token (None where the mask is 0)."""
    pieces = tokenizer.batch_decode([[token] for token in trajectory.response_ids])
    return [[piece, round(logprob, 4) if sampled else None]
            for piece, logprob, sampled in zip(pieces, trajectory.logprobs, trajectory.loss_mask)]


def seed_of(seed: int, step: int) -> int:
    """A 63-bit seed for step ``step`` of a run seeded ``seed``."""
    return int(np.random.SeedSequence([seed, step]).generate_state(2, np.uint64)[0] >> np.uint64(1))


def seed_engine(engine, seed: int) -> None:
    """Reseed an embedded engine's sampling generator, so a resumed step samples with the same
    stream as the interrupted one (remote engines keep their own randomness)."""
    generator = getattr(engine, "generator", None)
    if isinstance(generator, torch.Generator):
        generator.manual_seed(seed)
