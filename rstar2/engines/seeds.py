"""Seeds and uniform draws that name a stream instead of consuming a generator.

``derive_seed`` gives every (step, problem, rollout) its own seed, so a rollout's samples do
not depend on what else ran. Seeded requests (``SamplingParams.seed``) do not draw from the
engine's generator: the uniform number that picks their ``i``-th token is ``request_uniform(seed, i)``, a counter-based hash
computed on the host. A row's draws then do not depend on which rows share its batch or in
which order requests arrived (which, with tool calls returning at wall-clock times, differs
from run to run), and they are the same numbers on a CPU and on a GPU.

No torch here: the fleet and the agent loop derive seeds without loading it.
"""

from __future__ import annotations

import numpy as np

MASK64 = (1 << 64) - 1


def derive_seed(*parts: int) -> int:
    """A 63-bit seed for the stream named by ``parts`` (e.g. a step's seed, a problem's index and
    a rollout's index): distinct names give independent streams."""
    state = np.random.SeedSequence(list(parts)).generate_state(2, np.uint64)[0]
    return int(state >> np.uint64(1))


def request_uniform(seed: int, index: int) -> float:
    """The ``index``-th uniform number in [0, 1) of the stream ``seed``: SplitMix64's output for
    that position, so any position is computed directly, without the ones before it."""
    z = (seed + (index + 1) * 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return ((z ^ (z >> 31)) >> 11) * 2.0**-53
