"""The Ray placement of a run (``rstar2 train RECIPE`` for a recipe with a ``cluster:`` section).

    placement = RayPlacement(job, console)      # job: ClusterJob (rstar2.run.settings)
    await run_training(config, placement)       # rstar2.run.training: the one wiring of a run

It meets ``rstar2.run.placement.Placement``: the plan is checked first (``check``:
``rstar2.cluster.plan``, a placement that cannot fit is refused before anything starts). Then
this process joins the Ray cluster ``RAY_ADDRESS`` names (as ``ray job submit -- rstar2 train
...`` sets it), or starts a local one, and stays the driver: it owns the step loop, the sampler
and the grader, while the policy lives in the ``DistributedLearner``'s ranks and the rollouts
run on a fleet of ``cluster.engines.members`` Ray actor members (``rstar2.fleet``) of
``engine.kind`` ('hf', or 'vllm' with ``gpus_per_member`` GPUs on one node), unless
``engine.members`` lists the fleet itself (e.g. external vLLM/SGLang servers). After every
update the weights reach every member by the sync ``rstar2.cluster.weight_sync`` picks for the
placement and the members' kind. Sandbox services: ``sandbox.urls`` when given, else
``cluster.sandbox.services_per_node`` on every node (``rstar2.cluster.sandboxes``), opened
first (they are pinned to their nodes, while the learner's and the fleet's placement can go
anywhere) and so closed last.

Ray starts workers on other nodes (and under ``ray job submit``) in other directories, so the
paths the ranks and members open are made absolute from this process's working directory
(``with_absolute_paths``); they must still lie on storage every node sees.
"""

from __future__ import annotations

import dataclasses
import os
from contextlib import AsyncExitStack
from pathlib import Path

from rich.console import Console

from rstar2.agent.card import ModelCard
from rstar2.cluster.config import ClusterJob
from rstar2.cluster.learner import DistributedLearner
from rstar2.cluster.plan import check_cluster_run
from rstar2.cluster.sandboxes import NodeSandboxes
from rstar2.engines.base import TrainableEngine
from rstar2.fleet.rollout_engine import MemberSpec, open_rollout_engine
from rstar2.models.loading import DEFAULT_MODEL
from rstar2.rl.learner import LearnerSettings


class RayPlacement:
    """A run's parts placed on a Ray cluster; see the module docstring."""

    def __init__(self, job: ClusterJob, console: Console | None = None):
        self.job = with_absolute_paths(job)
        self.console = console or Console()
        self.services: NodeSandboxes | None = None
        self.learner: DistributedLearner | None = None

    def check(self) -> None:
        check_cluster_run(self.job)

    def open_sandboxes(self, stack: AsyncExitStack) -> list[str]:
        """``sandbox.urls`` when listed, else services on every node of the cluster."""
        self.connect()
        if self.job.sandbox_urls:
            return list(self.job.sandbox_urls)
        with self.console.status("starting sandbox services on every node"):
            self.services = NodeSandboxes(self.job.cluster.sandbox, timeout_s=self.job.tool_timeout_s)
        stack.callback(self.services.close)
        self.console.print(f"sandbox: {len(self.services.urls)} services on "
                           f"{len(self.services.nodes)} nodes")
        return self.services.urls

    def check_sandboxes(self) -> None:
        """Name the node whose services are gone, if that is why a call found none."""
        if self.services is not None:
            self.services.check()

    def open_engine(self, tokenizer, stack: AsyncExitStack) -> TrainableEngine:
        """``engine.members`` when listed, else ``cluster.engines.members`` Ray actor members
        of ``engine.kind``: 'hf', or 'vllm' with ``gpus_per_member`` GPUs on one node."""
        self.connect()
        job = self.job
        members = job.engine.members or tuple(
            built_member(job) for _ in range(job.cluster.engines.members))
        engine = open_rollout_engine(job.engine, members=members, model=job.model.path,
                                     model_dtype=job.model.dtype, seed=job.seed,
                                     tokenizer=tokenizer, on_replaced=self.catch_up)
        stack.push_async_callback(engine.close)
        return engine

    async def catch_up(self, member) -> None:
        """The fleet's ``on_replaced``: the learner (built after the engine) sends a member the
        fleet has just replaced the current weights."""
        if self.learner is not None:
            await self.learner.catch_up(member)

    def open_learner(self, engine: TrainableEngine, settings: LearnerSettings,
                     stack: AsyncExitStack) -> DistributedLearner:
        """The policy sharded over ``cluster.learner.ranks`` Ray actors."""
        self.connect()
        learner = self.learner = DistributedLearner(self.job, settings, engine)
        stack.callback(learner.close)
        return learner

    def export(self, learner: DistributedLearner, tokenizer, target: Path, card: ModelCard) -> Path:
        """The policy gathered from the ranks, as a plain model directory with its card."""
        return learner.export(tokenizer, target, card)

    def connect(self) -> None:
        """Join ``RAY_ADDRESS``'s cluster, or start a local one with the CPUs and GPUs of one
        ``cluster`` node (logical CPUs: Ray counts reservations, the cores are shared)."""
        import ray

        if ray.is_initialized():
            return
        address = os.environ.get("RAY_ADDRESS")
        cluster = self.job.cluster
        local = {} if address else {"num_cpus": cluster.cpus_per_node, "num_gpus": cluster.gpus_per_node}
        ray.init(address=address, include_dashboard=False, log_to_driver=False, **local)
        self.console.print(f"ray: {'joined ' + address if address else 'started a local cluster'}, "
                           f"{ray.cluster_resources().get('CPU', 0):g} CPUs, "
                           f"{ray.cluster_resources().get('GPU', 0):g} GPUs")


def with_absolute_paths(job: ClusterJob) -> ClusterJob:
    """``job`` with the paths the ranks and members open made absolute; a model or checkpoint
    path that is not here (or 'default') is left as it is, for its loader to judge."""
    def absolute(path: str | None) -> str | None:
        if path is None or path == DEFAULT_MODEL or not Path(path).expanduser().exists():
            return path
        return str(Path(path).expanduser().resolve())

    model = job.model.model_copy(update={"path": absolute(job.model.path)})
    init = job.rl.init.model_copy(update={"checkpoint": absolute(job.rl.init.checkpoint)})
    return dataclasses.replace(job, model=model, rl=job.rl.model_copy(update={"init": init}))


def built_member(job: ClusterJob) -> MemberSpec:
    """One engine member the cluster builds, from ``cluster.engines``."""
    engines = job.cluster.engines
    if job.engine.kind == "vllm":
        return MemberSpec(kind="vllm", ray=True, gpus=engines.gpus_per_member,
                          threads=engines.cpus_per_member, max_batch_size=engines.max_num_seqs,
                          engine_args={"gpu_memory_utilization": engines.gpu_memory_utilization,
                                       "max_model_len": job.rollout_tokens})
    return MemberSpec(kind="hf", ray=True, threads=engines.cpus_per_member,
                      max_batch_size=job.rl.prompts_per_step * job.rl.rollouts_per_prompt)
