"""Cold-start SFT traces: scripted assistant turns played through the real agent loop.

    trajectory = await make_trace(task, tokenizer, sandbox, prompt, broken_first=False)

Each trace is an ``rstar2.agent`` rollout in which the engine is a script: it "generates" the
next prepared assistant turn (short ``<reason>``, then a JSON tool call with the task's program;
after the tool response, ``<answer>\\boxed{N}</answer>``). Everything else is the agent's own:
the prompt template and tokenisation, tool-call parsing, the sandbox run of the program, the
tool-response turn and the loss mask. So SFT trains on exactly the format RL samples in, and
every tool response is what the sandbox really printed. With ``broken_first`` the first program
has a bug (a misspelt name, or a missing parenthesis); the sandbox answers with its real
traceback and the next turn fixes the program.

A trace whose sandbox output disagrees with the task's answer raises ``TraceError``: the
template, not the model, would be wrong.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from rstar2.agent.prompt import ChatFormat, PromptConfig
from rstar2.agent.rollout import Agent, CodeRunner, RolloutConfig
from rstar2.agent.trajectory import Trajectory
from rstar2.engines.base import Completion, SamplingParams
from rstar2.errors import Rstar2Error
from rstar2.tasks.templates import Task


class TraceError(Rstar2Error, RuntimeError):
    """A scripted trace did not come out as its task says (template bug)."""


class ScriptedEngine:
    """An ``Engine`` that answers each request with the next prepared assistant turn, as the
    tokens a model would produce (the turn's text, then the end-of-turn token)."""

    def __init__(self, tokenizer, turns: Sequence[str], end_of_turn_id: int):
        self.tokenizer = tokenizer
        self.turns = list(turns)
        self.end_of_turn_id = end_of_turn_id

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        if not self.turns:
            raise TraceError("the agent asked for more turns than the script has")
        ids = self.tokenizer.encode(self.turns.pop(0), add_special_tokens=False) + [self.end_of_turn_id]
        return [Completion(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop")]

    async def close(self) -> None:
        pass


def tool_call_text(code: str, tool_name: str) -> str:
    payload = {"name": tool_name, "arguments": {"code": code, "input": ""}}
    return f"<tool_call>\n{json.dumps(payload)}\n</tool_call>"


def broken(code: str, variant: int) -> tuple[str, str]:
    """A buggy version of ``code`` and the name of the error it raises."""
    if variant % 2 == 0:
        return code.replace("print(", "prnt(", 1), "NameError"
    return code[:-1], "SyntaxError"


def script(task: Task, tool_name: str, broken_variant: int | None) -> list[str]:
    """The assistant turns of a trace (each continues after the forced ``<reason>``)."""
    call = tool_call_text(task.code, tool_name)
    answer = f"The program printed {task.answer}.</reason>\n<answer>\\boxed{{{task.answer}}}</answer>"
    if broken_variant is None:
        return [f"{task.reason}</reason>\n{call}", answer]
    bad_code, error = broken(task.code, broken_variant)
    return [
        f"{task.reason}</reason>\n{tool_call_text(bad_code, tool_name)}",
        f"The program failed with a {error}. I will fix it and run it again.</reason>\n{call}",
        answer,
    ]


async def make_trace(task: Task, tokenizer, runner: CodeRunner, prompt: PromptConfig,
                     broken_variant: int | None = None) -> Trajectory:
    """The trajectory of ``task`` played through the agent loop (module docstring)."""
    turns = script(task, prompt.tool_name, broken_variant)
    config = RolloutConfig(max_turns=len(turns), max_response_tokens=4096, temperature=1.0, prompt=prompt)
    engine = ScriptedEngine(tokenizer, turns, ChatFormat(tokenizer, prompt).end_of_turn_id)
    trajectory = await Agent(engine, tokenizer, runner, config).rollout(task.question)
    check_trace(task, trajectory, broken_variant is not None)
    return trajectory


def check_trace(task: Task, trajectory: Trajectory, fails_first: bool) -> None:
    """The sandbox printed the task's answer, the broken call failed, and the trace ended with
    its answer."""
    calls = trajectory.tool_calls
    if trajectory.stop_reason != "answer" or trajectory.final_answer != f"\\boxed{{{task.answer}}}":
        raise TraceError(f"{task.key}: trace ended with {trajectory.stop_reason}, {trajectory.final_answer!r}")
    if calls[-1].status != "ok" or calls[-1].output.strip() != str(task.answer):
        raise TraceError(f"{task.key}: the sandbox printed {calls[-1].output!r}, expected {task.answer}")
    if fails_first and not calls[0].error:
        raise TraceError(f"{task.key}: the broken program did not fail")
