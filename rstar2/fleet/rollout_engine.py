"""The engine a trainer samples from: one engine, or a fleet of them behind one scheduler.

A run's ``engine:`` section is ``RolloutEngineConfig`` (what generates its rollouts), and
``open_rollout_engine`` turns it into the one engine a trainer samples from. Recipes used to
call the in-process engine ``embedded``; the recipes now say ``hf``, and ``embedded`` is still
read as ``hf`` with a ``FutureWarning`` so older recipes keep working. An ``openai`` server
keeps its own weights, so a recipe naming it is refused with that reason.

A rollout fleet (``rstar2.fleet``) is built here too (``open_fleet``): its members are
``MemberSpec``s -- 'hf' and 'vllm' engines in this process or in Ray actors (a 'vllm' actor
placed with its GPUs on one node), 'openai' servers (``rstar2 serve-model`` takes weights at
``/update_weights_from_disk``) and 'vllm-serve' servers (vLLM's weight-transfer routes) --
behind one scheduler.

This module does not import torch (the run config reads its section from it).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rstar2.engines.base import TrainableEngine
from rstar2.engines.registry import (
    ENGINE_KINDS,
    TRAINABLE_ENGINE_KINDS,
    EngineKind,
    EngineSpec,
    model_location,
    open_trainable_engine,
)
from rstar2.fleet.members import Member
from rstar2.fleet.scheduler import PolicyName
from rstar2.models.device import DeviceSetting
from rstar2.section import Section


def hf_settings(spec: MemberSpec, *, model: str, dtype: str, seed: int) -> dict[str, Any]:
    return {"model": model, "dtype": dtype, "seed": seed, "max_batch_size": spec.max_batch_size,
            "kv_budget_tokens": spec.kv_budget_tokens}


def vllm_settings(spec: MemberSpec, *, model: str, dtype: str, seed: int) -> dict[str, Any]:
    from rstar2.engines.vllm import import_vllm

    import_vllm()  # a missing extra says so here, not as a dead actor
    return {"model": model_location(model), "dtype": dtype, "seed": seed,
            "max_num_seqs": spec.max_batch_size, **spec.engine_args}


def build_hf(spec: MemberSpec, name: str, settings: dict[str, Any], tokenizer) -> Member:
    if spec.ray:
        from rstar2.fleet.ray_member import RayMember

        start_ray()
        return RayMember(settings, name=name, threads=spec.threads, num_cpus=spec.threads)
    from rstar2.engines.hf import HFEngine, HFEngineConfig
    from rstar2.fleet.members import LocalMember

    return LocalMember(HFEngine(HFEngineConfig(**settings), tokenizer=tokenizer), name)


def build_vllm(spec: MemberSpec, name: str, settings: dict[str, Any], tokenizer) -> Member:
    if spec.ray:
        from rstar2.fleet.vllm_member import VLLMRayMember

        start_ray()
        return VLLMRayMember(settings, name=name, gpus=spec.gpus, cpus=spec.threads)
    from rstar2.engines.vllm import VLLMEngine
    from rstar2.fleet.members import LocalMember

    return LocalMember(VLLMEngine(**settings), name)


def build_openai(spec: MemberSpec, name: str, settings: dict[str, Any], tokenizer) -> Member:
    from rstar2.fleet.members import HTTPMember

    return HTTPMember(spec.base_url, name=name, weights_dir=spec.weights_dir)


def build_vllm_serve(spec: MemberSpec, name: str, settings: dict[str, Any], tokenizer) -> Member:
    from rstar2.fleet.vllm_server import VLLMServerMember

    return VLLMServerMember(spec.base_url, name=name)


def start_ray() -> None:
    """Join the cluster ``ray.init`` finds, else start a local one (once)."""
    import ray

    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)


@dataclass(frozen=True)
class MemberKindInfo:
    """One kind of fleet member: what it is and how it is built. An engine kind (not a
    ``server``) loads the model itself, in this process or a Ray actor, with its ``settings``;
    a server kind is reached at ``base_url``."""

    help: str
    build: Callable[..., Member]
    settings: Callable[..., dict[str, Any]] | None = None

    @property
    def server(self) -> bool:
        return self.settings is None


MEMBERS: dict[str, MemberKindInfo] = {
    "hf": MemberKindInfo("an HFEngine with its own copy of the weights", build_hf, hf_settings),
    "openai": MemberKindInfo(
        "a server at base_url that takes weights at /update_weights_from_disk (rstar2 "
        "serve-model) and reports its load at /metrics under vLLM's names", build_openai),
    "vllm": MemberKindInfo("a VLLMEngine (GPU, the [gpu] extra)", build_vllm, vllm_settings),
    "vllm-serve": MemberKindInfo(
        "a vllm serve server at base_url (started with --weight-transfer-config "
        "'{\"backend\": \"nccl\"}') that takes weights through vLLM's weight-transfer routes, "
        "over NCCL from a CUDA learner", build_vllm_serve),
}
"""Every fleet member kind; ``MemberSpec.kind``'s vocabulary and help are read from it."""
MemberKindName = Literal[tuple(MEMBERS)]
MEMBER_HELP = "; ".join(f"'{kind}': {info.help}" for kind, info in MEMBERS.items()) + "."


