"""Your data, your reward, your tool, each through a real training step: the real small model,
sandbox and verifier, the recipe's own wiring (``training_problems``, ``open_reward``, the
agent's tool list), one short step each.

The untrained 135M model never calls a tool by itself, so the tool step writes each rollout's
first turn for it (``ForcedCalls``: a calculator call, with the model's own log-probs of those
tokens, so the update trains on them as on sampled ones); everything after is sampled.
"""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest
import torch

from rstar2.agent.rollout import Agent, RolloutConfig
from rstar2.agent.tools import ToolSpec
from rstar2.data.problems import read_problems
from rstar2.engines.base import Completion
from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.run.recipe import validate_config
from rstar2.run.training import open_reward, training_problems
from rstar2.sandbox import SandboxClient
from rstar2.training.policy import load_policy
from rstar2.training.runlog import read_metrics
from tests.data.sets import renamed, save_dataset, write_parquet
from tests.rl.test_trainer import local_trainer, rl_data  # noqa: F401  (rl_data: a fixture)

REWARDS = "tests.reward.custom_rewards"


@pytest.fixture(scope="module")
def engine():
    """One float32 policy for the module, sampled by a colocated engine."""
    model = load_policy(validate_config(config_tree("unused", "unused")).model)
    engine = HFEngine(HFEngineConfig(dtype="float32", max_batch_size=8), model=model)
    yield engine
    engine.shutdown()


def config_tree(tmp_path, train, **sections) -> dict:
    rollout = {"prompt": "short", "max_response_tokens": 24, "max_turns": 2, **sections.pop("rollout", {})}
    return {
        "name": "plugins", "runs_dir": f"{tmp_path}/runs", "seed": 3,
        "model": {"dtype": "float32", "compute_dtype": "float32"},
        "data": {"train": str(train), **sections.pop("data", {})}, "rollout": rollout,
        "rl": {"steps": 1, "prompts_per_step": 1, "group_size": 2, "micro_batch_tokens": 4096,
               "optimizer": {"lr": 1e-5, "warmup_steps": 0}, **sections.pop("rl", {})},
        "logging": {"rollouts_per_step": 1},
    }


def train_one_step(config, engine, sandbox_url) -> tuple[dict, list[dict]]:
    """One step as ``rstar2 train`` wires it: the training set through the recipe's data
    section, its reward, the trainer around the engine; returns the metrics and rollout rows."""
    problems = training_problems(config, engine.tokenizer)

    async def run(reward):
        async with SandboxClient([sandbox_url]) as sandbox:
            trainer = local_trainer(config, engine.model, engine, sandbox, reward, problems)
            trainer.restore(resume=False)
            await trainer.run()

    with open_reward(config) as reward:
        asyncio.run(run(reward))
    [metrics] = read_metrics(config.run_dir)
    rows = [json.loads(line) for line in (config.run_dir / "rollouts" / "step_1.jsonl").open()]
    return metrics, rows


@pytest.mark.parametrize("layout", ["parquet", "datasets"])
def test_a_set_with_renamed_fields_trains_a_step(layout, tmp_path, rl_data, engine, sandbox_url):  # noqa: F811
    rows = renamed(read_problems(rl_data))
    train = (write_parquet(tmp_path / "train.parquet", rows) if layout == "parquet"
             else save_dataset(tmp_path / "set", {"train": rows, "test": rows[:2]}))
    data = {"fields": {"problem": "question", "answer": "final_answer", "id": "uid"},
            **({"split": "train"} if layout == "datasets" else {})}
    config = validate_config(config_tree(tmp_path, train, data=data))
    metrics, logged = train_one_step(config, engine, sandbox_url)
    by_uid = {row["uid"]: row for row in rows}
    assert len(logged) == 4 and {row["problem_id"] for row in logged} <= by_uid.keys()
    assert all(row["gold"] == str(by_uid[row["problem_id"]]["final_answer"]) for row in logged)
    assert metrics["reward/errors"] == metrics["reward/timeouts"] == 0
    assert (config.run_dir / "checkpoints" / "step_00000001" / "state.json").is_file()


def test_a_custom_reward_trains_a_step(tmp_path, rl_data, engine, sandbox_url):  # noqa: F811
    config = validate_config(config_tree(tmp_path, rl_data, rl={"reward": f"{REWARDS}:odd_length"}))
    before = {name: p.detach().clone() for name, p in engine.model.named_parameters()}
    metrics, logged = train_one_step(config, engine, sandbox_url)
    assert [row["reward"] for row in logged] == [float(len(row["response"]) % 2) for row in logged]
    assert 0 < metrics["reward/accuracy"] < 1 and metrics["reward/length"] > 0  # the record's number
    assert "train/grad_norm" in metrics and metrics["reward/errors"] == 0
    assert any(not torch.equal(before[name], p) for name, p in engine.model.named_parameters())


