"""The demo's training curves as one PNG: reward, accuracy, tool-error ratio inside correct
rollouts (the report's Fig. 4 quantity) and response length, per RL step; the accuracy panel
also carries the held-out probes (greedy, from step 0 before training) where the run made them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

PANELS = (
    (("reward/mean",), "reward (kept rollouts)"),
    (("reward/accuracy", "val/accuracy"), "accuracy: sampled rollouts, held-out probes"),
    (("tools/error_ratio_in_positives",), "tool-error ratio in correct rollouts"),
    (("response/length_mean",), "response length (tokens)"),
)


def plot_curves(rows: Sequence[dict], target: Path, title: str) -> Path:
    """Write the curves of ``rows`` (``metrics.jsonl`` rows, step 0's probe included) to ``target``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 2, figsize=(10, 6.5))
    for axis, (keys, label) in zip(axes.flat, PANELS):
        for key in keys:
            points = [(row["step"], row[key]) for row in rows if key in row]
            if points:
                axis.plot(*zip(*points), marker="o", markersize=3, label=key)
        if len(axis.lines) > 1:
            axis.legend(fontsize=8)
        axis.set_title(label, fontsize=10)
        axis.set_xlabel("RL step")
        axis.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(target, dpi=110)
    plt.close(figure)
    return target
