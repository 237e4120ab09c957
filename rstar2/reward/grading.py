"""Grading responses against gold answers, every symbolic check under a hard deadline.

Contract:
- `Grader(workers, deadline_s)` grades (response, gold) pairs into `Grade`s. It never raises
  on any answer. A symbolic check that uses more than `deadline_s` of CPU time, or waits more
  than `WALL_CLOCK_ALLOWANCE` times that on the clock, has its worker process killed and scores
  0 with `timed_out=True`; a check that crashes scores 0 with `error` set.
- Extraction and the parser-free verdicts (two integers compared digit by digit, identical
  answers) run in the calling process: they take linear time and settle most real answers
  without a round trip to a worker. Only the rest go to the worker pool, which starts on
  first need.
- `grade_many` grades one batch on all cores; `is_equivalent` and `score` are the
  one-pair calls, sharing a one-worker pool started on first use and stopped at exit.
- Streaming: `Grader.submit` (a future) and `await Grader.grade` (asyncio) grade one response
  without waiting for anyone else's; all the calls of one `Grader`, from any thread or event
  loop, share its workers.
- `Grader` is a `Reward` (`rstar2.reward.protocol`): `await grader.score(items)` is how the
  trainer and the evaluation harness grade. Its items join those of the other `score` calls on
  the same event loop in a `GradeStream`, which sends everything that arrived while its
  previous batch was grading to the workers as one `grade_many` call: a trainer that scores
  each rollout as it ends keeps every worker busy, and grading overlaps the rollouts still
  generating.
"""

import asyncio
import atexit
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Self

from rstar2.reward.extract import extract_answer
from rstar2.reward.normalize import verdict_without_parser
from rstar2.reward.pool import DeadlinePool, Outcome, available_cores
from rstar2.reward.protocol import RewardItem, Score

DEFAULT_DEADLINE_S = 2.0
"""CPU seconds one symbolic check may use before it is killed and scores 0. CPU time, not time
on the clock: a machine busy with rollouts slows a check down without shrinking what it may
do, so a correct answer's verdict does not depend on the load. The margin is measured, not
assumed: `benchmarks/reward_bench.py` prints the slowest checks of the test data against it
(docs/benchmarks.md, "Answer verification")."""
WALL_CLOCK_ALLOWANCE = 3.0
"""A check is also killed after this many times `deadline_s` on the clock, however little CPU
it got: the bound on how long a caller can wait, which leaves a check its full CPU time while
the cores are shared three ways."""
EQUIVALENCE_CHECK = "rstar2.reward.equivalence:equivalent"
"""The function the worker processes run on each (pred, gold) pair."""
WARMUP_PAIRS = (
    ("\\frac{1}{2}", "0.5"),
    ("\\sqrt{8}", "2\\sqrt{2}"),
    ("(x+1)^2", "x^2+2x+1"),
    ("\\frac{\\pi}{3}", "1.0472"),
    ("\\{1, 2\\}", "\\{2, 3\\}"),
    ("[0, 1)", "(0, 1]"),
    ("(1, 2)", "(1, 3)"),
    ("x = 3", "3"),
    ("y = 2x + 1", "2x + 1 = y"),
    ("x \\in [-2, 7]", "-2 \\le x \\le 7"),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ 3 \\end{pmatrix}"),
    ("10\\%", "0.1"),
    ("\\text{(C)}", "C"),
    ("3 + 2i", "2i + 3"),
    ("a_n = \\sum_{k=1}^{n} a_{k-1} a_{n-k}", "a_n = \\sum_{k=0}^{n-1} a_k a_{n-1-k}"),
)
"""One (pred, gold) pair per kind of comparison, checked once in the process the workers are
forked from, so that sympy's lazy imports and first-call costs are paid once, not per worker.
The recurrence (a sum over k, not one of the test data's) pays for summation's imports and
Bernoulli numbers here, which would otherwise fall on the first check with a sum in every fresh
worker (docs/benchmarks.md has the difference)."""


@dataclass(frozen=True)
class Grade:
    """The verdict on one response."""

    pred: str | None
    """The answer extracted from the response; None when it gave none."""
    correct: bool
    """The answer is equivalent to the gold one."""
    timed_out: bool = False
    """The equivalence check overran its deadline and was killed (so `correct` is False)."""
    error: str | None = None
    """Why the equivalence check crashed, if it did (then `correct` is False)."""

    @property
    def reward(self) -> float:
        """The binary reward of rStar2-Agent: 1.0 when correct, else 0.0."""
        return 1.0 if self.correct else 0.0

    def as_score(self) -> Score:
        """This grade as the `Reward` protocol's `Score`: a check that overran or crashed is a
        failure of the reward (counted per step), not only a wrong answer."""
        if self.timed_out:
            return Score(self.reward, failure="timeout",
                         message=f"the equivalence check of {self.pred!r:.80} overran")
        if self.error is not None:
            return Score(self.reward, failure="error", message=self.error)
        return Score(self.reward)


