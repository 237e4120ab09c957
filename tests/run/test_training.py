"""``run_training``, the one wiring of a run, on the real model, sandbox and verifier.

The recipe's rollout section reaches the training agent as it is: a recipe that cuts tool
output to 32 tokens from its end and runs one call per turn changes what a real rollout of
the trainer's agent does, against the defaults. A whole local run through
``run_training(config, LocalPlacement(config))`` filters the training set by
``data.keep_ids`` (the demo's RL phase goes through the same function), writes the resolved
``config.yaml``, a checkpoint and the exported model with its card.
"""

import asyncio
import json
from pathlib import Path

from rstar2.agent.card import read_card
from rstar2.data.problems import Problem
from rstar2.reward import Grader
from rstar2.rl.learner import LocalLearner
from rstar2.run.placement import LocalPlacement, Placement
from rstar2.run.recipe import load_config
from rstar2.run.settings import learner_settings
from rstar2.run.training import build_trainer, run_training
from rstar2.sandbox import SandboxClient
from rstar2.sft.dataset import split_tasks, write_problems
from rstar2.training.runlog import read_metrics

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "cpu-demo.yaml"
NAME = "execute_python_code_with_standard_io"
CALL = {"name": NAME, "arguments": {"code": "for i in range(300): print(i)", "input": ""}}
TWO_CALLS = ("Let me count twice.\n" + f"<tool_call>\n{json.dumps(CALL)}\n</tool_call>\n" * 2
             + "<|im_end|>")


def agent_rollout(hf_engine, sandbox_url, tmp_path, overrides):
    """One rollout of the trainer's own agent (``build_trainer``'s sampler), its first turn
    forced to make two calls that each print 300 lines."""
    config = load_config(RECIPE, [f"runs_dir={tmp_path}", "rollout.max_turns=2",
                                  "rollout.max_response_tokens=300", *overrides])

    async def run():
        async with SandboxClient([sandbox_url]) as sandbox:
            learner = LocalLearner(learner_settings(config),
                                   hf_engine.model, hf_engine)
            trainer = build_trainer(config, learner, hf_engine, hf_engine.tokenizer, sandbox, None,
                                    [Problem("count", "Count to 300.", "300")])
            assert trainer.sampler.agent.config is config.rollout  # unchanged, not translated
            return await trainer.sampler.agent.rollout("Count to 300.", forced_prefix=TWO_CALLS, seed=1)

    return asyncio.run(run())


def test_the_recipes_tool_limits_change_what_the_agent_does(hf_engine, sandbox_url, tmp_path, tokenizer):
    default = agent_rollout(hf_engine, sandbox_url, tmp_path, [])
    assert [call.status for call in default.tool_calls] == ["ok", "ok"]  # 4 calls per turn allowed
    for call in default.tool_calls:  # cut to 512 tokens in the middle: head and tail kept
        assert "tokens truncated" in call.output and call.output.startswith("0\n1\n")
        assert call.output.endswith("299") and len(tokenizer.encode(call.output)) > 400
    assert default.stop_reason == "max_tokens" and default.num_assistant_turns == 1  # no room left

    cut = agent_rollout(hf_engine, sandbox_url, tmp_path, [
        "rollout.max_tool_response_tokens=32", "rollout.tool_response_cut=end",
        "rollout.max_tool_calls_per_turn=1"])
    first, second = cut.tool_calls
    assert first.status == "ok" and first.output.startswith("0\n1\n") and "299" not in first.output
    assert first.output.endswith("tokens truncated)...\n") and len(tokenizer.encode(first.output)) < 50
    assert second.status == "parse_error" and "at most 1 tool calls are run per turn" in second.output
    assert cut.num_assistant_turns == 2  # the short tool turn left the model room to answer
    assert any(cut.loss_mask[cut.turns[2].start:cut.turns[2].end])  # sampled by the model


def test_a_local_run_filters_its_problems_and_writes_its_model(tmp_path, sandbox_url):
    problems = split_tasks(seed=0, sft=1, rl=1, heldout=10).heldout
    data = write_problems(tmp_path / "rl.jsonl", problems)
    keep = tmp_path / "keep.txt"
    keep.write_text(f"{problems[3].key}\n")
    config = load_config(RECIPE, [
        f"runs_dir={tmp_path / 'runs'}", "name=local", f"data.train={data}", f"data.keep_ids={keep}",
        f"sandbox.urls=[{sandbox_url}]", "engine.dtype=null", "model.compute_dtype=float32",
        "rl.steps=1", "rl.prompts_per_step=1", "rl.group_size=4", "rollout.max_response_tokens=16",
        "rollout.max_turns=1"])
    placement = LocalPlacement(config)
    assert isinstance(placement, Placement)
    with Grader(workers=1) as grader:
        final = asyncio.run(run_training(config, placement, grader=grader))
    rows = [json.loads(line) for line in (config.run_dir / "rollouts" / "step_1.jsonl").open()]
    assert {row["problem_id"] for row in rows} == {problems[3].key}  # data.keep_ids applied
    assert [row["step"] for row in read_metrics(config.run_dir)] == [1]
    assert load_config(config.run_dir / "config.yaml") == config
    assert (config.run_dir / "checkpoints" / "step_00000001" / "state.json").is_file()
    card = read_card(str(final))
    assert final == config.run_dir / "final" and (final / "config.json").is_file()
    assert card.trained_by == "rstar2 train (local)" and card.max_response_tokens == 16
