"""The SFT data format: a trace the agent played comes back from its chat-format conversation as
its very token ids and loss mask (for every family's template, with and without the paper's
prompt), and malformed rows are refused together, each with its line number."""

import asyncio
import json

import pytest

from rstar2.agent.prompt import ChatFormat, PromptConfig
from rstar2.data import DataError
from rstar2.models.loading import load_tokenizer
from rstar2.sandbox import SandboxClient
from rstar2.sft.chat import conversation_sequence, read_conversations
from rstar2.sft.dataset import sft_traces, split_tasks, write_traces
from tests.families import FAMILIES


@pytest.mark.parametrize("variant", ["short", "rstar2"])
@pytest.mark.parametrize("family", FAMILIES)
def test_a_written_trace_reads_back_as_the_ids_the_agent_produced(family, variant, tiny_models, sandbox_url,
                                                                   tmp_path):
    tokenizer = load_tokenizer(tiny_models[family])
    prompt = PromptConfig(variant=variant)
    tasks = split_tasks(seed=2, sft=4, sft_hard=1, rl=1, heldout=2).sft

    async def traces():
        async with SandboxClient([sandbox_url]) as sandbox:
            return await sft_traces(tasks, tokenizer, sandbox, prompt, broken_share=0.5, seed=2)

    played = asyncio.run(traces())
    assert any(len(t.tool_calls) == 2 for t in played)  # a failing first call and its fix
    chat = ChatFormat(tokenizer, prompt)
    path = write_traces(tmp_path / "traces.jsonl", [t.key for t in tasks], [t.question for t in tasks],
                        played, chat.end_of_turn)
    conversations = read_conversations(path)
    assert [c.id for c in conversations] == [t.key for t in tasks]
    for conversation, trace in zip(conversations, played):
        assert [m["role"] for m in conversation.messages][:3] == ["user", "assistant", "tool"]
        sequence = conversation_sequence(conversation.messages, chat)
        assert sequence.prompt_ids == trace.prompt_ids
        assert sequence.response_ids == trace.response_ids
        assert sequence.loss_mask == trace.loss_mask


def test_a_system_message_and_a_follow_up_question_are_used_verbatim(tokenizer):
    chat = ChatFormat(tokenizer, PromptConfig(variant="rstar2"))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "<reason>Easy.</reason><answer>4</answer>"},
                {"role": "user", "content": "And 3+3?"},
                {"role": "assistant", "content": "<reason>Also easy.</reason><answer>6</answer>"}]
    sequence = conversation_sequence(messages, chat)
    text = tokenizer.decode(sequence.prompt_ids + sequence.response_ids)
    expected = (chat.render(messages[:2], True) + "<reason>Easy.</reason><answer>4</answer><|im_end|>"
                + "\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n<reason>"
                + "Also easy.</reason><answer>6</answer><|im_end|>")
    assert text == expected
    trained = tokenizer.decode([t for t, m in zip(sequence.response_ids, sequence.loss_mask) if m])
    assert trained == "Easy.</reason><answer>4</answer><|im_end|>Also easy.</reason><answer>6</answer><|im_end|>"


GOOD = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<reason>a"}]}


def test_malformed_rows_are_refused_together_by_line(tmp_path):
    rows = [
        GOOD,
        {"messages": "hello"},
        {"messages": [{"role": "user", "content": "q"}]},
        {"messages": [{"role": "assistant", "content": "<reason>a"}]},
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "no tag"}]},
        {"messages": [{"role": "user", "content": "q"}, {"role": "tool", "content": "1"},
                      {"role": "assistant", "content": "<reason>a"}]},
        {"messages": [{"role": "user", "content": 3}, {"role": "assistant", "content": "<reason>a"}]},
        {"messages": [{"role": "bot", "content": "q"}]},
        GOOD,
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(DataError) as error:
        read_conversations(path)
    lines = str(error.value).splitlines()
    assert lines[0] == f"{path}: 7 bad rows"
    assert [line.split(":")[0].strip() for line in lines[1:]] == [f"line {n}" for n in range(2, 9)]
    assert "must be 'assistant'" in lines[2] and "must start with <reason>" in lines[4]
    assert "(tool) cannot follow a 'user' message" in lines[5] and "'content' must be a string" in lines[6]
    path.write_text("{not json\n")
    with pytest.raises(DataError, match=r"bad.jsonl:1: not valid JSON"):
        read_conversations(path)
