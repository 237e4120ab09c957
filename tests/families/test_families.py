"""Every supported family (Llama/SmolLM2, Qwen2.5, Qwen3), each as a tiny random model: the
engine decodes as transformers does on both of its attention paths, a rollout calls the tool
through the real sandbox, the learner takes a step on that rollout, the model saves and loads
as a plain directory with its card, and `rstar2 eval`'s library path runs on it."""

import asyncio
import json

import pytest
import torch

from rstar2.agent.card import new_card, read_card
from rstar2.agent.prompt import PromptConfig
from rstar2.agent.rollout import Agent, RolloutConfig
from rstar2.engines.base import SamplingParams
from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.eval.launch import evaluate
from rstar2.eval.runner import EvalSettings
from rstar2.models.loading import load_model, load_tokenizer
from rstar2.rl.learner import LocalLearner
from rstar2.run.recipe import validate_config
from rstar2.run.settings import learner_settings
from rstar2.sandbox import SandboxClient
from rstar2.training.batch import TrainSequence
from rstar2.training.policy import load_policy, save_policy
from tests.families import FAMILIES

TOOL = "execute_python_code_with_standard_io"
QUESTION = "What is 1234 times 5678?"


def forced_call(end_of_turn: str) -> str:
    arguments = json.dumps({"name": TOOL, "arguments": {"code": "print(1234 * 5678)", "input": ""}})
    return f"I will compute it.</reason>\n<tool_call>\n{arguments}\n</tool_call>{end_of_turn}"


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tiny_models):
    """(family name, model directory, a float32 engine on it)."""
    path = tiny_models[request.param]
    engine = HFEngine(HFEngineConfig(model=str(path), dtype="float32", min_shared_prefix=8, device="cpu"))
    yield request.param, path, engine
    engine.shutdown()


def reference_greedy(model, prompt: list[int], max_tokens: int) -> list[int]:
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=max_tokens, do_sample=False,
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("attention", ["cascade", "flat"])
def test_the_engine_decodes_as_transformers_on_both_attention_paths(family, attention):
    """'flat' is the GPU path's attention (a slot copy of each shared block, one fused pass),
    run here on the CPU; batched prompts sharing a long prefix exercise the shared blocks."""
    name, path, _ = family
    engine = HFEngine(HFEngineConfig(model=str(path), dtype="float32", min_shared_prefix=8,
                                     attention=attention, device="cpu", cuda_graphs=False))
    try:
        head = engine.tokenizer.encode("Solve the problem with a program and print the result. " * 2)
        prompts = [head + engine.tokenizer.encode(q) for q in ("2+2?", "12 * 34 =", "sum(range(9))")]
        outs = asyncio.run(engine.generate(prompts, SamplingParams(temperature=0, max_tokens=12)))
        for prompt, out in zip(prompts, outs):
            assert out.token_ids == reference_greedy(engine.model, prompt, 12)[: len(out.token_ids)], name
    finally:
        engine.shutdown()


def tool_rollout(engine, url: str, variant: str = "short"):
    async def run():
        async with SandboxClient(url, retries=0) as sandbox:
            agent = Agent(engine, engine.tokenizer, sandbox, RolloutConfig(
                temperature=0, max_response_tokens=160, max_turns=2, prompt=PromptConfig(variant=variant)))
            return await agent.rollout(QUESTION, forced_prefix=forced_call(agent.chat.end_of_turn.strip()))

    return asyncio.run(run())


def test_a_rollout_calls_the_tool_and_reads_its_output(family, sandbox_url):
    name, _, engine = family
    trajectory = tool_rollout(engine, sandbox_url, variant="rstar2")
    [call] = trajectory.tool_calls
    assert call.status == "ok" and call.output.strip() == str(1234 * 5678)
    tool_turn = next(t for t in trajectory.turns if t.role == "tool")
    assert f"<tool_response>\n{1234 * 5678}" in tool_turn.text and tool_turn.text.endswith("<reason>")
    assert set(trajectory.loss_mask[tool_turn.start:tool_turn.end]) == {0}
    assert any(trajectory.loss_mask[tool_turn.end:]), "the model generated after the tool response"
    decoded = engine.tokenizer.decode(trajectory.prompt_ids + trajectory.response_ids)
    assert decoded == trajectory.prompt_text + "".join(t.text for t in trajectory.turns)
    think = "<think>\n\n</think>\n\n<reason>"  # Qwen3 with thinking off, before every turn
    assert (think in trajectory.prompt_text and tool_turn.text.endswith(think)) == (name == "qwen3")


def test_a_train_step_then_save_and_load(family, sandbox_url, tmp_path):
    """The single-process learner's clipped update on two rollouts (advantages +1 and -1)
    changes the weights; the saved directory loads back to exactly those weights, with its
    tokenizer's chat template and its card."""
    name, path, engine = family
    config = validate_config({
        "name": name, "runs_dir": str(tmp_path), "model": {"path": str(path), "dtype": "float32"},
        "data": {"train": "unused.jsonl"},
        "rl": {"steps": 1, "prompts_per_step": 1, "group_size": 2,
               "optimizer": {"lr": 1e-3, "warmup_steps": 0}}})
    model = load_policy(config.model)
    tokenizer = load_tokenizer(path)
    rollouts = [tool_rollout(engine, sandbox_url) for _ in range(2)]
    sequences = [TrainSequence(t.prompt_ids, t.response_ids, t.loss_mask, t.logprobs, advantage)
                 for t, advantage in zip(rollouts, (1.0, -1.0))]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    learner = LocalLearner(learner_settings(config), model, engine)
    learner.restore(resume=False)
    stats, grad_norm = learner.learn(sequences)
    assert stats is not None and grad_norm > 0
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    card = new_card(PromptConfig(variant="short"), 160, 2, f"test ({name})")
    saved = save_policy(model, tokenizer, tmp_path / "final", card)
    loaded = load_model(saved, "float32")
    assert type(loaded) is type(model)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
    assert load_tokenizer(saved).chat_template == tokenizer.chat_template
    assert read_card(str(saved)) == card


def test_eval_runs_on_the_model(family, sandbox_url, tmp_path):
    name, path, _ = family
    bench = tmp_path / "tiny.jsonl"
    bench.write_text("".join(json.dumps({"id": f"p{i}", "problem": f"What is {i} + {i}?", "answer": str(2 * i)})
                             + "\n" for i in range(1, 4)))
    settings = EvalSettings(benchmarks=[str(bench)], model=str(path), dtype="float32", device="cpu", n=2,
                            temperature=0.6, max_tokens=24, max_turns=2, prompt="short")
    document = asyncio.run(evaluate(settings, tmp_path / "eval", sandbox_urls=[sandbox_url],
                                    show_progress=False))
    entry = document["benchmarks"]["tiny"]
    assert 0.0 <= entry["avg"] <= 1.0 and len(document["problems"]["tiny"]) == 3
    samples = (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()
    assert len(samples) == 6, name