class MemberSpec(BaseModel):
    """One member of a rollout fleet."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: MemberKindName = Field("hf", description=MEMBER_HELP)
    ray: bool = Field(False, description="'hf' and 'vllm': run the engine in a Ray actor (on "
                      "the cluster ray.init finds, else a local one); a dead actor is replaced.")
    gpus: int = Field(1, ge=0, description="'vllm' in Ray: GPUs of the member, all on one "
                      "node (its tensor_parallel_size); 0 on a CPU cluster.")
    engine_args: dict[str, Any] = Field(
        default_factory=dict, description="'vllm': more vllm.AsyncEngineArgs, e.g. "
        "{gpu_memory_utilization: 0.9, max_model_len: 20480}.")
    base_url: str | None = Field(None, description="'openai': the server's URL.")
    weights_dir: str | None = Field(None, description="'openai': where weights are written for "
                                    "the server to load: a directory it reads and allows "
                                    "(serve-model --weights-dir); the token is read from "
                                    "RSTAR2_WEIGHTS_TOKEN. None: the system's temporary "
                                    "directory.")
    kv_budget_tokens: int | None = Field(None, ge=1, description="'hf': KV tokens its running "
                                         "requests may hold (its capacity as the scheduler "
                                         "sees it); None: max_batch_size x the context.")
    max_batch_size: int = Field(32, ge=1, description="'hf': sequences decoded together; "
                                "'vllm': its max_num_seqs.")
    threads: int = Field(1, ge=1, description="torch threads ('hf'; CPU cores of a Ray "
                         "member). In-process members share this process's pool, so it is "
                         "set for the whole process.")

    @model_validator(mode="after")
    def placed(self) -> MemberSpec:
        server = MEMBERS[self.kind].server
        if server and not self.base_url:
            raise ValueError(f"an {self.kind!r} member needs base_url")
        if server and self.ray:
            engines = " and ".join(f"'{k}'" for k, info in MEMBERS.items() if not info.server)
            raise ValueError(f"only {engines} members run in Ray actors")
        return self


class RolloutEngineConfig(Section):
    """A run's ``engine:`` section: what generates its rollouts."""

    kind: EngineKind = "hf"
    """What generates rollouts, named as everywhere: 'hf', the trainer's transformers model in
    this process (CPU or one GPU, colocated unless ``dtype`` is set), or 'vllm', vLLM that
    receives the weights after each step. 'openai' servers keep their own weights and cannot be
    trained. The old name 'embedded' is read as 'hf' with a warning."""
    dtype: Literal["float32", "bfloat16", "auto"] | None = None
    """'hf': null samples from the trainer's model itself (colocated, one copy of the weights);
    a dtype gives the engine its own copy in that dtype, loaded with the new weights after every
    update, and the trainer's own log-probs are then the old ones, the engine's weighting each
    token. bfloat16 samples faster than float32 on bfloat16-capable CPUs (docs/benchmarks.md). 'auto' decides at start, as
    ``model.compute_dtype`` does, for a decode step's shapes. Not with LoRA. Fleet members and
    'vllm' load their copy in this dtype (null: ``model.dtype``)."""
    device: DeviceSetting | None = None
    """'hf' with its own copy (``dtype`` set): the device of that copy; null means the
    policy's (``model.device``). A colocated engine always runs on the policy's."""
    members: tuple[MemberSpec, ...] = ()
    """Engines of a rollout fleet (``docs/fleet.md``): empty samples from the one engine
    ``kind`` names; otherwise every rollout runs on one of these members (each with its own
    copy of the weights, pushed after every update), chosen by ``scheduler``. Each member's
    fields (its ``kind``, ``ray``, ``base_url`` ...) are ``engine.members[].*``, below."""
    scheduler: PolicyName = "adaptive"
    """How a fleet hands out trajectories (each normally stays on one member for all its
    turns): 'adaptive' (the default: admitted by the members' predicted peak KV, placed by
    their measured speed, moved off a slow member between two turns; docs/fleet.md),
    'static' (dealt evenly up front), 'least_loaded' (to the member with the fewest in
    flight), 'kv_aware' (admitted when a member's free KV fits prompt + response budget, held
    for its whole life: the paper's §3.2 read literally)."""

    @field_validator("kind", mode="before")
    @classmethod
    def trainable_kind(cls, value: Any) -> Any:
        """One engine vocabulary: 'embedded' is the old recipes' name for 'hf'; 'openai' is
        refused here, where the recipe is read, rather than after the model has loaded."""
        if value == "embedded":
            warnings.warn("engine.kind: 'embedded' is now called 'hf' (the name eval and chat "
                          "use); please update the recipe", FutureWarning, stacklevel=2)
            return "hf"
        if value in ENGINE_KINDS and value not in TRAINABLE_ENGINE_KINDS:
            raise ValueError(f"engine {value!r} cannot be trained: a server keeps its own "
                             f"weights; use one of {', '.join(TRAINABLE_ENGINE_KINDS)}")
        return value