@pytest.mark.parametrize("function, failure, counted", [("raises", "error", "reward/errors"),
                                                        ("hangs", "timeout", "reward/timeouts")])
def test_a_reward_that_raises_or_hangs_is_counted_and_the_step_goes_on(function, failure, counted, tmp_path,
                                                                       rl_data, engine, sandbox_url):  # noqa: F811
    config = validate_config(config_tree(tmp_path, rl_data, rl={"reward": f"{REWARDS}:{function}",
                                                                "reward_deadline_s": 0.5}))
    metrics, logged = train_one_step(config, engine, sandbox_url)
    assert metrics[counted] == 4 and metrics["reward/accuracy"] == 0
    assert {row["reward_failure"] for row in logged} == {failure} and all(row["reward_message"] for row in logged)
    assert metrics["roc/dropped_share"] == 1.0  # four zeros: no signal, no update, and no error


class ForcedCalls:
    """The real engine, except that the first turn of each trajectory is a calculator call of
    the next expression of ``expressions`` (module docstring)."""

    def __init__(self, engine: HFEngine, expressions: list[str]):
        self.engine = engine
        self.expressions = itertools.cycle(expressions)

    def __getattr__(self, name):
        return getattr(self.engine, name)

    async def generate(self, prompts, params):
        return [self.forced(prompt, next(self.expressions), params.temperature)
                if self.engine.tokenizer.decode(prompt).count("<|im_start|>assistant") == 1  # the first turn
                else (await self.engine.generate([prompt], params))[0] for prompt in prompts]

    def forced(self, prompt: list[int], expression: str, temperature: float) -> Completion:
        call = json.dumps({"name": "calculator", "arguments": {"expression": expression}})
        ids = self.engine.tokenizer.encode(f"<tool_call>{call}</tool_call><|im_end|>", add_special_tokens=False)
        with torch.no_grad():
            logits = self.engine.model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1].float()
        logprobs = torch.log_softmax(logits / temperature, -1).gather(1, torch.tensor(ids)[:, None])[:, 0]
        return Completion(token_ids=ids, logprobs=logprobs.tolist(), finish_reason="stop")


def test_the_calculator_in_a_rollout(engine, sandbox_url):
    config = RolloutConfig(temperature=0, max_response_tokens=96, max_turns=2,
                           tools=(ToolSpec(use="python"), ToolSpec(use="calculator")))
    call = json.dumps({"name": "calculator", "arguments": {"expression": "17 * 23"}})

    async def run():
        async with SandboxClient([sandbox_url]) as sandbox:
            agent = Agent(engine, engine.tokenizer, sandbox, config)
            return agent, await agent.rollout("What is 17*23?", forced_prefix=f"<tool_call>{call}</tool_call><|im_end|>")

    agent, trajectory = asyncio.run(run())
    assert '"name": "calculator"' in trajectory.prompt_text and '"name": "execute_python_code_with_standard_io"' \
        in trajectory.prompt_text  # the paper's prompt lists both schemas
    [record, *_] = trajectory.tool_calls
    assert (record.tool, record.arguments, record.status, record.output, record.error) == (
        "calculator", {"expression": "17 * 23"}, "ok", "391", False)
    tool_turn = next(turn for turn in trajectory.turns if turn.role == "tool")
    assert "<tool_response>\n391\n</tool_response>" in tool_turn.text
    assert set(trajectory.loss_mask[tool_turn.start:tool_turn.end]) == {0}


def test_the_calculator_in_a_train_step_and_its_failures_in_the_tool_error_ratio(tmp_path, rl_data, engine,  # noqa: F811
                                                                                 sandbox_url):
    config = validate_config(config_tree(tmp_path, rl_data, rollout={"tools": ["python", "calculator"],
                                                                     "max_response_tokens": 64},
                                         rl={"reward": f"{REWARDS}:no_division_by_zero"}))
    metrics, logged = train_one_step(config, ForcedCalls(engine, ["17 * 23", "1/0"]), sandbox_url)
    calls = [call for row in logged for call in row["tool_calls"]]
    first = [row["tool_calls"][0] for row in logged]
    assert sorted((call["tool"], call["status"], call["output"]) for call in first) == [
        ("calculator", "error", "Error: division by zero."), ("calculator", "error", "Error: division by zero."),
        ("calculator", "ok", "391"), ("calculator", "ok", "391")]
    failed = sum(call["status"] != "ok" for call in calls)
    assert metrics["tools/calls_per_rollout"] == len(calls) / 4
    assert metrics["tools/error_ratio"] == pytest.approx(failed / len(calls))
    assert metrics["roc/tool_error_penalty_mean"] == pytest.approx(
        sum(sum(c["status"] != "ok" for c in row["tool_calls"]) / len(row["tool_calls"]) for row in logged) / 4)
    assert [row["reward"] for row in logged] == [float(call["output"] == "391") for call in first]
    assert "train/grad_norm" in metrics  # two right, two wrong: the step learns from them
