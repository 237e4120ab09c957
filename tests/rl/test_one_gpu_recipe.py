"""The one-GPU recipe for Qwen3-1.7B-Base, end to end on the CPU with a tiny random Qwen3 in its
place: SFT traces from the packaged GSM8K train, `rstar2 sft`, RL stage 1 from the SFT's last
checkpoint, stage 2 from stage 1's. Only the model, the sizes and the folders are overridden;
every other setting is the recipe's. Its memory plan is tested in tests/cluster/test_plan.py."""

from pathlib import Path

from rstar2.agent.card import read_card
from rstar2.models.loading import load_model
from rstar2.run.recipe import load_config
from rstar2.run.training import train
from rstar2.sft.config import load_sft_config
from rstar2.sft.dataset import write_gsm8k_conversations
from rstar2.sft.run import run_sft
from rstar2.training.runlog import read_metrics

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
SMALL_RL = ["rl.steps=1", "rl.prompts_per_step=2", "rl.group_size=2", "rollout.max_response_tokens=48",
            "rollout.max_turns=2", "engine.members=[{kind: hf, max_batch_size: 8, kv_budget_tokens: 8192}]",
            "checkpoint.every_steps=1"]


def test_the_pipeline_runs_on_a_tiny_qwen3(tiny_models, sandbox_url, tmp_path):
    model = [f"model.path={tiny_models['qwen3']}", "model.device=cpu", f"runs_dir={tmp_path / 'runs'}"]
    traces = tmp_path / "data" / "gsm8k-sft.jsonl"
    built = write_gsm8k_conversations("gsm8k_train", traces, limit=6)
    assert traces.read_text().count("\n") == len(built.traces) > 0

    sft = load_sft_config(RECIPES / "qwen3-1.7b-sft.yaml", [
        *model, f"data.train={traces}", "train.epochs=1", "train.batch_size=2", "train.micro_batch_tokens=4096"])
    assert sft.agent.prompt == "rstar2" and sft.model.gradient_checkpointing
    sft_final = run_sft(sft)
    assert read_card(str(sft_final)).prompt.variant == "rstar2"

    stages = {}
    for stage, start in (("stage1", sft.run_dir), ("stage2", tmp_path / "runs" / "qwen3-1.7b-stage1")):
        config = load_config(RECIPES / f"qwen3-1.7b-{stage}.yaml", [
            *model, *SMALL_RL, f"rl.init.checkpoint={start / 'checkpoints'}",
            f"sandbox.urls=[{sandbox_url}]"])
        assert config.data.train == "gsm8k_train" and config.rollout.prompt.variant == "rstar2"
        stages[stage] = train(config)
        assert [row["step"] for row in read_metrics(config.run_dir)] == [1]
        assert read_card(str(stages[stage])).max_response_tokens == config.rollout.max_response_tokens
    assert type(load_model(stages["stage2"])).__name__ == "Qwen3ForCausalLM"
