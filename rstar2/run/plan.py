"""What a run will do before anything starts (``rstar2 train --plan``): the Ray cluster's
placement and per-GPU memory (``rstar2.cluster.plan``) for a recipe with a ``cluster:``
section, else the one process's.

A recipe without a ``cluster:`` section trains in one process: its plan (``LocalPlan``) is the
memory of the policy and of its rollout engine on ``model.device``, checked against one GPU of
``ClusterConfig.gpu_memory_gib`` (80 GiB) when that device is a GPU ('auto' plans for the GPU
such a recipe is written for, since ``--plan`` runs on machines without one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rstar2.cluster.architectures import architecture
from rstar2.cluster.config import ClusterConfig
from rstar2.cluster.plan import DTYPE_BYTES, GIB, PlacementError, gib, learner_memory, plan_run, render
from rstar2.run.config import RunConfig
from rstar2.run.settings import cluster_job


@dataclass(frozen=True)
class LocalPlan:
    """One process: the policy and its rollout engine on one device."""

    device: str
    learner_bytes: dict[str, float]
    """Weights, gradients, optimizer, activations, logits (bytes)."""
    engine_bytes: dict[str, float]
    """The engine's own weights (none when it samples from the policy) and KV cache (bytes)."""
    kv_tokens: int
    in_flight: int
    rollouts_per_step: int
    rollout_tokens: int
    gpu_memory_gib: float

    @property
    def gpu(self) -> bool:
        return self.device != "cpu"


def run_plan(config: RunConfig) -> str:
    """The lines ``--plan`` prints; ``PlacementError`` when the run cannot fit."""
    if config.cluster is None:
        return render_local(local_plan(config))
    return render(plan_run(cluster_job(config)))


def local_plan(config: RunConfig) -> LocalPlan:
    """The plan of a run without a ``cluster:`` section (module docstring); ``PlacementError``
    when a GPU cannot hold the policy, its optimizer and the engine's KV cache together."""
    arch = architecture(None, config.model.path)
    engine = config.engine
    rollout_tokens = config.data.max_prompt_tokens + config.rollout.max_response_tokens
    engine_dtype = engine.dtype or config.model.dtype
    kv_per_token = arch.kv_bytes_per_token(DTYPE_BYTES[engine_dtype])
    copy_bytes = arch.parameters * DTYPE_BYTES[engine_dtype]
    if engine.members:  # the members in this process, each with its copy and KV budget
        local = [m for m in engine.members if m.kind == "hf" and not m.ray]
        budgets = [m.kv_budget_tokens or m.max_batch_size * rollout_tokens for m in local]
        weights = copy_bytes * len(local)
        in_flight = sum(min(m.max_batch_size, b // rollout_tokens) for m, b in zip(local, budgets))
    else:  # one engine that admits the whole batch at once
        in_flight = config.rl.prompts_per_step * config.rl.rollouts_per_prompt
        budgets = [in_flight * rollout_tokens]
        weights = copy_bytes if engine.dtype is not None else 0.0
    plan = LocalPlan(
        device="cuda" if config.model.device == "auto" else config.model.device,
        learner_bytes=learner_memory(config.model, config.rl, arch, ranks=1, sharded=False),
        engine_bytes={"weights": weights, "kv_cache": sum(budgets) * kv_per_token},
        kv_tokens=sum(budgets), in_flight=in_flight,
        rollouts_per_step=config.rl.prompts_per_step * config.rl.rollouts_per_prompt,
        rollout_tokens=rollout_tokens,
        gpu_memory_gib=ClusterConfig.model_fields["gpu_memory_gib"].default)
    total = (sum(plan.learner_bytes.values()) + sum(plan.engine_bytes.values())) / GIB
    if plan.gpu and total > plan.gpu_memory_gib:
        raise PlacementError(
            f"does not fit one {plan.gpu_memory_gib:g} GiB GPU: the policy and its engine need "
            f"{total:.1f} GiB; bound the engine's KV cache (engine.members with kv_budget_tokens), "
            "lower rl.micro_batch_tokens or set model.gradient_checkpointing")
    return plan


def render_local(plan: LocalPlan) -> str:
    """A ``LocalPlan`` as the lines ``--plan`` prints."""
    learner, engine = sum(plan.learner_bytes.values()), sum(plan.engine_bytes.values())
    where = f"one GPU ({plan.device})" if plan.gpu else "the CPU (host memory)"
    lines = [f"placement: one process on {where}, the policy and its rollout engine together",
             f"learner memory: {gib(learner)} GiB (" + ", ".join(
                 f"{k} {gib(v)}" for k, v in plan.learner_bytes.items()) + ")",
             f"engine memory: {gib(engine)} GiB (" + ", ".join(
                 f"{k} {gib(v)}" for k, v in plan.engine_bytes.items()) + ")",
             f"KV capacity: {plan.kv_tokens} tokens = {plan.kv_tokens // plan.rollout_tokens} rollouts "
             f"of {plan.rollout_tokens} tokens",
             f"rollouts in flight: {plan.in_flight} of {plan.rollouts_per_step} per step, at least "
             f"{math.ceil(plan.rollouts_per_step / max(plan.in_flight, 1))} waves"]
    if plan.gpu:
        lines.append(f"total: {gib(learner + engine)} GiB of a {plan.gpu_memory_gib:g} GiB GPU")
    return "\n".join(lines)
