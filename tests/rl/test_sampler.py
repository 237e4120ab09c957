"""The sampler: rollouts through the real agent loop, engine and sandbox, graded by the real
verifier as each one ends. ``GradeStream`` sends what ended together as one batch and delivers
grades while other rollouts are still running."""

import asyncio
import threading

from rstar2.data.problems import Problem
from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.reward import Grader, score
from rstar2.rl.config import RolloutConfig
from rstar2.rl.sampler import GradeStream, Sampler
from rstar2.sandbox import SandboxClient

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
        while not grader.batches:  # the first batch is with the grader
            await asyncio.sleep(0.01)
        later = [asyncio.create_task(stream.grade(f"<answer>\\boxed{{{n}}}</answer>", "2")) for n in (1, 2, 3)]
        await asyncio.sleep(0.05)
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


def test_the_same_seed_samples_the_same_rollouts_however_the_engine_batches_them(hf_engine, sandbox_url):
    """Every rollout has its own stream: an engine that runs one sequence at a time and one that
    batches them all (in whatever order the agent loop's requests arrive) sample the same."""
    problems = [Problem(id="a", problem="What is 2 + 3?", answer="5"),
                Problem(id="b", problem="What is 7 * 6?", answer="42")]
    rollout = RolloutConfig(prompt="short", max_response_tokens=32, max_turns=2)
    one_at_a_time = HFEngine(HFEngineConfig(dtype="float32", max_batch_size=1), model=hf_engine.model,
                             tokenizer=hf_engine.tokenizer)

    async def sample(engine, grader, seed):
        async with SandboxClient([sandbox_url]) as sandbox:
            sampler = Sampler(engine, engine.tokenizer, sandbox, grader, rollout, rollouts_per_prompt=3)
            return await sampler.sample(problems, seed=seed)

    def responses(batch):
        return [[r.trajectory.response_ids for r in group] for group in batch.groups]

    try:
        with Grader(workers=1) as grader:
            batched = asyncio.run(sample(hf_engine, grader, 21))
            serial = asyncio.run(sample(one_at_a_time, grader, 21))
            other = asyncio.run(sample(hf_engine, grader, 22))
    finally:
        one_at_a_time.shutdown()
    assert responses(batched) == responses(serial)
    assert responses(batched) != responses(other)
    assert len({tuple(ids) for ids in responses(batched)[0]}) > 1  # a group's rollouts differ
