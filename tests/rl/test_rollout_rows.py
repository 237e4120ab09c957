"""The trainer's rollout log rows carry the prompt the model saw, once per group, and the
tokenizer's special tokens, while the response stays the exact text the model produced."""

import asyncio

import pytest

from rstar2.agent.prompt import ChatFormat, PromptConfig
from rstar2.agent.rollout import Agent, RolloutConfig
from rstar2.data.problems import Problem
from rstar2.models.loading import load_tokenizer
from rstar2.rl.roc import GroupDecision, trajectory_facts
from rstar2.rl.rollout import Rollout
from rstar2.rl.trainer import rollout_rows
from rstar2.tasks.traces import ScriptedEngine

PROMPT = PromptConfig(variant="rstar2")  # the paper's prompt: a system prompt with the tool's schema
QUESTIONS = {"add:2,2": "What is 2 + 2?", "add:3,4": "What is 3 + 4?"}


@pytest.fixture(scope="module")
def chat_tokenizer():
    return load_tokenizer("default")


class NoSandbox:
    """The tool is offered (so the prompt describes it) but never called."""

    async def run(self, code: str, stdin: str = "", timeout_s: float | None = None):
        raise AssertionError("these trajectories make no tool call")


def answered(tokenizer, question: str, answer: str):
    """A one-turn trajectory of ``question`` that answers without calling the tool."""
    turn = f"Adding.</reason>\n<answer>\\boxed{{{answer}}}</answer>"
    engine = ScriptedEngine(tokenizer, [turn], ChatFormat(tokenizer, PROMPT).end_of_turn_id)
    config = RolloutConfig(max_turns=1, max_response_tokens=256, prompt=PROMPT)
    agent = Agent(engine, tokenizer, NoSandbox(), config)
    return asyncio.run(agent.rollout(question))


def test_each_group_logs_its_prompt_once_as_the_model_saw_it(chat_tokenizer):
    problems = [Problem(key, question, "0") for key, question in QUESTIONS.items()]
    groups = [[Rollout(t, trajectory_facts(t, 0.0)) for t in (answered(chat_tokenizer, p.problem, "1"),
                                                              answered(chat_tokenizer, p.problem, "2"))]
              for p in problems]
    decisions = [GroupDecision((0, 1), (0.5, 0.5), (0.0, 0.0))] * len(groups)
    rows = rollout_rows(3, problems, groups, decisions, chat_tokenizer)

    assert [(row["group"], row["rollout"]) for row in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    first_rows = [row for row in rows if row["rollout"] == 0]
    assert all("prompt" not in row and "special_tokens" not in row for row in rows if row["rollout"] != 0)
    for row, problem, group in zip(first_rows, problems, groups):
        trajectory = group[0].trajectory
        assert row["prompt"] == chat_tokenizer.decode(trajectory.prompt_ids) == trajectory.prompt_text
        assert problem.problem in row["prompt"]
        assert "# Tools" in row["prompt"] and "execute_python_code_with_standard_io" in row["prompt"]
        assert row["special_tokens"] == list(chat_tokenizer.all_special_tokens)
    end_of_turn = chat_tokenizer.decode([ChatFormat(chat_tokenizer, PROMPT).end_of_turn_id])
    assert end_of_turn in first_rows[0]["special_tokens"]
    assert all(row["response"].endswith(end_of_turn) for row in rows)  # the log keeps the exact text
