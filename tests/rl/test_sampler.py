"""The sampler: rollouts through the real agent loop, engine and sandbox, graded by the real
verifier as each one ends. ``GradeStream`` sends what ended together as one batch and delivers
grades while other rollouts are still running."""

import asyncio
import threading

from rstar2.agent.rollout import RolloutConfig
from rstar2.data.problems import Problem
from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.engines.seeds import derive_seed
from rstar2.reward import Grader, score
from rstar2.reward.grading import GradeStream
from rstar2.rl.sampler import Sampler
from rstar2.sandbox import SandboxClient
from tests.polling import until

RIGHT = "<answer>\\boxed{\\frac{1}{2}}</answer>"  # equal to 0.5 only symbolically: a worker decides


class GatedGrader(Grader):
    """A real grader that records each batch and holds its first one until ``gate`` is set."""

    def __init__(self):
        super().__init__(workers=1)
        self.batches: list[list[tuple[str, str]]] = []
        self.gate = threading.Event()

    def grade_many(self, pairs, **kwargs):
        pairs = list(pairs)
        self.batches.append(pairs)
        if len(self.batches) == 1:
            self.gate.wait(timeout=30)
        return super().grade_many(pairs, **kwargs)


def test_pairs_that_end_while_a_batch_grades_go_together_as_the_next_batch():
    async def scenario(grader):
        stream = GradeStream(grader)
        first = asyncio.create_task(stream.grade(RIGHT, "0.5"))
        await until(lambda: grader.batches, what="the first batch with the grader")
        later = [asyncio.create_task(stream.grade(f"<answer>\\boxed{{{n}}}</answer>", "2")) for n in (1, 2, 3)]
        await until(lambda: len(stream.waiting) == 3, what="the three pairs waiting")
        grader.gate.set()
        return await first, await asyncio.gather(*later)

    with GatedGrader() as grader:
        first, later = asyncio.run(scenario(grader))
    assert [len(batch) for batch in grader.batches] == [1, 3]
    assert first.correct and [g.correct for g in later] == [False, True, False]


def test_a_grade_arrives_while_other_rollouts_are_still_running():
    async def scenario(grader):
        stream = GradeStream(grader)
        early = await asyncio.wait_for(stream.grade(RIGHT, "0.5"), timeout=30)
        late = await stream.grade("<answer>\\boxed{7}</answer>", "7")  # ends after the first is graded
        return early, late

    with Grader(workers=1) as grader:
        early, late = asyncio.run(scenario(grader))
    assert early.correct and late.correct


def test_a_grader_error_reaches_the_rollouts_of_its_batch_and_not_the_next():
    async def scenario(grader):
        stream = GradeStream(grader)
        broken = await asyncio.gather(stream.grade(None, "1"), return_exceptions=True)  # not text
        return broken[0], await stream.grade("<answer>\\boxed{1}</answer>", "1")

    with Grader(workers=1) as grader:
        broken, fine = asyncio.run(scenario(grader))
    assert isinstance(broken, AttributeError) and fine.correct


def test_sampler_rolls_out_every_problem_and_grades_each_rollout(hf_engine, sandbox_url):
    problems = [Problem(id="a", problem="What is 2 + 3?", answer="5"),
                Problem(id="b", problem="What is 7 * 6?", answer="42")]
    rollout = RolloutConfig(prompt="short", max_response_tokens=24, max_turns=2)

    async def sample(grader):
        async with SandboxClient([sandbox_url]) as sandbox:
            sampler = Sampler(hf_engine, hf_engine.tokenizer, sandbox, grader, rollout, rollouts_per_prompt=3)
            return await sampler.sample(problems, seed=1234)

    with Grader(workers=1) as grader:
        batch = asyncio.run(sample(grader))
    assert hf_engine.generator.initial_seed() == 1234
    assert [len(group) for group in batch.groups] == [3, 3]
    for problem, group in zip(problems, batch.groups):
        for rollout_ in group:
            assert rollout_.facts.reward == score(rollout_.trajectory.assistant_text, problem.answer)
            assert 0 < len(rollout_.trajectory.response_ids) <= 24
    assert batch.timings.keys() == {"rollout", "tools", "reward"}
    assert all(seconds >= 0 for seconds in batch.timings.values())


def record_requests(engine, monkeypatch) -> list[tuple[tuple[int, ...], int | None]]:
    """Every (prompt ids, seed) the engine is asked to continue, in arrival order."""
    asked = []
    original = engine.generate

    async def generate(prompts, params):
        asked.extend((tuple(p), params.seed) for p in prompts)
        return await original(prompts, params)

    monkeypatch.setattr(engine, "generate", generate)
    return asked


def test_every_rollout_asks_for_its_own_stream_however_the_engine_batches(hf_engine, sandbox_url, monkeypatch):
    """Rollout k of problem i asks for the seed ``derive_seed(derive_seed(step seed, i, k), turn)``
    on every turn, from an engine that runs one sequence at a time as from one that batches them
    all in arrival order; the engine draws a seeded request's tokens from that seed's stream alone
    (tests/engines/test_hf.py), so batching does not change its random numbers."""
    problems = [Problem(id="a", problem="What is 2 + 3?", answer="5"),
                Problem(id="b", problem="What is 7 * 6?", answer="42")]
    rollout = RolloutConfig(prompt="short", max_response_tokens=32, max_turns=2)
    one_at_a_time = HFEngine(HFEngineConfig(dtype="float32", max_batch_size=1), model=hf_engine.model,
                             tokenizer=hf_engine.tokenizer)

    async def sample(engine, grader, seed):
        async with SandboxClient([sandbox_url]) as sandbox:
            sampler = Sampler(engine, engine.tokenizer, sandbox, grader, rollout, rollouts_per_prompt=3)
            return await sampler.sample(problems, seed=seed)

    def streams(step_seed):
        return {(i, k, turn): derive_seed(derive_seed(step_seed, i, k), turn)
                for i in range(2) for k in range(3) for turn in range(rollout.max_turns)}

    batched_asks, serial_asks = record_requests(hf_engine, monkeypatch), record_requests(one_at_a_time, monkeypatch)
    try:
        with Grader(workers=1) as grader:
            batched = asyncio.run(sample(hf_engine, grader, 21))
            serial = asyncio.run(sample(one_at_a_time, grader, 21))
            other_step = len(batched_asks)
            asyncio.run(sample(hf_engine, grader, 22))
    finally:
        one_at_a_time.shutdown()
    first_turns = {seed: (i, k) for (i, k, turn), seed in streams(21).items() if turn == 0}
    for asks in (batched_asks[:other_step], serial_asks):
        seeds = [seed for _, seed in asks]
        assert len(seeds) == len(set(seeds)) and set(seeds) <= set(streams(21).values())
        prompts = {first_turns[seed]: prompt for prompt, seed in asks if seed in first_turns}
        assert prompts.keys() == set(first_turns.values())  # every rollout began with its own seed
        assert all(prompts[(i, k)] == prompts[(i, 0)] != prompts[(1 - i, 0)] for i, k in prompts)
    assert {s for _, s in batched_asks[other_step:]} <= set(streams(22).values())
    for batch in (batched, serial):
        assert len({tuple(r.trajectory.response_ids) for r in batch.groups[0]}) > 1  # a group's rollouts differ
