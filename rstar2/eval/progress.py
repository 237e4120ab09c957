"""The run's progress bar: samples done of all, rate, ETA, and the running accuracy.

Samples finished by an earlier, resumed run count as done and in the accuracy, so the bar of
a resumed run starts where the killed one stopped. The bar goes to stderr; with
``enabled=False`` (tests, ``--quiet``) nothing is drawn.
"""

from __future__ import annotations

from collections.abc import Iterable

from tqdm import tqdm

from rstar2.eval.samples import SampleOutcome


class RunProgress:
    """A tqdm bar whose postfix is the accuracy so far."""

    def __init__(self, total: int, finished: Iterable[SampleOutcome], enabled: bool = True):
        finished = list(finished)
        self.samples = len(finished)
        self.correct = sum(outcome.correct for outcome in finished)
        self.bar = tqdm(total=total, initial=self.samples, unit="sample", disable=not enabled,
                        dynamic_ncols=True, smoothing=0.1, desc="eval")
        self.bar.set_postfix_str(self.accuracy_text(), refresh=False)

    def accuracy_text(self) -> str:
        if not self.samples:
            return "acc -"
        return f"acc {100 * self.correct / self.samples:.1f}%"

    def update(self, correct: bool) -> None:
        self.samples += 1
        self.correct += correct
        self.bar.set_postfix_str(self.accuracy_text(), refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()
