"""A reward for the validation tests (``rl.reward: tests.run.probe_rewards:parity_or_probe``)
that never depends on what a tiny random model means, only on the row and the text's length."""

from __future__ import annotations


def parity_or_probe(response: str, gold: str, row: dict) -> float:
    """A held-out row's own ``probe`` value, so that a probe's accuracy is known in advance; on
    a training row, 1 for a response of odd length: rewards that differ within a group whatever
    the model writes, so that every step updates the policy."""
    if "probe" in row:
        return float(row["probe"])
    return float(len(response) % 2)
