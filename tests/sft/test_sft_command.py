"""`rstar2 sft` on a tiny random Qwen3: metrics and a card like `train`, a resumed run that ends
on exactly the weights of an uninterrupted one, bad input refused before anything is written."""

import asyncio
import json
import subprocess
import sys

import pytest
import torch
import yaml

from rstar2.agent.card import read_card
from rstar2.agent.prompt import ChatFormat, PromptConfig
from rstar2.data import DataError
from rstar2.models.loading import load_model
from rstar2.sandbox import SandboxClient
from rstar2.sft import train as sft_train_module
from rstar2.sft.config import load_sft_config
from rstar2.sft.dataset import sft_traces, split_tasks, write_traces
from rstar2.sft.run import run_sft
from rstar2.training.checkpoint import RunExists
from rstar2.training.runlog import read_metrics

STEPS = 8  # 8 conversations, batches of 2, 2 epochs


@pytest.fixture(scope="module")
def traces_file(tmp_path_factory, tokenizer, sandbox_url):
    """Eight of the demo's traces, written as `rstar2 sft` reads them."""
    prompt = PromptConfig(variant="short")
    tasks = split_tasks(seed=5, sft=6, sft_hard=2, rl=1, heldout=2).sft

    async def play():
        async with SandboxClient([sandbox_url]) as sandbox:
            return await sft_traces(tasks, tokenizer, sandbox, prompt, broken_share=0.25, seed=5)

    path = tmp_path_factory.mktemp("sft-data") / "traces.jsonl"
    return write_traces(path, [t.key for t in tasks], [t.question for t in tasks], asyncio.run(play()),
                        ChatFormat(tokenizer, prompt).end_of_turn)


@pytest.fixture
def recipe(tmp_path, tiny_models, traces_file):
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump({
        "name": "tiny-sft", "runs_dir": str(tmp_path / "runs"),
        "model": {"path": str(tiny_models["qwen3"]), "device": "cpu"},
        "data": {"train": str(traces_file)},
        "agent": {"prompt": "short", "max_response_tokens": 256, "max_turns": 3},
        "train": {"epochs": 2, "batch_size": 2, "lr": 3e-3, "warmup_steps": 1, "seed": 1},
        "checkpoint": {"every_steps": 2, "keep_last": 2},
    }))
    return path


def test_a_run_logs_like_train_and_ends_in_a_model_with_its_card(recipe):
    config = load_sft_config(recipe)
    final = run_sft(config)
    rows = read_metrics(config.run_dir)
    assert [row["step"] for row in rows] == list(range(1, STEPS + 1))
    assert all(row["sft/tokens"] > 0 and row["time/step"] > 0 and row["sft/sequences_per_s"] > 0 for row in rows)
    assert rows[-1]["sft/loss"] < 0.8 * rows[0]["sft/loss"]  # it learns the traces
    card = read_card(str(final))
    assert card.prompt.variant == "short" and (card.max_response_tokens, card.max_turns) == (256, 3)
    assert card.trained_by == "rstar2 sft (tiny-sft)"
    assert type(load_model(final)).__name__ == "Qwen3ForCausalLM"
    recorded = yaml.safe_load((config.run_dir / "config.yaml").read_text())["train"]
    assert recorded["epochs"] == 2 and recorded["compute_dtype"] in ("float32", "bfloat16")  # 'auto' resolved
    assert sorted(p.name for p in (config.run_dir / "checkpoints").iterdir()) == ["step_00000006", "step_00000008"]
    with pytest.raises(RunExists, match="--resume"):
        run_sft(config)


def test_a_resumed_run_ends_on_the_weights_of_an_uninterrupted_one(recipe, traces_file, tmp_path, monkeypatch):
    whole = load_sft_config(recipe, ["name=whole"])
    expected = load_model(run_sft(whole)).state_dict()
    broken = load_sft_config(recipe, ["name=broken"])
    real_step, taken = sft_train_module.sft_step, []

    def crash_at_step_5(*args):
        if len(taken) == 4:
            raise KeyboardInterrupt  # killed during step 5, after step 4's checkpoint
        taken.append(1)
        return real_step(*args)

    monkeypatch.setattr(sft_train_module, "sft_step", crash_at_step_5)
    with pytest.raises(KeyboardInterrupt):
        run_sft(broken)
    monkeypatch.setattr(sft_train_module, "sft_step", real_step)
    fewer = tmp_path / "fewer.jsonl"
    fewer.write_text("".join(traces_file.read_text().splitlines(keepends=True)[:6]))
    with pytest.raises(DataError, match="was trained on 8 conversations .* now gives 6"):
        run_sft(load_sft_config(recipe, ["name=broken", f"data.train={fewer}"]), resume=True)
    final = run_sft(broken, resume=True)
    resumed = load_model(final).state_dict()
    assert all(torch.equal(resumed[name], tensor) for name, tensor in expected.items())
    assert [row["step"] for row in read_metrics(broken.run_dir)] == list(range(1, STEPS + 1))


def test_a_malformed_row_is_refused_by_line_and_nothing_is_written(recipe, traces_file, tmp_path):
    lines = traces_file.read_text().splitlines()
    row = json.loads(lines[2])
    row["messages"][1]["content"] = row["messages"][1]["content"].removeprefix("<reason>")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines[:2], json.dumps(row), *lines[3:]]) + "\n")
    config = load_sft_config(recipe, [f"data.train={bad}"])
    with pytest.raises(DataError, match=r"1 bad row\n  line 3: message 1 \(assistant\) must start with <reason>"):
        run_sft(config)
    assert not config.run_dir.exists()


def rstar2(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rstar2", *args], capture_output=True, text=True, timeout=300)


def test_the_command_trains_and_refuses_bad_input_in_one_line(recipe, tmp_path):
    done = rstar2("sft", str(recipe), "--set", "train.epochs=1", "--name", "cli")
    assert done.returncode == 0, done.stderr
    assert "step 4/4" in done.stdout and f"trained model in {tmp_path / 'runs' / 'cli' / 'final'}" in done.stdout
    typo = rstar2("sft", str(recipe), "--set", "model.compute_dtype=bfloat16")
    assert typo.returncode == 2
    assert typo.stderr.strip().splitlines()[-1] == (
        f"error: {recipe}: model.compute_dtype: unknown field (did you mean train.compute_dtype?)")
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (tmp_path / "gpt2" / "model.safetensors").write_bytes(b"")
    unsupported = rstar2("sft", str(recipe), "--set", f"model.path={tmp_path / 'gpt2'}", "--name", "gpt2")
    assert unsupported.returncode == 2 and "is a 'gpt2' model" in unsupported.stderr
    assert len([line for line in unsupported.stderr.splitlines() if line.startswith("error:")]) == 1
    assert not (tmp_path / "runs" / "gpt2").exists()
