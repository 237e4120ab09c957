"""The sections of a run config that belong to the training algorithm.

    rl: RLConfig (roc: RocConfig, loss: LossConfig, optimizer, init: InitConfig)

The model, the optimizer, checkpoint and logging sections are training's, shared with SFT
(``rstar2.training.config``). Each is a ``Section``: a pydantic model whose fields carry their
documentation as the docstring under them, unknown keys refused. Defaults are the paper's values
(§4.3), so a recipe states what differs. The whole tree, its YAML recipes and dotted overrides
are ``rstar2.run.config``; each component is handed only its own section. This module does not
import torch.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from rstar2.moved import moved_names
from rstar2.section import Section
from rstar2.training.config import OptimizerConfig


class RocConfig(Section):
    mode: Literal["paper", "release", "off"] = "paper"
    """How a prompt's rollouts become its training group (one class each in
    ``rstar2.rl.advantage``): 'paper' (§2.2.3: half the negatives uniformly, the rest positives
    drawn with weight 1/(p_total + eps)); 'release' (the official code rule for rule:
    proportional counts with a floor per side, positives sorted by penalty, negatives in rollout
    order, the release's format penalty and group-size rules); 'off' (plain GRPO: G rollouts are
    sampled and all kept)."""
    error_signal: Literal["outcome", "text"] = "outcome"
    """What p_err counts as a failed tool call. 'outcome' (default): the call's recorded outcome,
    so parse errors, exceptions, timeouts and kills all count, as the paper lists them. 'text':
    the release's rule, the share of ``<tool_response>`` blocks in the response text that contain
    'error' in any case (it misses a timeout or kill whose text lacks the word and counts output
    that prints it). ``mode: release`` with ``error_signal: text`` is the official run exactly."""
    penalty_epsilon: float = Field(0.1, gt=0)
    """eps in the paper-mode weight 1/(p_total + eps), which is undefined at p_total = 0. At 0.1 a
    flawless trace is 3.5x as likely per draw as one with a quarter of its calls failing, and the
    weights stay within 1/2.1 .. 10, so selection prefers quality without becoming a sort."""
    min_per_side: int = Field(2, ge=0)
    """Release mode: at least this many positives and negatives are kept when available (the
    release's ``min_zero_reward_trace_num`` and ``min_non_zero_reward_trace_num``, both 2)."""
    drop_zero_variance: bool = True
    """Drop a group whose rewards are all equal before selection (the release's
    ``reject_equal_reward``). Paper mode also drops a group whose kept rewards became all equal
    (a single negative keeps none), a check the release does not make. Dropped groups are
    counted in the step's metrics; the batch is not refilled."""


class LossConfig(Section):
    clip_low: float = Field(0.2, gt=0, lt=1)
    """PPO ratio clip below 1: the ratio is clipped at 1 - clip_low."""
    clip_high: float = Field(0.28, gt=0)
    """PPO ratio clip above 1 (Clip-Higher): the ratio is clipped at 1 + clip_high."""
    std_epsilon: float = Field(1e-6, gt=0)
    """Added to the group's reward std in the advantage (r - mean) / (std + eps), as verl."""
    kl_coef: float = Field(0.0, ge=0)
    """Weight of a k3 KL penalty to the reference policy; 0 (the paper) skips the reference."""
    entropy_coef: float = Field(0.0, ge=0)
    """Weight of an entropy bonus; 0 in the paper (it risks runaway entropy)."""
    behaviour_correction: Literal["truncate", "mask", "off"] = "truncate"
    """Importance weights against the policy that sampled the tokens, where that was another copy
    of the weights than the trainer's (a bfloat16 engine copy, other kernels, a vLLM engine):
    the trainer takes each token's log-prob under its own weights and multiplies its
    policy-gradient term by w = π_trainer / π_engine, detached. 'truncate' (TIS) uses min(w,
    cap); 'mask' (MIS, IcePop) uses w inside [1/cap, cap] and 0 outside, dropping the tokens the
    engine got most wrong; 'off' trains as if the engine had sampled from the trainer's weights.
    An engine that samples from the trainer's own model needs no correction and gets none."""
    behaviour_correction_level: Literal["token", "sequence"] = "token"
    """'token': each token its own weight. 'sequence': every token of a rollout shares one, the
    geometric mean of its tokens' w (a product would vanish or explode with length), so 'mask'
    drops whole rollouts."""
    behaviour_correction_cap: float = Field(2.0, gt=1)
    """C above: the largest weight 'truncate' lets through, the edge of 'mask''s [1/C, C]."""


class AsyncConfig(Section):
    enabled: bool = False
    """Sample ahead while the learner trains (docs/async.md): the engine keeps generating the
    next steps' groups instead of idling through every update, and the update stops waiting for
    a step's slowest rollouts once later steps have work to do. Off: every step samples its
    groups, then learns from them (the report's synchronous loop)."""
    max_staleness: int = Field(1, ge=0)
    """k: the update that makes version v+1 learns from groups whose rollouts started under
    version v - k or later. Groups are started no earlier than that allows (admission, so slow,
    hard problems are never dropped for going stale) and used in the order they were drawn.
    0 is on-policy: the synchronous run."""
    in_flight: Literal["keep", "abort"] = "keep"
    """What a weight push does to rollouts still generating. 'keep': their turns go on under the
    new weights, the keys and values already cached left as the old weights computed them
    (cheapest; each token records the version that sampled it). 'abort': their turns stop and
    are continued as new requests, prefilled afresh under the new weights (costs one prefill
    of each running rollout per push). Either way the loss corrects each token against the
    policy that sampled it."""
    learner_threads: int | None = Field(None, ge=1)
    """CPU threads the update uses while the engine samples beside it, the engine keeping the
    others; None: half of the process's threads (at least one). Two pools of threads on the
    same cores would each wait on the other (``rstar2.engines.hf.engine``)."""


class InitConfig(Section):
    checkpoint: str | None = None
    """Start from this checkpoint (a ``step_*`` directory, or a run's checkpoint directory whose
    latest is taken), e.g. the previous stage's; null starts from ``model.path``."""
    reset_optimizer: bool = False
    """With ``checkpoint``: start AdamW and the warm-up afresh instead of continuing them
    (stage 3 does)."""
    reset_reference: bool = False
    """With ``checkpoint``: the KL reference becomes the loaded policy instead of ``model.path``
    (stage 3 does; only matters when ``loss.kl_coef`` > 0)."""


class RLConfig(Section):
    steps: int = Field(ge=1)
    """Rollout steps to train (one optimizer update per step unless ``updates_per_step`` > 1)."""
    prompts_per_step: int = Field(512, ge=1)
    """Prompts drawn per step (paper: 512)."""
    group_size: int = Field(16, ge=2)
    """G, rollouts per prompt that enter the update; RoC samples 2G and keeps G (paper: 16)."""
    updates_per_step: int = Field(1, ge=1)
    """Optimizer updates per rollout batch (mini-batches); 1, as the release, is on-policy."""
    micro_batch_tokens: int = Field(20480, ge=1)
    """Most tokens per forward/backward pass; sequences are packed up to this (release: 20480)."""
    max_silent_steps: int | None = Field(None, ge=1)
    """Stop the run after this many steps in a row that trained nothing (every group's rollouts
    scored alike, so no update ran and the policy is unchanged), or whose reward calls all
    failed. None: one pass over the training problems, and at least 3 steps: by then the
    unchanged policy has met every problem, so a collapsed policy (one answer to everything),
    problems all out of its reach or a broken reward end the run there instead of spending the
    rest of it. The model so far is checkpointed and exported, and the run fails: ``rstar2
    train`` (and ``rstar2 demo``) print why in one error line and exit with code 1."""
    reward: str | None = None
    """Your reward function as ``package.module:function`` (docs/reward.md), called with
    (response, gold, row) in deadline-bounded workers; null is the built-in verifier (the
    paper's answer check). With ``roc.mode`` paper or release it must return 0 or 1."""
    reward_deadline_s: float = Field(2.0, gt=0)
    """CPU seconds one call of ``reward`` may use (and three times that on the clock) before it
    is killed and scores 0, as the verifier's checks are."""
    roc: RocConfig = RocConfig()
    """Resample-on-Correct."""
    loss: LossConfig = LossConfig()
    """The policy loss."""
    optimizer: OptimizerConfig = OptimizerConfig()
    """AdamW and its schedule."""
    init: InitConfig = InitConfig()
    """Where the policy starts (stage continuation)."""
    asynchronous: AsyncConfig = AsyncConfig()
    """Sampling and learning overlapped, with bounded staleness (off by default)."""

    @field_validator("reward")
    @classmethod
    def reward_path(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[\w.]+:\w+", value):
            raise ValueError("expected package.module:function, e.g. my_rewards:judge")
        return value

    @property
    def rollouts_per_prompt(self) -> int:
        """2G when RoC selects, G when it is off."""
        return self.group_size if self.roc.mode == "off" else 2 * self.group_size

    @model_validator(mode="after")
    def release_floor_fits(self) -> RLConfig:
        if self.roc.mode == "release" and self.group_size < 2 * self.roc.min_per_side:
            raise ValueError(
                f"group_size {self.group_size} cannot keep roc.min_per_side={self.roc.min_per_side} "
                f"rollouts of each side in roc.mode 'release'; "
                f"use group_size >= {2 * self.roc.min_per_side}"
            )
        if self.prompts_per_step % self.updates_per_step:
            raise ValueError(
                f"prompts_per_step {self.prompts_per_step} must split evenly into "
                f"updates_per_step {self.updates_per_step}"
            )
        return self


__getattr__ = moved_names(__name__, {name: "rstar2.training.config" for name in (
    "ModelConfig", "LoraConfig", "CheckpointConfig", "LoggingConfig")})
