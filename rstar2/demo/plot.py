"""The demo's training curves as one PNG: reward, accuracy, tool-error ratio inside correct
rollouts (the report's Fig. 4 quantity) and response length, per RL step."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

PANELS = (
    ("reward/mean", "reward (kept rollouts)"),
    ("reward/accuracy", "accuracy (all sampled rollouts)"),
    ("tools/error_ratio_in_positives", "tool-error ratio in correct rollouts"),
    ("response/length_mean", "response length (tokens)"),
)


def plot_curves(rows: Sequence[dict], target: Path, title: str) -> Path:
    """Write the four curves of ``rows`` (``metrics.jsonl`` rows) to ``target``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [row["step"] for row in rows]
    figure, axes = plt.subplots(2, 2, figsize=(10, 6.5))
    for axis, (key, label) in zip(axes.flat, PANELS):
        axis.plot(steps, [row.get(key, float("nan")) for row in rows], marker="o", markersize=3)
        axis.set_title(label, fontsize=10)
        axis.set_xlabel("RL step")
        axis.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(target, dpi=110)
    plt.close(figure)
    return target
