"""Rollouts with the real SmolLM2 model and the real sandbox.

The 135M base model rarely calls the tool by itself, so the tool path is exercised by
teacher-forcing the first assistant turn: a tool call ending with <|im_end|> (mask 0). The
sandbox runs the call and the model takes over after the tool response. Greedy decoding in
float32 keeps every run identical.
"""

import asyncio
import json

import pytest
import torch

from rstar2.agent.rollout import Agent, RolloutConfig
from rstar2.agent.trajectory import Trajectory
from rstar2.sandbox import SandboxClient, SandboxUnavailable

NAME = "execute_python_code_with_standard_io"


def forced_call(code: str) -> str:
    arguments = json.dumps({"name": NAME, "arguments": {"code": code, "input": ""}})
    return f"Let me compute it.\n<tool_call>\n{arguments}\n</tool_call><|im_end|>"


def rollout(hf_engine, url, question, forced="", **config):
    async def run():
        async with SandboxClient(url, retries=0) as client:
            agent = Agent(hf_engine, hf_engine.tokenizer, client,
                          RolloutConfig(**{"temperature": 0, "max_response_tokens": 256, **config}))
            return await agent.rollout(question, forced_prefix=forced)

    return asyncio.run(run())


def check_invariants(traj: Trajectory, tokenizer):
    n = len(traj.response_ids)
    assert len(traj.loss_mask) == n == len(traj.logprobs)
    assert all(lp == 0.0 for lp, m in zip(traj.logprobs, traj.loss_mask) if m == 0)
    assert all(lp < 0.0 or m == 0 for lp, m in zip(traj.logprobs, traj.loss_mask))
    assert [t.start for t in traj.turns] == [0] + [t.end for t in traj.turns[:-1]]
    assert traj.turns[-1].end == n
    for turn in traj.turns:
        if turn.role == "tool":
            assert set(traj.loss_mask[turn.start:turn.end]) == {0}
    decoded = tokenizer.decode(traj.prompt_ids + traj.response_ids)
    assert decoded == traj.prompt_text + "".join(t.text for t in traj.turns)
    assert Trajectory.model_validate_json(traj.model_dump_json()) == traj


@pytest.fixture(scope="module")
def tool_trajectory(hf_engine, sandbox_url):
    return rollout(hf_engine, sandbox_url, "What is 17*23?", forced_call("print(17*23)"),
                   max_turns=3)


def test_tool_call_round_trips_through_the_sandbox(tool_trajectory, tokenizer):
    traj = tool_trajectory
    check_invariants(traj, tokenizer)
    [call] = traj.tool_calls[:1]
    assert (call.status, call.output, call.error, call.code) == ("ok", "391", False,
                                                                 "print(17*23)")
    assert [t.role for t in traj.turns][:3] == ["assistant", "tool", "assistant"]
    assert "<tool_response>\n391\n</tool_response>" in traj.turns[1].text
    assert traj.turns[1].text.endswith("<|im_start|>assistant\n<reason>")
    assert traj.num_assistant_turns >= 2
    assert set(traj.loss_mask[: traj.turns[0].end]) == {0}  # the scripted turn
    assert 1 in traj.loss_mask[traj.turns[2].start : traj.turns[2].end]  # the model's turn


def test_sampled_logprobs_are_reproduced_by_a_forward_pass(hf_engine, sandbox_url, tokenizer):
    """No re-tokenisation drift: the trainer's forward pass over the trajectory's own ids
    gives back the log-probs recorded while sampling (temperature applied)."""
    traj = rollout(hf_engine, sandbox_url, "What is 17*23?", forced_call("print(17*23)"),
                   temperature=0.8, max_turns=3, max_response_tokens=160)
    check_invariants(traj, tokenizer)
    ids = torch.tensor([traj.prompt_ids + traj.response_ids])
    with torch.inference_mode():
        logits = hf_engine.model(ids).logits[0, len(traj.prompt_ids) - 1 : -1].float()
    recomputed = torch.log_softmax(logits / traj.temperature, -1)
    recomputed = recomputed.gather(1, torch.tensor(traj.response_ids)[:, None]).squeeze(1)
    mask = torch.tensor(traj.loss_mask, dtype=torch.bool)
    assert mask.sum() > 10
    torch.testing.assert_close(recomputed[mask], torch.tensor(traj.logprobs)[mask],
                               atol=2e-4, rtol=0)


@pytest.mark.parametrize("forced, status, expected", [
    ('<tool_call>\n{"name": "%s", "arguments": {"code": "print(1"\n</tool_call><|im_end|>' % NAME,
     "parse_error", "not valid JSON"),
    (forced_call("print(1/0)"), "error", "ZeroDivisionError"),
])
def test_errors_come_back_as_tool_responses(hf_engine, sandbox_url, tokenizer, forced, status,
                                            expected):
    traj = rollout(hf_engine, sandbox_url, "What is 1/0?", forced, max_turns=2,
                   max_response_tokens=192)
    check_invariants(traj, tokenizer)
    call = traj.tool_calls[0]
    assert call.status == status and call.error and expected in call.output
    assert expected in traj.turns[1].text


def test_timeouts_are_tool_errors(hf_engine, sandbox_url):
    traj = rollout(hf_engine, sandbox_url, "Loop.", forced_call("while True:\n    pass"),
                   max_turns=2, tool_timeout_s=0.5)
    assert traj.tool_calls[0].status == "timeout" and traj.num_tool_errors >= 1
    assert "Timeout" in traj.turns[1].text


def test_turn_limit_stops_before_running_the_last_turns_calls(hf_engine, sandbox_url):
    traj = rollout(hf_engine, sandbox_url, "What is 17*23?", forced_call("print(17*23)"),
                   max_turns=1)
    assert traj.stop_reason == "max_turns" and traj.num_assistant_turns == 1
    assert traj.tool_calls == [] and [t.role for t in traj.turns] == ["assistant"]


def test_token_budget_truncates(hf_engine, sandbox_url, tokenizer):
    traj = rollout(hf_engine, sandbox_url, "Write a long story.", max_response_tokens=12)
    assert traj.stop_reason == "max_tokens" and traj.truncated
    assert len(traj.response_ids) == 12
    check_invariants(traj, tokenizer)


def test_long_tool_output_is_clipped_with_a_marker(hf_engine, sandbox_url):
    traj = rollout(hf_engine, sandbox_url, "Count.", forced_call("for i in range(2000): print(i)"),
                   max_turns=2, max_tool_response_tokens=32)
    output = traj.tool_calls[0].output
    assert "tokens truncated" in output and output.startswith("0\n1\n") and "1999" in output


def test_unreachable_sandbox_raises_instead_of_faking_output(hf_engine):
    with pytest.raises(SandboxUnavailable):
        rollout(hf_engine, "http://127.0.0.1:9", "q", forced_call("print(1)"), max_turns=2)


def test_concurrent_rollouts_and_no_tool_stop(hf_engine, sandbox_url, tokenizer):
    async def run():
        async with SandboxClient(sandbox_url) as client:
            agent = Agent(hf_engine, tokenizer, client,
                          RolloutConfig(temperature=0, max_response_tokens=64))
            return await agent.rollouts(["What is 2+3?", "What is 7*8?", "Name a prime."])

    trajectories = asyncio.run(run())
    assert len(trajectories) == 3
    for traj in trajectories:
        check_invariants(traj, tokenizer)
        if traj.stop_reason in ("answer", "no_tool_call"):
            assert traj.turns[-1].role == "assistant"
            assert traj.response_ids[-1] in hf_engine.eos_ids
