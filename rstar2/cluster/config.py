"""The ``cluster:`` section of a run config: who runs where.

    cluster:
      nodes: 8
      gpus_per_node: 8
      architecture: qwen3-14b
      learner: {ranks: 32}
      engines: {members: 16, gpus_per_member: 2}
      sandbox: {services_per_node: 1, workers_per_service: 16}

Learner ranks hold an FSDP2-sharded policy (one GPU each, or ``cpus_per_rank`` cores on a CPU
cluster); engine members are generators with ``gpus_per_member`` GPUs each (vLLM's tensor
parallel size), never split across nodes; every node runs ``services_per_node`` sandbox
services. ``rstar2.cluster.plan`` checks that this fits and estimates memory; this module
only describes it and does not import Ray.

``ClusterJob`` is what the cluster knows of the run besides its own section: the sections of
the parts it places (the policy, the algorithm's batch sizes, the engine), cut from the run
config once by ``rstar2.run.settings``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from rstar2.fleet.rollout_engine import RolloutEngineConfig
from rstar2.rl.config import RLConfig
from rstar2.section import Section
from rstar2.training.config import ModelConfig


class LearnerPlacement(Section):
    ranks: int = Field(1, ge=1)
    """Processes of the FSDP2 learner; the policy, its gradients and AdamW's moments are
    sharded over all of them (one GPU each on a GPU cluster)."""
    cpus_per_rank: int = Field(1, ge=1)
    """CPU cores reserved for each rank (its data loading, or its compute on a CPU cluster)."""
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    """torch.distributed backend of the learner's process group: 'auto' is NCCL on GPUs and
    gloo on CPUs."""


class EnginePlacement(Section):
    members: int = Field(1, ge=1)
    """Generation engines of the fleet; each receives the weights after every update."""
    gpus_per_member: int = Field(1, ge=0)
    """GPUs of one member (vLLM ``tensor_parallel_size``), all on one node; 0 on a CPU cluster."""
    cpus_per_member: int = Field(1, ge=1)
    """CPU cores reserved for each member."""
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    """Share of each GPU a member may use for weights, activations and KV cache (vLLM's
    ``gpu_memory_utilization``)."""
    max_num_seqs: int = Field(256, ge=1)
    """Most sequences a member decodes at once (vLLM's ``max_num_seqs``)."""
    reserve_gib: float = Field(2.0, ge=0)
    """Memory per GPU a member keeps for its runtime (CUDA context, graphs, activations of a
    scheduler step) besides weights and KV cache."""


class SandboxPlacement(Section):
    services_per_node: int = Field(1, ge=0)
    """Sandbox services (``rstar2 sandbox serve``) started on every node."""
    workers_per_service: int = Field(4, ge=1)
    """Worker processes of each service; each takes a CPU core."""


class ClusterConfig(Section):
    nodes: int = Field(1, ge=1)
    """Machines in the Ray cluster."""
    gpus_per_node: int = Field(0, ge=0)
    """GPUs of each machine; 0 is a CPU cluster (gloo learner, transformers engines)."""
    cpus_per_node: int = Field(16, ge=1)
    """CPU cores of each machine, shared by ranks, members and sandbox workers."""
    gpu_memory_gib: float = Field(80.0, gt=0)
    """Memory of one GPU, which the plan checks every learner rank and member against."""
    architecture: str | None = None
    """The policy's architecture for the memory plan: a name from
    ``rstar2.cluster.architectures.KNOWN`` (e.g. 'qwen3-14b'), or null to read
    ``model.path``'s config.json (nothing is downloaded)."""
    weight_sync: Literal["auto", "broadcast", "gather"] = "auto"
    """How new weights reach the engines (``rstar2.cluster.weight_sync``): 'broadcast',
    straight from learner rank 0 to the members ('hf' Ray actors: bucketed over a gloo group;
    vLLM members, in Ray actors or vllm-serve servers: vLLM's own NCCL weight transfer);
    'gather', rank 0's full state dict through the driver to the engine's ``update_weights``
    (shared memory to an in-process vLLM's workers, Ray's object store to actors, a reload
    from disk for rstar2 serve-model); 'auto' broadcasts to members the cluster builds and to
    listed vllm-serve servers, and gathers otherwise."""
    learner: LearnerPlacement = LearnerPlacement()
    """The FSDP2 learner."""
    engines: EnginePlacement = EnginePlacement()
    """The generation fleet."""
    sandbox: SandboxPlacement = SandboxPlacement()
    """The tool sandboxes."""


@dataclass(frozen=True)
class ClusterJob:
    """What the Ray placement, its plan and its learner need to know of a run."""

    name: str
    """The run's name, for messages."""
    seed: int
    """Seeds the engine members' sampling (member i gets seed + i)."""
    cluster: ClusterConfig
    """The ``cluster:`` section."""
    model: ModelConfig
    """The policy the ranks load and the members copy."""
    rl: RLConfig
    """Batch sizes (the rollouts in flight), the loss (no KL on the sharded learner), init."""
    engine: RolloutEngineConfig
    """What generates the rollouts: the kind of the members the cluster builds, or the
    members the recipe lists itself."""
    rollout_tokens: int
    """A rollout's longest length, prompt plus response budget (a member's context)."""
    sandbox_urls: tuple[str, ...]
    """Sandbox services the recipe lists; empty starts ``cluster.sandbox`` on every node."""
    tool_timeout_s: float
    """The tool calls' wall-clock limit, the deadline of the services started here."""
