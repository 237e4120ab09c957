"""Each component's own settings, cut from the run config once.

    trainer = TrainerSettings    <- trainer_settings(config)
    learner = LearnerSettings    <- learner_settings(config)  (its UpdateSettings too)
    cluster = ClusterJob         <- cluster_job(config)

The components below this package (``rstar2.rl``, ``rstar2.cluster``) never see the whole
``RunConfig``: each is handed what it uses, so a section can change without touching the
components that do not read it, and the learner's update settings are built in one place for
the single-process learner and every rank of the distributed one.
"""

from __future__ import annotations

from rstar2.cluster.config import ClusterJob
from rstar2.cluster.plan import PlacementError
from rstar2.rl.learner import LearnerSettings
from rstar2.rl.trainer import TrainerSettings
from rstar2.rl.update import UpdateSettings
from rstar2.run.config import RunConfig


def trainer_settings(config: RunConfig) -> TrainerSettings:
    """The step loop's settings; the whole config goes along for the metric sinks."""
    return TrainerSettings(run_dir=config.run_dir, seed=config.seed, rl=config.rl,
                           shuffle=config.data.shuffle,
                           checkpoint=config.checkpoint, logging=config.logging,
                           recipe=config.model_dump())


def learner_settings(config: RunConfig) -> LearnerSettings:
    """The learner's settings, its ``UpdateSettings`` with them."""
    update = UpdateSettings(
        loss=config.rl.loss, temperature=config.rollout.temperature,
        micro_batch_tokens=config.rl.micro_batch_tokens,
        max_grad_norm=config.rl.optimizer.max_grad_norm,
        compute_dtype=config.model.compute_dtype)
    return LearnerSettings(update=update, optimizer=config.rl.optimizer, init=config.rl.init,
                           updates_per_step=config.rl.updates_per_step,
                           total_updates=config.rl.steps * config.rl.updates_per_step,
                           checkpoints=(config.run_dir / "checkpoints").expanduser().resolve(),
                           keep_last=config.checkpoint.keep_last)


def cluster_job(config: RunConfig) -> ClusterJob:
    """What the Ray placement needs to know of the run (``PlacementError`` without a
    ``cluster:`` section)."""
    if config.cluster is None:
        raise PlacementError("the recipe has no cluster: section, so it trains in this process")
    return ClusterJob(name=config.name, seed=config.seed, cluster=config.cluster,
                      model=config.model, rl=config.rl, engine=config.engine,
                      rollout_tokens=config.data.max_prompt_tokens + config.rollout.max_response_tokens,
                      sandbox_urls=config.sandbox.urls, tool_timeout_s=config.rollout.tool_timeout_s)
