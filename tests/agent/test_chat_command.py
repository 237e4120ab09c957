"""`rstar2 chat`: one-shot runs on the embedded model, the tool-call display, clear errors."""

import asyncio
import json

from rich.console import Console
from typer.testing import CliRunner

from rstar2.agent.prompt import PromptConfig
from rstar2.agent.rollout import Agent, RolloutConfig
from rstar2.cli import app
from rstar2.cli import chat as chat_command
from rstar2.sandbox import SandboxClient

runner = CliRunner()


def test_one_shot_prompt_with_the_embedded_model(sandbox_url):
    result = runner.invoke(app, ["chat", "--prompt", "What is 17*23? Use Python.",
                                 "--sandbox-url", sandbox_url, "--max-tokens", "24",
                                 "--temperature", "0", "--dtype", "float32"])
    assert result.exit_code == 0, result.output
    assert "<reason>" in result.output and "<|im_end|>" not in result.output
    assert ("without calling the Python tool" in result.output
            or "tool call" in result.output)


def test_no_tools_needs_no_sandbox():
    result = runner.invoke(app, ["chat", "--prompt", "Say hi.", "--no-tools", "--max-tokens",
                                 "16", "--temperature", "0", "--dtype", "float32"])
    assert result.exit_code == 0, result.output
    assert "without calling" not in result.output


def test_tool_calls_and_outputs_are_shown(hf_engine, sandbox_url, monkeypatch):
    call = json.dumps({"name": "execute_python_code_with_standard_io",
                       "arguments": {"code": "print(17*23)", "input": ""}})

    async def run():
        async with SandboxClient(sandbox_url) as client:
            agent = Agent(hf_engine, hf_engine.tokenizer, client,
                          RolloutConfig(temperature=0, max_response_tokens=48, max_turns=2))
            return await agent.rollout("What is 17*23?",
                                       f"<tool_call>\n{call}\n</tool_call><|im_end|>")

    trajectory = asyncio.run(run())
    screen = Console(record=True, width=100)
    monkeypatch.setattr(chat_command, "console", screen)
    chat_command.show(trajectory, tools=True)
    text = screen.export_text()
    assert "tool call" in text and "print(17*23)" in text
    assert "sandbox: ok" in text and "391" in text
    assert "<|im_end|>" not in text and "without calling" not in text


def test_bad_options_fail_clearly():
    missing = runner.invoke(app, ["chat", "--prompt", "x", "--model", "/no/such/model"])
    assert missing.exit_code == 2 and "not found" in missing.output
    no_url = runner.invoke(app, ["chat", "--prompt", "x", "--engine", "openai"])
    assert no_url.exit_code == 2 and "--base-url" in no_url.output
    bad_engine = runner.invoke(app, ["chat", "--prompt", "x", "--engine", "tpu"])
    assert bad_engine.exit_code == 2 and "unknown engine 'tpu': choose one of hf" in bad_engine.output
    serve = runner.invoke(app, ["serve-model", "--model", "/no/such/model"])
    assert serve.exit_code == 2 and "not found" in serve.output


def test_without_the_answer_tag_the_last_box_is_shown_as_the_answer(hf_engine, monkeypatch):
    """A model that uses no tags (--no-answer-tag) still gets its answer shown."""

    async def run():
        config = RolloutConfig(temperature=0, max_response_tokens=32, max_turns=1,
                               prompt=PromptConfig(variant="no_tools"))
        agent = Agent(hf_engine, hf_engine.tokenizer, None, config)
        return await agent.rollout("What is 2+2?", "2 + 2 = \\boxed{4}.<|im_end|>")

    trajectory = asyncio.run(run())
    shown = {}
    for answer_tag in (True, False):
        screen = Console(record=True, width=100)
        monkeypatch.setattr(chat_command, "console", screen)
        chat_command.show(trajectory, tools=False, answer_tag=answer_tag)
        shown[answer_tag] = screen.export_text()
    assert "answer" not in shown[True].split("2 + 2 = \\boxed{4}.")[-1]
    assert "\\boxed{4}" in shown[False].split("2 + 2 = \\boxed{4}.")[-1]
