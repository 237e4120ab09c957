"""``rstar2 train RECIPE`` for a recipe with a ``cluster:`` section: the run on Ray.

    final_dir = train_on_cluster(config, resume=False)

The plan is checked first (``rstar2.cluster.plan``: a placement that cannot fit is refused
before anything starts). Then this process joins the Ray cluster ``RAY_ADDRESS`` names (as
``ray job submit -- rstar2 train ...`` sets it), or starts a local one, and becomes the driver:
it owns the step loop (``Trainer``), the sampler and the grader; the policy lives in the
``DistributedLearner``'s ranks and the rollouts run on a fleet of ``cluster.engines.members``
Ray actor members (``rstar2.engines.fleet``) of ``rollout.engine``'s kind ('hf', or 'vllm'
with ``gpus_per_member`` GPUs on one node), unless ``rollout.members`` lists the fleet itself
(e.g. external vLLM/SGLang servers). After every update the weights reach every member by the
sync ``rstar2.cluster.weight_sync`` picks for the placement and the members' kind.
Sandbox services: ``rollout.sandbox_urls`` when given, else ``cluster.sandbox.services_per_node``
on every node of the cluster (``rstar2.cluster.sandboxes``), started first (they are pinned to
their nodes, while the learner's and the fleet's placement can go anywhere) and stopped last.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from rich.console import Console

from rstar2.cluster.learner import DistributedLearner
from rstar2.cluster.plan import check_cluster_run
from rstar2.cluster.sandboxes import NodeSandboxes
from rstar2.engines.base import TrainableEngine
from rstar2.engines.factory import MemberSpec, open_fleet
from rstar2.engines.loading import DEFAULT_MODEL
from rstar2.reward import Grader
from rstar2.rl.config import RunConfig
from rstar2.rl.sampler import Sampler
from rstar2.rl.trainer import Trainer
from rstar2.sandbox import SandboxClient, SandboxUnavailable


def train_on_cluster(config: RunConfig, tokenizer, problems, resume: bool, console: Console,
                     card=None) -> Path:
    """The run ``config`` describes, placed on Ray; returns the exported final model directory
    (with ``card``, how the model was trained to be prompted)."""
    check_cluster_run(config)
    config = with_absolute_paths(config)
    connect_ray(config, console)
    with contextlib.ExitStack() as stack:
        services = None if config.rollout.sandbox_urls else node_sandboxes(config, console)
        if services is not None:
            stack.callback(services.close)
        # a member the fleet replaces gets the current weights from the learner built next
        engine = cluster_engine(config, tokenizer, on_replaced=lambda m: learner.catch_up(m))
        stack.callback(lambda: asyncio.run(engine.close()))
        learner = DistributedLearner(config, engine, tokenizer.pad_token_id)
        stack.callback(learner.close)
        grader = stack.enter_context(Grader())
        urls = services.urls if services is not None else list(config.rollout.sandbox_urls)
        try:
            asyncio.run(run(config, learner, engine, tokenizer, urls, grader, problems, resume,
                            console))
        except SandboxUnavailable:
            if services is not None:
                services.check()  # names the node whose services are gone, if that is why
            raise
        return learner.export(tokenizer, config.run_dir / "final", card)


def with_absolute_paths(config: RunConfig) -> RunConfig:
    """``config`` with the paths the ranks and members open made absolute from this process's
    working directory: Ray starts workers on other nodes (and under ``ray job submit``) in other
    directories. The paths must still lie on storage every node sees; a model or checkpoint
    path that is not here (or 'default') is left as it is."""
    def absolute(path: str | None) -> str | None:
        if path is None or path == DEFAULT_MODEL or not Path(path).expanduser().exists():
            return path
        return str(Path(path).expanduser().resolve())

    model = config.model.model_copy(update={"path": absolute(config.model.path)})
    init = config.rl.init.model_copy(update={"checkpoint": absolute(config.rl.init.checkpoint)})
    runs_dir = str(Path(config.runs_dir).expanduser().resolve())
    return config.model_copy(update={"runs_dir": runs_dir, "model": model,
                                     "rl": config.rl.model_copy(update={"init": init})})


def node_sandboxes(config: RunConfig, console: Console) -> NodeSandboxes:
    """``cluster.sandbox.services_per_node`` services on every node of the Ray cluster."""
    with console.status("starting sandbox services on every node"):
        services = NodeSandboxes(config.cluster.sandbox, timeout_s=config.rollout.tool_timeout_s)
    console.print(f"sandbox: {len(services.urls)} services on {len(services.nodes)} nodes")
    return services


def connect_ray(config: RunConfig, console: Console) -> None:
    """Join ``RAY_ADDRESS``'s cluster, or start a local one with the CPUs and GPUs of one
    ``cluster`` node (logical CPUs: Ray counts reservations, the cores are shared)."""
    import ray

    if ray.is_initialized():
        return
    address = os.environ.get("RAY_ADDRESS")
    local = {} if address else {"num_cpus": config.cluster.cpus_per_node,
                                "num_gpus": config.cluster.gpus_per_node}
    ray.init(address=address, include_dashboard=False, log_to_driver=False, **local)
    console.print(f"ray: {'joined ' + address if address else 'started a local cluster'}, "
                  f"{ray.cluster_resources().get('CPU', 0):g} CPUs, "
                  f"{ray.cluster_resources().get('GPU', 0):g} GPUs")


def cluster_engine(config: RunConfig, tokenizer, on_replaced=None) -> TrainableEngine:
    """``rollout.members`` when listed, else ``cluster.engines.members`` Ray actor members of
    ``rollout.engine``'s kind: 'hf', or 'vllm' with ``gpus_per_member`` GPUs on one node.
    ``on_replaced``: the fleet's (how a replaced member gets the current weights)."""
    members = config.rollout.members or tuple(
        built_member(config) for _ in range(config.cluster.engines.members))
    return open_fleet(members, config.rollout.scheduler, model=config.model.path,
                      dtype=config.rollout.engine_dtype or config.model.dtype, seed=config.seed,
                      tokenizer=tokenizer, on_replaced=on_replaced)


def built_member(config: RunConfig) -> MemberSpec:
    """One engine member the cluster builds, from ``cluster.engines``."""
    engines = config.cluster.engines
    if config.rollout.engine == "vllm":
        longest = config.data.max_prompt_tokens + config.rollout.max_response_tokens
        return MemberSpec(kind="vllm", ray=True, gpus=engines.gpus_per_member,
                          threads=engines.cpus_per_member, max_batch_size=engines.max_num_seqs,
                          engine_args={"gpu_memory_utilization": engines.gpu_memory_utilization,
                                       "max_model_len": longest})
    return MemberSpec(kind="hf", ray=True, threads=engines.cpus_per_member,
                      max_batch_size=config.rl.prompts_per_step * config.rl.rollouts_per_prompt)


async def run(config, learner, engine, tokenizer, urls, grader, problems, resume, console) -> None:
    async with SandboxClient(urls) as sandbox:
        sampler = Sampler(engine, tokenizer, sandbox, grader, config.rollout,
                          config.rl.rollouts_per_prompt)
        trainer = Trainer(config, learner, sampler, problems, console)
        trainer.restore(resume)
        if trainer.completed_steps:
            console.print(f"resuming {config.run_dir} after step {trainer.completed_steps}")
        await trainer.run()
