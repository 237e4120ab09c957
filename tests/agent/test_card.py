"""A saved model remembers how it was trained (rstar2.json), and chat, eval and serve-model use
it unless told otherwise: tried on a real folder saved from the real small model."""

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from rstar2.agent.card import CARD_FILE, CardError, new_card, read_card, write_card
from rstar2.agent.prompt import PromptConfig
from rstar2.agent.tools import ToolSpec
from rstar2.cli import app
from rstar2.cli.chat import chat_rollout_config
from rstar2.cli.options import trained_card
from rstar2.eval.launch import rollout_config
from rstar2.eval.runner import EvalSettings
from rstar2.serve.server import create_app
from rstar2.training.policy import save_policy
from tests.engines.serving import serving

runner = CliRunner()


@pytest.fixture(scope="module")
def trained_dir(hf_engine, tmp_path_factory):
    """The real model saved the way `rstar2 train` saves final/, with a short-prompt card."""
    card = new_card(PromptConfig(variant="short", tool_name="python"), max_response_tokens=24,
                    max_turns=2, trained_by="test")
    return save_policy(hf_engine.model, hf_engine.tokenizer,
                       tmp_path_factory.mktemp("run") / "final", card)


def test_the_card_lies_beside_the_weights(trained_dir):
    card = read_card(str(trained_dir))
    assert (trained_dir / "config.json").is_file() and (trained_dir / CARD_FILE).is_file()
    assert (card.prompt.variant, card.prompt.tool_name) == ("short", "python")
    assert card.tool["function"]["name"] == "python"
    assert (card.max_response_tokens, card.max_turns, card.answer_tag) == (24, 2, True)
    assert read_card("default") is None


def test_a_published_model_keeps_its_card_through_the_hub_cache(trained_dir, tmp_path, monkeypatch):
    """A model downloaded by hub id is asked the way it was trained: its card is one of the
    files a download fetches, and read by hub id; a server's model name is not looked up."""
    import huggingface_hub

    from rstar2.models.hub import CONFIG_FILES
    from tests.families import install_in_hf_cache

    assert CARD_FILE in CONFIG_FILES
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    install_in_hf_cache(tmp_path, "someone/published-demo", trained_dir)
    assert read_card("someone/published-demo") == read_card(str(trained_dir))
    assert read_card("someone/published-demo", hub=False) is None
    assert read_card("someone/not-in-the-cache") is None  # loading the model says why


def test_the_card_keeps_the_tools_a_model_was_trained_with_for_chat_and_eval(tmp_path):
    tools = (ToolSpec(use="python"), ToolSpec(use="calculator"))
    write_card(tmp_path, new_card(PromptConfig(variant="short"), 24, 2, "test", tools=tools))
    card = read_card(str(tmp_path))
    assert card.tools == tools
    assert "tool execute_python_code_with_standard_io, tool calculator" in card.summary()
    assert chat_rollout_config(card, True, None, None, None, 0.0).tools == tools
    settings = EvalSettings(benchmarks=["gsm8k"], tool_specs=card.tools)
    assert rollout_config(settings).tools == tools

    older = json.loads((tmp_path / CARD_FILE).read_text())
    del older["tools"]  # a card written before models recorded their tools
    (tmp_path / CARD_FILE).write_text(json.dumps(older))
    assert read_card(str(tmp_path)).tools == (ToolSpec(use="python"),)


def test_a_broken_card_is_a_clear_error(tmp_path):
    (tmp_path / CARD_FILE).write_text('{"prompt": {"variant": "long"}}')
    with pytest.raises(CardError, match="rstar2.json: not a model card"):
        read_card(str(tmp_path))


def test_eval_asks_the_model_the_way_it_was_trained(trained_dir, tmp_path):
    common = ["eval", "--bench", "gsm8k", "--limit", "1", "-n", "1", "--no-tools", "--quiet",
              "--temperature", "0", "--model", str(trained_dir)]
    result = runner.invoke(app, [*common, "--out", str(tmp_path / "card")])
    assert result.exit_code == 0, result.output
    assert f"using {trained_dir / CARD_FILE}: prompt short" in result.output
    config = json.loads((tmp_path / "card" / "config.json").read_text())
    assert (config["prompt"], config["tool_name"], config["max_tokens"], config["max_turns"]) == (
        "short", "python", 24, 2)

    told = runner.invoke(app, [*common, "--out", str(tmp_path / "told"), "--prompt-variant",
                               "rstar2", "--max-tokens", "16", "--max-turns", "1"])
    assert told.exit_code == 0, told.output
    config = json.loads((tmp_path / "told" / "config.json").read_text())
    assert (config["prompt"], config["max_tokens"], config["max_turns"]) == ("rstar2", 16, 1)


