"""The order in which training prompts are drawn, resumable from a small position record.

    order = PromptOrder(num_prompts, seed)
    batch = order.next_batch(512)           # indices into the training set
    position = order.position()             # {"epoch": e, "offset": i}, JSON, goes in checkpoints
    PromptOrder(num_prompts, seed, **position).next_batch(512)   # the same batch again

Each epoch is a fresh permutation determined by (seed, epoch) alone, so the position is all
that needs saving; a batch that runs past the end of an epoch continues into the next one.
With ``shuffle=False`` every epoch takes the prompts in their given order (a curriculum whose
file lists the easiest problems first).
"""

from __future__ import annotations

import numpy as np


class PromptOrder:
    def __init__(self, num_prompts: int, seed: int, epoch: int = 0, offset: int = 0, shuffle: bool = True):
        if num_prompts < 1:
            raise ValueError("no training prompts")
        if not 0 <= offset < num_prompts:
            raise ValueError(f"offset {offset} outside an epoch of {num_prompts} prompts")
        self.num_prompts = num_prompts
        self.seed = seed
        self.epoch = epoch
        self.offset = offset
        self.shuffle = shuffle

    def permutation(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.num_prompts)
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_prompts)

    def next_batch(self, size: int) -> list[int]:
        """The next ``size`` prompt indices; advances the position."""
        batch: list[int] = []
        while len(batch) < size:
            take = min(size - len(batch), self.num_prompts - self.offset)
            batch += self.permutation(self.epoch)[self.offset : self.offset + take].tolist()
            self.offset += take
            if self.offset == self.num_prompts:
                self.epoch, self.offset = self.epoch + 1, 0
        return batch

    def position(self) -> dict[str, int]:
        return {"epoch": self.epoch, "offset": self.offset}
