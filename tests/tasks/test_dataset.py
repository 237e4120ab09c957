"""The cold-start data: disjoint splits, traces whose tool responses are the sandbox's real
output, correct answers, failing-first traces that fix themselves, the agent's own format."""

import asyncio

import numpy as np
import pytest

from rstar2.agent.prompt import ChatFormat, PromptConfig
from rstar2.agent.rollout import Agent, RolloutConfig
from rstar2.agent.toolcall import tool_output
from rstar2.reward import score
from rstar2.sandbox import SandboxClient
from rstar2.sft.dataset import sft_traces, split_tasks
from rstar2.tasks.templates import FAMILIES, make_task
from rstar2.tasks.traces import ScriptedEngine, TraceError, make_trace, script

PROMPT = PromptConfig(variant="short")


def test_splits_share_no_problem_and_are_reproducible():
    splits = split_tasks(seed=3, sft=200, sft_hard=40, rl=200, heldout=60)
    keys = [{t.key for t in part} for part in (splits.sft, splits.rl, splits.heldout)]
    assert [len(k) for k in keys] == [240, 200, 60]  # no repeats inside a split
    assert not (keys[0] & keys[2]) and not (keys[1] & keys[2]) and not (keys[0] & keys[1])
    questions = {t.question for t in splits.sft + splits.rl}
    assert not questions & {t.question for t in splits.heldout}
    assert sorted(t.level for t in splits.sft) == ["basic"] * 200 + ["hard"] * 40
    assert {t.level for t in splits.rl} == {"hard"}
    assert sorted(t.level for t in splits.heldout) == ["basic"] * 30 + ["hard"] * 30
    assert split_tasks(seed=3, sft=200, sft_hard=40, rl=200, heldout=60) == splits
    assert split_tasks(seed=4, sft=200, sft_hard=40, rl=200, heldout=60) != splits


def test_basic_rl_problems_join_the_rl_set_without_moving_the_others():
    plain = split_tasks(seed=3, sft=50, sft_hard=10, rl=40, heldout=60)
    mixed = split_tasks(seed=3, sft=50, sft_hard=10, rl=40, heldout=60, rl_basic=15)
    assert (mixed.sft, mixed.heldout, mixed.rl[:40]) == (plain.sft, plain.heldout, plain.rl)
    assert [t.level for t in mixed.rl] == ["hard"] * 40 + ["basic"] * 15
    others = {t.key for t in mixed.sft + mixed.heldout}
    assert len({t.key for t in mixed.rl}) == 55 and not others & {t.key for t in mixed.rl}
    assert {t.family for t in mixed.rl[40:]} == {t.family for t in mixed.heldout}  # every family


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("level", ["basic", "hard"])
def test_every_program_prints_its_answer(family, level):
    rng = np.random.default_rng(0)
    for _ in range(20):
        task = make_task(rng, family, level)
        printed = []
        exec(task.code, {"print": printed.append})  # the generator's own, trusted code
        assert printed == [task.answer], task


def test_traces_carry_the_real_sandbox_output_and_correct_answers(sandbox_url, tokenizer):
    tasks = split_tasks(seed=1, sft=6, sft_hard=5, rl=1, heldout=2).sft

    async def run():
        async with SandboxClient([sandbox_url]) as sandbox:
            traces = await sft_traces(tasks, tokenizer, sandbox, PROMPT, broken_share=0.5, seed=1)
            reruns = [[await sandbox.run(call.code) for call in t.tool_calls] for t in traces]
        return traces, reruns

    traces, reruns = asyncio.run(run())
    chat = ChatFormat(tokenizer, PROMPT)
    failing = [trace.tool_calls[0].error for trace in traces]
    assert 0 < sum(failing) < len(traces)
    assert {task.family for task, fails in zip(tasks, failing) if fails} != {"multiply"}
    for task, trace, results, failing_first in zip(tasks, traces, reruns, failing):
        assert trace.prompt_ids == chat.prompt_ids(task.question)  # the agent's own prompt
        assert score(trace.assistant_text, str(task.answer)) == 1.0
        assert [call.output for call in trace.tool_calls] == [tool_output(r) for r in results]
        tool_turns = [turn.text for turn in trace.turns if turn.role == "tool"]
        for call, text in zip(trace.tool_calls, tool_turns):
            assert f"<tool_response>\n{call.output}\n</tool_response>" in text
        assert [call.error for call in trace.tool_calls] == ([True, False] if failing_first else [False])
        assert trace.tool_calls[-1].output == str(task.answer)


def test_loss_mask_covers_the_assistant_turns_only(sandbox_url, tokenizer):
    task = split_tasks(seed=2, sft=1, rl=1, heldout=2).sft[0]

    async def run():
        async with SandboxClient([sandbox_url]) as sandbox:
            return await make_trace(task, tokenizer, sandbox, PROMPT, broken_variant=0)

    trace = asyncio.run(run())
    for turn in trace.turns:
        expected = 1 if turn.role == "assistant" else 0
        assert set(trace.loss_mask[turn.start:turn.end]) == {expected}
    trained = tokenizer.decode([t for t, m in zip(trace.response_ids, trace.loss_mask) if m])
    assert "<tool_response>" not in trained and "Traceback" not in trained
    assert trained.count("<tool_call>") == 2 and "\\boxed{" in trained


def test_a_trace_whose_program_prints_something_else_is_refused(sandbox_url, tokenizer):
    task = split_tasks(seed=2, sft=1, rl=1, heldout=2).sft[0]
    wrong = type(task)(**{**task.__dict__, "answer": task.answer + 1})

    async def run():
        async with SandboxClient([sandbox_url]) as sandbox:
            await make_trace(wrong, tokenizer, sandbox, PROMPT)

    with pytest.raises(TraceError, match="expected"):
        asyncio.run(run())


def test_scripted_engine_is_driven_by_the_real_agent_loop(sandbox_url, tokenizer):
    """The script's turns come back through the agent exactly as tokens a model would emit."""
    task = split_tasks(seed=5, sft=1, rl=1, heldout=2).sft[0]
    turns = script(task, PROMPT.tool_name, None)
    chat = ChatFormat(tokenizer, PROMPT)

    async def run():
        async with SandboxClient([sandbox_url]) as sandbox:
            engine = ScriptedEngine(tokenizer, turns, chat.end_of_turn_id)
            agent = Agent(engine, tokenizer, sandbox, RolloutConfig(max_turns=2, prompt=PROMPT))
            return await agent.rollout(task.question)

    trace = asyncio.run(run())
    assistant = [turn.text for turn in trace.turns if turn.role == "assistant"]
    assert assistant == [text + tokenizer.decode([chat.end_of_turn_id]) for text in turns]