OnGrade = Callable[[int, Grade], None]


class LazyWorkers:
    """Up to `workers` deadline-bounded processes (default: one per core) running
    `function_path`, each call limited to `deadline_s` CPU seconds and `WALL_CLOCK_ALLOWANCE`
    times that on the clock; started on first use (`_started_pool`, thread-safe), so an
    object that is never asked anything costs no process, and stopped by `close` or the end of
    a `with` block. The base of `Grader` and of a user's reward (`rstar2.reward.custom`)."""

    def __init__(self, function_path: str, *, workers: int | None, deadline_s: float,
                 warmup: Sequence[tuple] = ()):
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be positive, got {deadline_s}")
        self.function_path = function_path
        self.workers = workers
        self.deadline_s = deadline_s
        self.warmup = warmup
        self._pool: DeadlinePool | None = None
        self._pool_lock = threading.Lock()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker processes, if any were started."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _started_pool(self) -> DeadlinePool:
        """The worker pool, started on first need."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = DeadlinePool(
                    self.function_path,
                    workers=self.workers or available_cores(),
                    deadline_s=self.deadline_s * WALL_CLOCK_ALLOWANCE,
                    cpu_limit_s=self.deadline_s,
                    warmup=self.warmup,
                )
            return self._pool


class Grader(LazyWorkers):
    """Grades with up to `workers` deadline-bounded processes (default: one per core), each
    symbolic check limited to `deadline_s` CPU seconds (see `DEFAULT_DEADLINE_S`).

    Thread-safe: concurrent `grade_many`, `submit`, `grade` and `score` calls share the workers.
    A `Reward` (module docstring)."""

    name = "verifier"

    def __init__(self, *, workers: int | None = None, deadline_s: float = DEFAULT_DEADLINE_S):
        super().__init__(EQUIVALENCE_CHECK, workers=workers, deadline_s=deadline_s, warmup=WARMUP_PAIRS)
        self._streams: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, GradeStream] = (
            weakref.WeakKeyDictionary())
        self._streams_lock = threading.Lock()

    async def score(self, items: Sequence[RewardItem]) -> list[Score]:
        """One `Score` per item, in order: each response's answer (read by its `answer_tag`)
        against the item's reference answer, graded with the concurrent calls of this event
        loop in batches (`GradeStream`). A check that overran or crashed is a failed `Score`;
        a grader that cannot grade at all (its workers closed) raises."""
        stream = self._stream()
        grades = await asyncio.gather(*(stream.grade(item.response, item.answer, require_answer_tag=item.answer_tag)
                                        for item in items))
        return [grade.as_score() for grade in grades]

    def _stream(self) -> "GradeStream":
        """The running event loop's stream: its futures and its sending task belong to that loop."""
        loop = asyncio.get_running_loop()
        with self._streams_lock:
            stream = self._streams.get(loop)
            if stream is None:
                stream = self._streams[loop] = GradeStream(self)
            return stream

    def grade_many(
        self,
        pairs: Iterable[tuple[str, str]],
        *,
        require_answer_tag: bool = True,
        on_grade: OnGrade | None = None,
    ) -> list[Grade]:
        """One grade per (response, gold) pair, in order; see `extract_answer` for the tag rule."""
        pairs = list(pairs)
        preds = [extract_answer(response, require_answer_tag=require_answer_tag) for response, _ in pairs]
        return self.compare_many([(pred, gold) for pred, (_, gold) in zip(preds, pairs)], on_grade)

    def submit(self, response: str, gold: str, *, require_answer_tag: bool = True) -> "Future[Grade]":
        """Start grading one response; the future holds its `Grade` (it never fails on an answer).

        Extraction and the parser-free verdicts happen here, so their futures are done at once."""
        return self.submit_answer(extract_answer(response, require_answer_tag=require_answer_tag), gold)

    def submit_answer(self, pred: str | None, gold: str | None) -> "Future[Grade]":
        """`submit` for an already extracted answer."""
        graded: Future[Grade] = Future()
        verdict = verdict_without_parser(pred, gold)
        if verdict is not None:
            graded.set_result(Grade(pred=pred, correct=verdict))
            return graded

        def relay(checked: Future) -> None:
            if checked.exception() is not None:  # the pool was closed under it
                graded.set_exception(checked.exception())
            else:
                graded.set_result(_grade_from(pred, checked.result()))

        self._started_pool().submit((pred, gold)).add_done_callback(relay)
        return graded

    async def grade(self, response: str, gold: str, *, require_answer_tag: bool = True) -> Grade:
        """The `Grade` of one response, awaited without blocking the event loop."""
        return await asyncio.wrap_future(self.submit(response, gold, require_answer_tag=require_answer_tag))

    def compare_many(
        self,
        answer_pairs: Sequence[tuple[str | None, str | None]],
        on_grade: OnGrade | None = None,
    ) -> list[Grade]:
        """One grade per (pred, gold) pair of already extracted answers, in order."""
        grades: list[Grade | None] = [None] * len(answer_pairs)
        symbolic: list[int] = []
        for index, (pred, gold) in enumerate(answer_pairs):
            verdict = verdict_without_parser(pred, gold)
            if verdict is None:
                symbolic.append(index)
            else:
                grades[index] = Grade(pred=pred, correct=verdict)
                if on_grade is not None:
                    on_grade(index, grades[index])
        if symbolic:

            def record(position: int, outcome: Outcome) -> None:
                index = symbolic[position]
                grades[index] = _grade_from(answer_pairs[index][0], outcome)
                if on_grade is not None:
                    on_grade(index, grades[index])

            self._started_pool().map([answer_pairs[i] for i in symbolic], record)
        return grades