def open_rollout_engine(config: RolloutEngineConfig, *, model: str, model_dtype: str, seed: int,
                        tokenizer, members: Sequence[MemberSpec] | None = None,
                        shared_model=None, device: str = "auto", max_batch_size: int = 32,
                        on_replaced=None) -> TrainableEngine:
    """The engine a trainer samples from: a fleet over ``members`` (``config.members`` unless
    given: a placement may build its own), scheduled by ``config.scheduler``, or else the one
    engine ``config.kind`` names on ``device``, sampling from ``shared_model`` itself when one
    is given (colocated). Engines with their own copy load ``model`` in ``config.dtype``, by
    default ``model_dtype``. ``on_replaced``: the fleet's (``open_fleet``)."""
    members = config.members if members is None else members
    dtype = config.dtype or model_dtype
    if members:
        return open_fleet(members, config.scheduler, model=model, dtype=dtype, seed=seed,
                          tokenizer=tokenizer, on_replaced=on_replaced)
    spec = EngineSpec(kind=config.kind, model=model, dtype=dtype, seed=seed, device=device,
                      max_batch_size=max_batch_size)
    return open_trainable_engine(spec, model=shared_model, tokenizer=tokenizer)


def open_fleet(members: Sequence[MemberSpec], policy: str, *, model: str, dtype: str,
               seed: int, tokenizer, on_replaced=None) -> TrainableEngine:
    """A ``Fleet`` over ``members`` (each engine kind loading ``model`` in ``dtype``),
    scheduled by ``policy``; the trainer pushes its weights to every member before sampling.
    ``on_replaced``: how a replaced member gets the current weights when a learner sends them
    to the members directly (``Fleet``)."""
    from rstar2.fleet import Fleet

    if sum(spec.kind == "vllm" and not spec.ray for spec in members) > 1:
        raise ValueError("one 'vllm' member per process: run more with ray: true")
    built, local_threads = [], None
    for index, spec in enumerate(members):
        settings = member_settings(spec, model=model, dtype=dtype, seed=seed + index)
        built.append(MEMBERS[spec.kind].build(spec, f"member{index}", settings, tokenizer))
        if not MEMBERS[spec.kind].server and not spec.ray:
            local_threads = spec.threads
    if local_threads is not None:
        import torch

        torch.set_num_threads(local_threads)  # after the engines, which set every core
    return Fleet(built, policy, on_replaced=on_replaced)


def member_settings(spec: MemberSpec, *, model: str, dtype: str, seed: int) -> dict[str, Any]:
    """The engine arguments of a member of an engine kind ({} for a server)."""
    settings = MEMBERS[spec.kind].settings
    return {} if settings is None else settings(spec, model=model, dtype=dtype, seed=seed)
