"""What a ``cluster:`` section will do before anything starts: placement, memory, throughput.

    plan = plan_run(job)           # a ClusterJob; PlacementError (one line) when it cannot fit
    print(render(plan))

A recipe without a ``cluster:`` section trains in one process; its plan is
``rstar2.run.plan``'s, built from this module's learner memory.

Placement: learner ranks first (one GPU each, filling nodes in order), then engine members
(``gpus_per_member`` GPUs on one node each), with every node's sandbox services and the CPU
cores of all three counted against ``cpus_per_node``.

Memory, per learner GPU, for FSDP2 full sharding over ``learner.ranks``: the shards of the
weights, gradients and AdamW's two moments (all in ``model.dtype``, as the optimizer keeps
them), the unsharded working set (the root's embedding and output head, which FSDP2 keeps
gathered through the step, plus two decoder layers: the one computing and the one prefetched,
with their unsharded gradients), and the activations of one micro-batch of
``rl.micro_batch_tokens``: with activation checkpointing the input of every layer plus one
layer's recomputed internals, without it every layer's internals; and the response logits with
their float32 log-softmax and its gradient. Per engine GPU: its slice of the bf16 weights, the
runtime reserve, and the KV cache that is left of ``gpu_memory_utilization``. Rollouts in flight
per member are the fewer of ``max_num_seqs`` and the KV tokens over one rollout's longest length
(prompt + response budget): the count that never has to preempt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rstar2.cluster.architectures import Architecture, architecture
from rstar2.cluster.config import ClusterConfig, ClusterJob
from rstar2.errors import Rstar2Error
from rstar2.rl.config import RLConfig
from rstar2.training.config import ModelConfig

GIB = 1024**3
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}


class PlacementError(Rstar2Error, ValueError):
    """The cluster cannot hold the run as described; the message says what does not fit."""


@dataclass
class NodePlan:
    index: int
    learner_ranks: list[int] = field(default_factory=list)
    engine_members: list[int] = field(default_factory=list)
    sandbox_services: int = 0
    free_gpus: int = 0
    free_cpus: int = 0


@dataclass(frozen=True)
class Plan:
    nodes: list[NodePlan]
    learner_bytes: dict[str, float]
    """Per learner rank: weights, gradients, optimizer, working set, activations (bytes)."""
    engine_bytes: dict[str, float]
    """Per engine GPU: weights, reserve, kv_cache (bytes)."""
    kv_tokens_per_member: int
    in_flight_per_member: int
    members: int
    rollouts_per_step: int
    rollout_tokens: int
    weight_sync: str
    gpu_memory_gib: float
    gpus: bool


class UnsupportedPlacement(Rstar2Error, RuntimeError):
    """A cluster run this launcher cannot build (said before anything is written)."""


def check_cluster_run(job: ClusterJob) -> None:
    """Refuse, before anything starts or is written, a placement that cannot fit
    (``PlacementError``), a run without a sandbox (``UnsupportedPlacement``) or vLLM members
    without vLLM installed (``ImportError``)."""
    plan_run(job)
    if not job.sandbox_urls and job.cluster.sandbox.services_per_node == 0:
        raise UnsupportedPlacement(
            f"{job.name}: the Python tool has no sandbox: set cluster.sandbox.services_per_node "
            "above 0 or list running services in sandbox.urls")
    if not job.engine.members and job.engine.kind == "vllm":
        from rstar2.engines.vllm import import_vllm

        import_vllm()


def check_learner_options(name: str, model: ModelConfig, rl: RLConfig) -> None:
    """Refuse what the distributed learner does not do (``UnsupportedPlacement``), before any
    rank starts: a KL reference policy and LoRA adapters train in one process only."""
    unsupported = []
    if rl.loss.kl_coef > 0:
        unsupported.append("a KL reference (rl.loss.kl_coef > 0; the paper uses 0)")
    if model.lora is not None:
        unsupported.append("LoRA (model.lora; train all weights, or drop the cluster: section)")
    if unsupported:
        raise UnsupportedPlacement(f"{name}: the distributed learner does not support "
                                   + " or ".join(unsupported))


def weight_sync_method(job: ClusterJob) -> str:
    """The sync ``cluster.weight_sync`` names; 'auto' broadcasts to the Ray actor members the
    cluster builds ('hf' by a gloo group, 'vllm' by vLLM's own weight transfer) and to a
    listed fleet of vllm-serve servers (vLLM's weight transfer through their routes), and
    gathers through the driver for another fleet the recipe lists."""
    chosen = job.cluster.weight_sync
    if chosen != "auto":
        return chosen
    members = job.engine.members
    if not members or all(member.kind == "vllm-serve" for member in members):
        return "broadcast"
    return "gather"


def plan_run(job: ClusterJob) -> Plan:
    """The plan of ``job``; ``PlacementError`` when the placement or the memory cannot fit."""
    cluster = job.cluster
    check_learner_options(job.name, job.model, job.rl)
    arch = architecture(cluster.architecture, job.model.path)
    nodes = place(cluster)
    learner = learner_memory(job.model, job.rl, arch, cluster.learner.ranks, sharded=True)
    engine = engine_memory(cluster, arch)
    members_gpus = max(cluster.engines.gpus_per_member, 1)
    kv_tokens = int(engine["kv_cache"] * members_gpus // arch.kv_bytes_per_token(2))
    plan = Plan(
        nodes=nodes, learner_bytes=learner, engine_bytes=engine, kv_tokens_per_member=kv_tokens,
        in_flight_per_member=min(cluster.engines.max_num_seqs, kv_tokens // job.rollout_tokens),
        members=cluster.engines.members,
        rollouts_per_step=job.rl.prompts_per_step * job.rl.rollouts_per_prompt,
        rollout_tokens=job.rollout_tokens, weight_sync=weight_sync_method(job),
        gpu_memory_gib=cluster.gpu_memory_gib, gpus=cluster.gpus_per_node > 0,
    )
    check_memory(plan, cluster)
    return plan


def place(cluster: ClusterConfig) -> list[NodePlan]:
    """Learner ranks, then engine members, first-fit over the nodes (see the module docstring)."""
    sandbox_cpus = cluster.sandbox.services_per_node * cluster.sandbox.workers_per_service
    if sandbox_cpus > cluster.cpus_per_node:
        raise PlacementError(f"sandbox services need {sandbox_cpus} CPUs per node, more than "
                             f"cluster.cpus_per_node {cluster.cpus_per_node}")
    nodes = [NodePlan(i, sandbox_services=cluster.sandbox.services_per_node,
                      free_gpus=cluster.gpus_per_node, free_cpus=cluster.cpus_per_node - sandbox_cpus)
             for i in range(cluster.nodes)]
    member_gpus = cluster.engines.gpus_per_member
    if member_gpus > cluster.gpus_per_node:
        raise PlacementError(f"does not fit: an engine member needs {member_gpus} GPUs on one "
                             f"node (its tensor_parallel_size); nodes have {cluster.gpus_per_node}")
    rank_gpus = 1 if cluster.gpus_per_node else 0
    for rank in range(cluster.learner.ranks):
        first_fit(nodes, rank_gpus, cluster.learner.cpus_per_rank, cluster,
                  f"learner rank {rank}").learner_ranks.append(rank)
    for member in range(cluster.engines.members):
        first_fit(nodes, member_gpus, cluster.engines.cpus_per_member, cluster,
                  f"engine member {member}").engine_members.append(member)
    return nodes


def first_fit(nodes: list[NodePlan], gpus: int, cpus: int, cluster: ClusterConfig, what: str
              ) -> NodePlan:
    """The first node with ``gpus`` and ``cpus`` left, which are taken from it."""
    for node in nodes:
        if node.free_gpus >= gpus and node.free_cpus >= cpus:
            node.free_gpus -= gpus
            node.free_cpus -= cpus
            return node
    need_gpus = cluster.learner.ranks * (1 if cluster.gpus_per_node else 0)
    need_gpus += cluster.engines.members * cluster.engines.gpus_per_member
    raise PlacementError(f"placement does not fit: no node has {gpus} GPU(s) and {cpus} CPU(s) left for "
            f"{what}; {cluster.learner.ranks} learner ranks and {cluster.engines.members} engine "
            f"members need {need_gpus} GPUs of {cluster.nodes} nodes x "
                         f"{cluster.gpus_per_node}")


def learner_memory(model: ModelConfig, rl: RLConfig, arch: Architecture, ranks: int,
                   sharded: bool) -> dict[str, float]:
    """Bytes per learner rank (see the module docstring); an unsharded policy (one process,
    no cluster) holds its weights whole, so it has no FSDP working set."""
    stored = DTYPE_BYTES[model.dtype]
    compute = min(stored, DTYPE_BYTES[model.compute_dtype])
    tokens = rl.micro_batch_tokens
    kv_width = arch.kv_heads * arch.head_dim
    layer_internals = tokens * (4 * arch.hidden + 2 * kv_width + 4 * arch.intermediate) * compute
    if model.gradient_checkpointing:
        activations = arch.layers * tokens * arch.hidden * compute + layer_internals
    else:
        activations = arch.layers * layer_internals
    working_set = {"working set": (arch.embedding_parameters + 2 * 2 * arch.layer_parameters) * compute}
    return {
        "weights": arch.parameters * stored / ranks,
        "gradients": arch.parameters * stored / ranks,
        "optimizer": 2 * arch.parameters * stored / ranks,
        **(working_set if sharded else {}),
        "activations": activations,
        "logits": tokens * arch.vocab * (compute + 3 * 4),
    }


def engine_memory(cluster: ClusterConfig, arch: Architecture) -> dict[str, float]:
    """Bytes per engine GPU: bf16 weights split over the member's GPUs, reserve, KV cache."""
    engines = cluster.engines
    weights = arch.parameters * 2 / max(engines.gpus_per_member, 1)
    budget = cluster.gpu_memory_gib * GIB * engines.gpu_memory_utilization
    reserve = engines.reserve_gib * GIB
    return {"weights": weights, "reserve": reserve, "kv_cache": max(budget - weights - reserve, 0.0)}


def check_memory(plan: Plan, cluster: ClusterConfig) -> None:
    """Refuse a learner rank or an engine that cannot fit its GPU (GPU clusters only)."""
    if not plan.gpus:
        return
    learner = sum(plan.learner_bytes.values()) / GIB
    if learner > cluster.gpu_memory_gib:
        raise PlacementError(
            f"does not fit: a learner rank needs {learner:.1f} GiB of a {cluster.gpu_memory_gib:g} "
            f"GiB GPU; raise cluster.learner.ranks (now {cluster.learner.ranks}) or lower "
            "rl.micro_batch_tokens")
    if plan.kv_tokens_per_member < plan.rollout_tokens:
        raise PlacementError(
            f"does not fit: an engine member's KV cache holds {plan.kv_tokens_per_member} tokens, "
            f"fewer than one rollout's {plan.rollout_tokens}; raise "
            "cluster.engines.gpus_per_member or gpu_memory_utilization")


def render(plan: Plan) -> str:
    """The plan as the lines ``rstar2 train --plan`` prints."""
    unit = "GPU" if plan.gpus else "rank (host memory)"
    lines = ["placement:"]
    for node in plan.nodes:
        ranks = span(node.learner_ranks)
        members = span(node.engine_members)
        lines.append(f"  node {node.index}: learner ranks {ranks or '-'}, engine members "
                     f"{members or '-'}, sandbox services {node.sandbox_services}")
    learner_total = sum(plan.learner_bytes.values())
    lines.append(f"learner memory per {unit}: {gib(learner_total)} GiB "
                 + "(" + ", ".join(f"{k} {gib(v)}" for k, v in plan.learner_bytes.items()) + ")")
    if plan.gpus:
        lines.append("engine memory per GPU: " + ", ".join(
            f"{k} {gib(v)}" for k, v in plan.engine_bytes.items()) + f" GiB of {plan.gpu_memory_gib:g}")
        in_flight = plan.members * plan.in_flight_per_member
        lines.append(f"KV capacity per member: {plan.kv_tokens_per_member} tokens "
                     f"= {plan.kv_tokens_per_member // plan.rollout_tokens} rollouts of "
                     f"{plan.rollout_tokens} tokens")
        lines.append(f"rollouts in flight: {in_flight} ({plan.members} members x "
                     f"{plan.in_flight_per_member}) of {plan.rollouts_per_step} per step, "
                     f"at least {math.ceil(plan.rollouts_per_step / max(in_flight, 1))} waves")
    lines.append(f"weight sync: {plan.weight_sync}")
    return "\n".join(lines)


def span(values: list[int]) -> str:
    """[0, 1, 2, 5] as '0-2, 5'."""
    parts, start = [], None
    for i, value in enumerate(values):
        if start is None:
            start = value
        if i + 1 == len(values) or values[i + 1] != value + 1:
            parts.append(str(start) if start == value else f"{start}-{value}")
            start = None
    return ", ".join(parts)


def gib(value: float) -> str:
    return f"{value / GIB:.1f}"