Waiting = tuple[str, str, bool, asyncio.Future]
"""A pair waiting in a `GradeStream`: response, gold, the answer rule, and its grade's future."""


class GradeStream:
    """Grades (response, gold) pairs on one event loop as they arrive, batching those that
    arrive together.

    One batch is with the grader at a time (in a thread, so the event loop keeps running the
    rollouts); pairs that arrive meanwhile wait and form the next batch, so the grader gets as
    many pairs per call as have arrived instead of one at a time. A grader failure (a closed
    pool) fails the pairs of that batch, not the stream."""

    def __init__(self, grader: Grader):
        self.grader = grader
        self.waiting: list[Waiting] = []
        self.sender: asyncio.Task | None = None

    async def grade(self, response: str, gold: str, *, require_answer_tag: bool = True) -> Grade:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((response, gold, require_answer_tag, future))
        if self.sender is None or self.sender.done():
            self.sender = asyncio.create_task(self.send_batches())
        return await future

    async def send_batches(self) -> None:
        while self.waiting:
            batch, self.waiting = self.waiting, []
            for tag in dict.fromkeys(tag for _, _, tag, _ in batch):  # one call per answer rule
                await self.send([entry for entry in batch if entry[2] == tag], tag)
        self.sender = None  # an idle stream keeps no task, and so no reference to its loop

    async def send(self, batch: list[Waiting], require_answer_tag: bool) -> None:
        try:
            grades = await asyncio.to_thread(self.grader.grade_many, [(response, gold) for response, gold, _, _ in batch],
                                             require_answer_tag=require_answer_tag)
        except Exception as error:  # noqa: BLE001 -- handed to every waiting caller
            for *_, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        for (*_, future), grade in zip(batch, grades):
            if not future.done():
                future.set_result(grade)


def _grade_from(pred: str | None, outcome: Outcome) -> Grade:
    return Grade(
        pred=pred,
        correct=outcome.value is True,
        timed_out=outcome.timed_out,
        error=outcome.error,
    )


def grade_many(
    pairs: Iterable[tuple[str, str]],
    *,
    deadline_s: float = DEFAULT_DEADLINE_S,
    workers: int | None = None,
    require_answer_tag: bool = True,
    on_grade: OnGrade | None = None,
) -> list[Grade]:
    """Grade (response, gold) pairs in parallel on `workers` processes (default: all cores)."""
    with Grader(workers=workers, deadline_s=deadline_s) as grader:
        return grader.grade_many(pairs, require_answer_tag=require_answer_tag, on_grade=on_grade)


def is_equivalent(pred: str | None, gold: str | None) -> bool:
    """Whether `pred` is the same answer as `gold`, decided within the default deadline.

    A check that overruns counts as not equivalent.
    """
    return _shared_grader().compare_many([(pred, gold)])[0].correct


def score(response: str, gold: str, *, require_answer_tag: bool = True) -> float:
    """The reward of `response`: 1.0 when its final answer is equivalent to `gold`, else 0.0."""
    pred = extract_answer(response, require_answer_tag=require_answer_tag)
    return _shared_grader().compare_many([(pred, gold)])[0].reward


class _SharedGrader:
    """The one-worker grader behind `is_equivalent` and `score`, made on first use.

    One per process: a forked child makes its own rather than talk to its parent's workers.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._grader: Grader | None = None
        self._pid: int | None = None

    def __call__(self) -> Grader:
        with self._lock:
            if self._pid != os.getpid():
                self._grader = Grader(workers=1)
                self._pid = os.getpid()
                atexit.register(self._grader.close)
            return self._grader


_shared_grader = _SharedGrader()
