"""Your own reward function, run as the built-in verifier runs: in worker processes, under hard
deadlines, its failures counted instead of raised. Adapts the function to the ``Reward``
protocol (``rstar2.reward.protocol``), so the trainer calls it as it calls the verifier.

    with CustomReward("mypkg.rewards:judge", deadline_s=2.0, binary=True) as reward:
        scores = await reward.score([RewardItem(problem, response_text, gold, row)])

Contract:

* The function is named ``package.module:function`` and takes ``(response, gold, row)``: the
  response text (the assistant's turns), the gold answer as a string, and the problem's source
  row (a dict as read, under the data set's own field names). It may be a plain or an ``async``
  function, and scores one response per call. Building a ``CustomReward`` imports it once in
  this process, so a missing module, a missing or uncallable name, or a function that cannot
  take those three arguments is refused at once with one ``RewardError`` line, before a run
  writes anything.
* Every call runs in a worker process forked from a warm one that imported the function's
  module (``rstar2.reward.pool``), never in the caller's: a function that hangs, spins or
  crashes its process costs that worker, not the run. The deadline is the verifier's rule:
  ``deadline_s`` seconds of CPU time, and three times that on the clock. The items of one
  ``score`` call, and of concurrent calls, run in parallel on the workers.
* It returns the reward as a number (``bool`` counts as 0/1), or a richer record: a mapping, or
  an object (a dataclass, ``rstar2.reward.Grade``...), with a numeric ``reward`` and other
  numeric fields, which come back as ``Score.metrics`` (a trainer logs their means).
* ``score`` never raises for anything the function does: a call that raises, overruns its
  deadline, dies, or returns no finite number (a string, NaN, a list of several rewards for its
  one response, or, with ``binary``, a reward other than 0 or 1, which Resample-on-Correct
  needs) scores 0 with ``failure`` set to 'error', 'timeout' or 'invalid' and ``message`` saying
  what happened; an 'invalid' message names the function.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from rstar2.reward.grading import DEFAULT_DEADLINE_S, WALL_CLOCK_ALLOWANCE, LazyWorkers
from rstar2.reward.pool import Outcome
from rstar2.reward.protocol import RewardError, RewardItem, Score

CALL = "rstar2.reward.custom:call_reward"
"""What the workers run: the user's function, its value made a plain record."""


def load_reward_function(path: str) -> Callable:
    """The function ``package.module:function`` names, checked to take (response, gold, row)."""
    module_name, sep, name = path.partition(":")
    if not sep or not module_name or not name:
        raise RewardError(f"reward {path!r}: expected package.module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise RewardError(f"reward {path!r}: cannot import {module_name} ({error})") from None
    except Exception as error:  # noqa: BLE001 -- the user's module failed while importing
        raise RewardError(f"reward {path!r}: importing {module_name} raised {type(error).__name__}: {error}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise RewardError(f"reward {path!r}: {module_name} has no function {name!r}")
    try:
        inspect.signature(function).bind("response", "gold", {})
    except TypeError:
        raise RewardError(f"reward {path!r}: must take (response, gold, row), "
                          f"not {inspect.signature(function)}") from None
    except ValueError:
        pass  # no signature to read (a builtin): the first call will tell
    return function


_loaded: dict[str, Callable] = {}


def call_reward(path: str, *arguments) -> tuple[float | None, dict[str, float], str | None]:
    """In a worker: the function's value on ``arguments`` as ``(reward, metrics, problem)``;
    with no arguments, only import it (the zygote's warm-up, so workers fork with it loaded)."""
    function = _loaded.get(path) or _loaded.setdefault(path, load_reward_function(path))
    if not arguments:
        return None, {}, None
    value = function(*arguments)
    if inspect.isawaitable(value):
        value = asyncio.run(awaited(value))
    return plain_record(value)


async def awaited(value):
    return await value


def plain_record(value: Any) -> tuple[float | None, dict[str, float], str | None]:
    """``(reward, metrics, None)``, or ``(None, {}, what is wrong)`` for an unusable value."""
    if isinstance(value, (bool, int, float)):
        fields: Mapping[str, Any] = {"reward": value}
    elif isinstance(value, (list, tuple)):
        return None, {}, (f"returned a {type(value).__name__} of {len(value)} values: a reward function scores "
                          "one response per call and returns one reward")
    elif isinstance(value, Mapping):
        fields = value
    elif hasattr(value, "reward"):
        fields = {**getattr(value, "__dict__", {}), "reward": value.reward}
    else:
        return None, {}, f"returned {type(value).__name__} {value!r:.80}: not a number or a record with a reward"
    reward = fields.get("reward")
    if not isinstance(reward, (int, float)) or not math.isfinite(reward):
        return None, {}, f"returned the reward {reward!r:.80}, not a finite number"
    metrics = {str(key): float(item) for key, item in fields.items()
               if key != "reward" and isinstance(item, (bool, int, float)) and math.isfinite(item)}
    return float(reward), metrics, None


class CustomReward(LazyWorkers):
    """A user's reward function behind a pool of deadline-bounded workers (module docstring),
    started on first use: a ``Reward``. Thread-safe; ``score`` may be awaited from any event
    loop."""

    def __init__(self, path: str, *, workers: int | None = None, deadline_s: float = DEFAULT_DEADLINE_S,
                 binary: bool = False):
        super().__init__(CALL, workers=workers, deadline_s=deadline_s, warmup=[(path,)])
        load_reward_function(path)
        self.name = path
        self.binary = binary

    async def score(self, items: Sequence[RewardItem]) -> list[Score]:
        """One ``Score`` per item, in order, awaited without blocking the event loop; the items
        run in parallel on the workers."""
        return list(await asyncio.gather(*(asyncio.wrap_future(self._submit(item)) for item in items)))

    def _submit(self, item: RewardItem) -> Future[Score]:
        """Start scoring one response; the future holds its ``Score`` and never fails."""
        scored: Future[Score] = Future()

        def relay(done: Future) -> None:
            if done.exception() is not None:  # the pool was closed under it
                scored.set_result(Score(0.0, failure="error", message=str(done.exception())))
            else:
                scored.set_result(self.score_of(done.result()))

        self._started_pool().submit((self.name, item.response, item.answer, item.row)).add_done_callback(relay)
        return scored

    def score_of(self, outcome: Outcome) -> Score:
        if outcome.timed_out:
            return Score(0.0, failure="timeout", message=f"overran its deadline ({self.deadline_s:g} s of CPU, "
                                                         f"{self.deadline_s * WALL_CLOCK_ALLOWANCE:g} s on the clock)")
        if outcome.error is not None:
            return Score(0.0, failure="error", message=outcome.error)
        reward, metrics, problem = outcome.value
        if problem is None and self.binary and reward not in (0.0, 1.0):
            problem = (f"returned {reward:g}; Resample-on-Correct needs rewards of 0 or 1 (set "
                       "rl.roc.mode: off to train on graded rewards)")
        if problem is not None:
            return Score(0.0, failure="invalid", message=f"reward {self.name} {problem}")
        return Score(reward, metrics)
