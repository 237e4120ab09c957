"""The bridge from agent trajectories to graded samples, with real tool calls in the real sandbox.

The 135M model rarely calls the tool by itself, so the first turn is teacher-forced (the agent's
``forced_prefix``, closed with the end-of-turn token): one call that runs and one that does not
parse; the model takes over after the tool responses.
"""

from __future__ import annotations

import json

from rstar2.agent.rollout import Agent, RolloutConfig
from rstar2.data.benchmarks import Benchmark
from rstar2.data.problems import Problem
from rstar2.eval.launch import solution_of
from rstar2.eval.runner import EvalSettings, run_eval
from rstar2.sandbox import SandboxClient

GOOD_CALL = ('<tool_call>{"name": "execute_python_code_with_standard_io", '
             '"arguments": {"code": "print(6 * 7)", "input": ""}}</tool_call>')
BAD_CALL = '<tool_call>{"name": "execute_python_code_with_standard_io", "arguments": </tool_call>'
FORCED = f"Let me compute.\n{GOOD_CALL}\n{BAD_CALL}<|im_end|>"


async def test_trajectory_counts_and_answer_reach_the_sample(hf_engine, tokenizer, sandbox_url):
    async with SandboxClient(sandbox_url) as sandbox:
        agent = Agent(hf_engine, tokenizer, sandbox, RolloutConfig(max_turns=2, max_response_tokens=300,
                                                                   temperature=0.0))
        trajectory = await agent.rollout("What is 6 times 7?", forced_prefix=FORCED)
    solution = solution_of(trajectory, answer_tag=True)
    assert (solution.tool_calls, solution.tool_errors) == (2, 1)
    assert solution.turns == trajectory.num_assistant_turns >= 1
    assert "<tool_response>\n42" in solution.response and FORCED in solution.response
    assert solution.response_tokens == len(trajectory.response_ids) > solution.generated_tokens > 0
    assert solution.stop_reason == trajectory.stop_reason and solution.truncated == trajectory.truncated


def test_the_answer_follows_the_reward_rule():
    from rstar2.agent.trajectory import Trajectory, Turn

    text = "I think \\boxed{41}.</reason><answer>The answer is \\boxed{42}</answer>"
    trajectory = Trajectory(prompt_ids=[1], prompt_text="p", response_ids=[5, 6], loss_mask=[1, 1],
                            logprobs=[0.0, 0.0], turns=[Turn(role="assistant", text=text, start=0, end=2)],
                            tool_calls=[], num_assistant_turns=1, final_answer="The answer is \\boxed{42}",
                            stop_reason="answer", temperature=0.6)
    assert solution_of(trajectory, answer_tag=True).pred == "42"
    untagged = trajectory.model_copy(update={"turns": [Turn(role="assistant", text="so \\boxed{7}", start=0, end=2)]})
    assert solution_of(untagged, answer_tag=True).pred is None
    assert solution_of(untagged, answer_tag=False).pred == "7"


async def test_tool_statistics_reach_the_report(tmp_path, hf_engine, tokenizer, sandbox_url):
    problems = [Problem(id=f"q{i}", problem=f"What is {i} + {i}?", answer=str(2 * i)) for i in (1, 2)]
    settings = EvalSettings(benchmarks=["toy"], n=2, temperature=0.0, max_tokens=300, max_turns=2, concurrency=4)
    async with SandboxClient(sandbox_url) as sandbox:
        agent = Agent(hf_engine, tokenizer, sandbox, RolloutConfig(max_turns=2, max_response_tokens=300,
                                                                   temperature=0.0))

        async def solve(problem: Problem):
            return solution_of(await agent.rollout(problem.problem, forced_prefix=FORCED), answer_tag=True)

        document = await run_eval(settings, [Benchmark("toy", None, problems)], solve, tmp_path, show_progress=False)
    toy = document["benchmarks"]["toy"]
    assert toy["samples"] == 4 and toy["tool_calls_per_answer"] >= 2
    assert 0 < toy["tool_error_ratio"] <= 0.5
    lines = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert sorted((r["problem_id"], r["sample"]) for r in lines) == [("q1", 0), ("q1", 1), ("q2", 0), ("q2", 1)]
    assert all(r["tool_calls"] >= 2 and r["tool_errors"] >= 1 for r in lines)
