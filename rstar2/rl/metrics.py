"""The numbers a training step reports, computed from its rollouts, RoC decisions and update.

    metrics = step_metrics(groups, decisions, stats, grad_norm, lr, timings)

Names are ``section/quantity``. Over every sampled rollout: ``reward/accuracy`` (the mean
reward: the share correct under the verifier, the step's pass rate), ``reward/groups_with_signal``
(share of prompts with at least one correct and one wrong rollout, the groups GRPO can learn
from), ``reward/errors|timeouts|invalid`` (rollouts whose reward call failed, and so scored 0:
``rstar2.reward.Score.failure``), ``reward/<name>`` (the mean of each number a custom reward's
records carry), ``tools/*`` and ``roc/*_penalty_mean`` (``roc.rollout_metrics``, the penalties
by the mode's rules; the paper's Fig. 4 quantity is ``tools/error_ratio_in_positives``),
``tools/call_rate`` (share of rollouts with a call), ``response/length_mean|max`` (response
tokens, tool responses included) and
``response/truncated_ratio``. Over the kept rollouts, the ones the update saw: ``reward/mean`` (absent when RoC kept none).
Then RoC's group counts (``roc.decision_counts``), the loss stats of the update (entropy, clip
fractions, ``behaviour/*`` and ``logprob_drift/mean|max`` where the engine samples from its own
copy of the weights, ...), ``train/grad_norm``, ``train/lr`` and ``time/*`` seconds by phase. The
trainer adds ``weights/version_min|max|lag`` (``weight_version_metrics``):
the learner steps whose weights the engines sampled the step under, and how far the oldest is
behind the step's own, so a skipped or stale weight sync shows as a lag above 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rstar2.reward import Score
from rstar2.rl.loss import LossStats
from rstar2.rl.roc import GroupDecision, decision_counts, rollout_metrics
from rstar2.rl.rollout import Rollout


def step_metrics(
    groups: Sequence[Sequence[Rollout]],
    decisions: Sequence[GroupDecision],
    stats: LossStats | None,
    grad_norm: float | None,
    lr: float,
    timings: Mapping[str, float],
) -> dict[str, float]:
    """Every metric of one step (see the module docstring); ``reward/mean`` and the update's
    entries are absent when every group was dropped and no update ran."""
    rollouts = [rollout for group in groups for rollout in group]
    facts = [rollout.facts for rollout in rollouts]
    kept = [group[i].facts for group, d in zip(groups, decisions) for i in d.kept]
    lengths = [len(rollout.trajectory.response_ids) for rollout in rollouts]
    n = max(len(rollouts), 1)
    metrics = {
        "reward/accuracy": sum(f.reward for f in facts) / n,
        "reward/groups_with_signal": sum(
            len({r.facts.reward for r in group}) > 1 for group in groups) / max(len(groups), 1),
        "tools/call_rate": sum(f.tool_calls > 0 for f in facts) / n,
        **rollout_metrics(facts, decisions),
        "response/length_mean": sum(lengths) / n,
        "response/length_max": float(max(lengths, default=0)),
        "response/truncated_ratio": sum(r.trajectory.truncated for r in rollouts) / n,
        **decision_counts(decisions),
        "train/lr": lr,
    }
    metrics.update(reward_call_metrics([r.score for r in rollouts if r.score is not None]))
    if kept:
        metrics["reward/mean"] = sum(f.reward for f in kept) / len(kept)
    if stats is not None:
        metrics.update(stats.summary())
        metrics["train/grad_norm"] = float(grad_norm)
    metrics.update({f"time/{phase}": seconds for phase, seconds in timings.items()})
    return metrics


def reward_call_metrics(scores: Sequence[Score]) -> dict[str, float]:
    """How many reward calls failed, by kind, and the mean of each number the records carry."""
    metrics = {f"reward/{name}": float(sum(s.failure == kind for s in scores))
               for kind, name in (("error", "errors"), ("timeout", "timeouts"), ("invalid", "invalid"))}
    values: dict[str, list[float]] = {}
    for scored in scores:
        for key, value in scored.metrics.items():
            values.setdefault(key, []).append(value)
    metrics.update({f"reward/{key}": sum(items) / len(items) for key, items in values.items()
                    if f"reward/{key}" not in metrics and key not in ("accuracy", "mean")})
    return metrics


def weight_version_metrics(rollouts: Sequence[Rollout], expected: int) -> dict[str, float]:
    """``weights/version_min|max`` over the rollouts' weight versions and ``weights/version_lag``
    (``expected``, the version the step should sample under, minus the oldest one); empty when
    no engine stamped a version."""
    versions = [r.trajectory.weight_version for r in rollouts if r.trajectory.weight_version is not None]
    if not versions:
        return {}
    return {"weights/version_min": float(min(versions)), "weights/version_max": float(max(versions)),
            "weights/version_lag": float(expected - min(versions))}