def test_chat_uses_the_card_unless_told_otherwise(trained_dir, sandbox_url):
    result = runner.invoke(app, ["chat", "--prompt", "What is 12345*6789?", "--model",
                                 str(trained_dir), "--sandbox-url", sandbox_url,
                                 "--temperature", "0", "--dtype", "float32"])
    assert result.exit_code == 0, result.output
    assert f"using {trained_dir / CARD_FILE}: prompt short, tool python" in result.output
    card = read_card(str(trained_dir))
    trained = chat_rollout_config(card, True, None, None, None, 0.0)
    assert (trained.prompt.variant, trained.prompt.tool_name) == ("short", "python")
    assert (trained.max_response_tokens, trained.max_turns) == (24, 2)
    told = chat_rollout_config(card, True, "rstar2", 5, 100, 0.0)
    assert (told.prompt.variant, told.max_turns, told.max_response_tokens) == ("rstar2", 5, 100)
    assert chat_rollout_config(card, False, None, None, None, 0.0).prompt.variant == "no_tools"
    plain = chat_rollout_config(None, True, None, None, None, 0.0)
    assert (plain.prompt.variant, plain.max_turns) == ("rstar2", 10)


def test_serve_model_serves_the_card_to_clients(hf_engine, trained_dir):
    card = read_card(str(trained_dir))
    with serving(create_app(hf_engine, "final", card.model_dump(mode="json"))) as url:
        entry = httpx.get(f"{url}/models").json()["data"][0]
        assert entry["id"] == "final" and entry["rstar2"]["prompt"]["variant"] == "short"
        assert trained_card("final", None, url) == card  # a served name: the server's card
    with serving(create_app(hf_engine, "smol")) as url:
        assert "rstar2" not in httpx.get(f"{url}/models").json()["data"][0]
        assert trained_card("smol", None, url) is None


def test_chat_shows_a_call_of_another_tool_by_its_name(monkeypatch):
    from rich.console import Console

    from rstar2.agent.trajectory import ToolCallRecord
    from rstar2.cli import chat

    monkeypatch.setattr(chat, "console", Console(record=True, width=100))
    chat.show_call(ToolCallRecord(turn=0, tool="calculator", arguments={"expression": "6*7"}, code=None,
                                  raw="...", status="ok", output="42", error=False))
    shown = chat.console.export_text()
    assert "tool call: calculator" in shown and '{"expression": "6*7"}' in shown
    assert "calculator: ok" in shown and "42" in shown and "sandbox" not in shown


def test_chat_refuses_a_card_whose_tool_does_not_import_in_one_line(tiny_models, tmp_path):
    import shutil

    folder = shutil.copytree(tiny_models["llama"], tmp_path / "model")
    write_card(folder, new_card(PromptConfig(variant="short"), 24, 2, "test",
                                tools=(ToolSpec(use="tests.agent.nowhere:Tool"),)))
    result = runner.invoke(app, ["chat", "--model", str(folder), "--prompt", "hi", "--dtype", "float32"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot import tests.agent.nowhere" in errors[0]
    assert "Traceback" not in result.output


def test_a_tool_module_in_the_working_directory_is_found_without_pythonpath(tiny_models, tmp_path):
    import shutil
    import subprocess
    import sys

    (tmp_path / "my_tools.py").write_text(
        "from rstar2.agent.tools import function_schema\n\n"
        "class Echo:\n"
        "    name = 'echo'\n"
        "    schema = function_schema('echo', 'Say it back.', {'text': {'type': 'string'}})\n\n"
        "    async def call(self, arguments):\n"
        "        return arguments.get('text', '')\n")
    folder = shutil.copytree(tiny_models["llama"], tmp_path / "model")
    write_card(folder, new_card(PromptConfig(variant="short"), 16, 1, "test", tools=(ToolSpec(use="my_tools:Echo"),)))
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    rstar2 = Path(sys.executable).with_name("rstar2")  # the console script: no "" on its sys.path
    result = subprocess.run([str(rstar2), "chat", "--model", str(folder), "--prompt", "hi", "--dtype", "float32",
                             "--temperature", "0", "--max-tokens", "16"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
