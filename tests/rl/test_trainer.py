"""The trainer on the real model, real sandbox and real verifier.

Fast: one tiny step of the untrained model (which never answers in the rewarded format, so RoC
drops its group) writes every record and leaves the weights alone. Slow: after a short SFT on
generated tool-use traces, two steps complete and change the weights; resuming continues with
the saved weights, data position and step.
"""

import asyncio
import json

import pytest
import torch

from rstar2.data.problems import read_problems
from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.recipe import ConfigError
from rstar2.reward import Grader
from rstar2.rl.learner import LocalLearner
from rstar2.rl.prompt_order import PromptOrder
from rstar2.rl.silence import NothingLearned
from rstar2.rl.trainer import Trainer
from rstar2.run.recipe import validate_config
from rstar2.run.settings import learner_settings, trainer_settings
from rstar2.run.training import build_trainer
from rstar2.sandbox import SandboxClient
from rstar2.sft.config import SFTSettings
from rstar2.sft.dataset import sft_traces, split_tasks, write_problems
from rstar2.sft.train import as_sequence, sft_train
from rstar2.training.policy import load_policy
from rstar2.training.runlog import read_metrics

STEP_KEYS = {
    "reward/accuracy", "roc/dropped_share", "tools/calls_per_rollout", "tools/error_ratio",
    "tools/error_ratio_in_positives", "roc/format_penalty_mean", "response/length_mean",
    "response/length_max", "response/truncated_ratio", "time/rollout", "time/tools", "time/reward",
    "time/update", "time/step",
}
UPDATE_KEYS = {"reward/mean", "loss/entropy", "loss/clip_fraction", "train/grad_norm"}


def make_config(tmp_path, data, engine=None, **rl):
    return validate_config({
        **({"engine": engine} if engine else {}),
        "name": "t", "runs_dir": str(tmp_path / "runs"), "seed": 7,
        "model": {"dtype": "float32", "compute_dtype": "bfloat16"},
        "data": {"train": str(data)},
        "rollout": {"prompt": "short", "max_response_tokens": rl.pop("max_tokens", 200), "max_turns": 3},
        "rl": {"steps": 2, "prompts_per_step": 2, "group_size": 4, "micro_batch_tokens": 4096,
               "optimizer": {"lr": 2e-5, "warmup_steps": 1}, **rl},
        "logging": {"rollouts_per_step": 1},
    })


def local_trainer(config, model, engine, sandbox, grader, problems, tokenizer=None):
    """The run's step wiring (``build_trainer``) around a ``LocalLearner`` of ``model``."""
    tokenizer = tokenizer or engine.tokenizer
    learner = LocalLearner(learner_settings(config), model, engine)
    return build_trainer(config, learner, engine, tokenizer, sandbox, grader, problems)


async def train(config, model, engine, sandbox_url, resume=False, on_learn=None):
    with Grader(workers=1) as grader:
        async with SandboxClient([sandbox_url]) as sandbox:
            trainer = local_trainer(config, model, engine, sandbox, grader, read_problems(config.data.train))
            if on_learn is not None:
                learn = trainer.learner.learn
                trainer.learner.learn = lambda sequences: (on_learn(), learn(sequences))[1]
            trainer.restore(resume)
            await trainer.run()
            return trainer


@pytest.fixture
def rl_data(tmp_path):
    return write_problems(tmp_path / "rl.jsonl", split_tasks(seed=0, sft=1, rl=1, heldout=20).heldout[:10])


def snapshot(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_a_step_without_learning_signal_is_recorded_and_leaves_the_weights(tmp_path, rl_data, sandbox_url):
    config = make_config(tmp_path, rl_data, steps=1, prompts_per_step=1, group_size=2, max_tokens=24)
    model = load_policy(config.model)
    engine = HFEngine(HFEngineConfig(dtype="float32", max_batch_size=4), model=model)
    before = snapshot(model)
    sample, cached = engine.generate, []

    async def generate(prompts, params):  # the slot cache each turn leaves behind
        completions = await sample(prompts, params)
        cached.append(engine.table.cache.k.numel())
        return completions
    engine.generate = generate
    at_update = []
    try:
        asyncio.run(train(config, model, engine, sandbox_url,
                          on_learn=lambda: at_update.append(engine.table.cache.k.numel())))
    finally:
        engine.shutdown()
    assert max(cached) > 0 and at_update == [0]  # sampling done, the update has that memory
    (row,) = read_metrics(config.run_dir)
    assert STEP_KEYS <= row.keys() and not UPDATE_KEYS & row.keys()
    assert row["reward/accuracy"] == 0.0 and row["roc/dropped_share"] == 1.0
    assert row["weights/version_min"] == row["weights/version_max"] == row["weights/version_lag"] == 0
    rollouts = [json.loads(line) for line in (config.run_dir / "rollouts" / "step_1.jsonl").open()]
    assert len(rollouts) == 4 and {r["group_dropped"] for r in rollouts} == {"uniform_rewards"}
    # What the model samples (where it stops, whether it calls the tool) depends on the CPU's
    # numerics: the step's figures must agree with its rollouts, whatever they are.
    lengths = [r["response_tokens"] for r in rollouts]
    assert row["response/length_max"] == max(lengths) <= 24
    assert row["response/truncated_ratio"] == sum(r["stop_reason"] == "max_tokens" for r in rollouts) / 4
    for rollout in rollouts:  # each token with its sampled log-prob (null if not sampled), for `rstar2 view`
        assert len(rollout["token_logprobs"]) == rollout["response_tokens"] >= 1
        assert all(isinstance(piece, str) for piece, _ in rollout["token_logprobs"])
        sampled = [logprob for _, logprob in rollout["token_logprobs"] if logprob is not None]
        assert sampled and all(logprob <= 0 for logprob in sampled)
        if not rollout["tool_calls"]:  # without a tool response every token was sampled
            assert len(sampled) == rollout["response_tokens"]
        assert rollout["weight_version"] == 0  # the initial push, before step 1
        began, ended, graded = rollout["span_s"]
        assert 0 <= began <= ended <= graded <= row["time/rollout"] + row["time/reward"] + 1e-6
    assert (config.run_dir / "checkpoints" / "step_00000001" / "state.json").is_file()
    after = snapshot(model)
    assert all(torch.equal(before[name], after[name]) for name in before)


@pytest.mark.slow
def test_two_steps_after_sft_change_the_weights_and_resume_continues(tmp_path, sandbox_url):
    splits = split_tasks(seed=11, sft=24, sft_hard=8, rl=16, heldout=2)
    data = write_problems(tmp_path / "rl.jsonl", splits.rl)  # hard: the SFT model solves some
    config = make_config(tmp_path, data)
    model = load_policy(config.model)
    engine = HFEngine(HFEngineConfig(dtype="bfloat16", max_batch_size=16))  # its own copy

    async def make_traces():
        async with SandboxClient([sandbox_url]) as sandbox:
            return await sft_traces(splits.sft, engine.tokenizer, sandbox, config.rollout.prompt)

    traces = asyncio.run(make_traces())
    sft_train(model, [as_sequence(t) for t in traces], SFTSettings(epochs=3, batch_size=8, lr=3e-4, warmup_steps=2,
                                                                  compute_dtype="bfloat16"))
    before = snapshot(model)
    try:
        trainer = asyncio.run(train(config, model, engine, sandbox_url))
    finally:
        engine.shutdown()
    rows = read_metrics(config.run_dir)
    assert [row["step"] for row in rows] == [1, 2]
    assert any(UPDATE_KEYS <= row.keys() for row in rows)
    assert max(row["reward/accuracy"] for row in rows) > 0
    after = snapshot(model)
    assert any(not torch.equal(before[name], after[name]) for name in before)

    resumed_model = load_policy(config.model)
    engine = HFEngine(HFEngineConfig(dtype="bfloat16", max_batch_size=16))
    try:
        resumed = local_trainer(config.model_copy(update={"rl": config.rl.model_copy(update={"steps": 3})}),
                                resumed_model, engine, None, None, read_problems(data))
        resumed.restore(resume=True)
    finally:
        engine.shutdown()
    assert resumed.completed_steps == 2
    assert resumed.order.position() == trainer.order.position()
    assert resumed.order.next_batch(2) == trainer.order.next_batch(2)
    resumed_weights = snapshot(resumed_model)
    assert all(torch.equal(after[name], resumed_weights[name]) for name in after)
    assert (resumed.learner.optimizer.state_dict()["state"].keys()
            == trainer.learner.optimizer.state_dict()["state"].keys())


def test_restore_takes_the_step_and_data_position_from_the_learners_checkpoint(tmp_path, rl_data, sandbox_url):
    config = make_config(tmp_path, rl_data, steps=1, prompts_per_step=1, group_size=2, max_tokens=8)
    model = load_policy(config.model)
    engine = HFEngine(HFEngineConfig(dtype="float32", max_batch_size=4), model=model)
    try:
        trainer = asyncio.run(train(config, model, engine, sandbox_url))
        longer = config.model_copy(update={"rl": config.rl.model_copy(update={"steps": 2})})
        resumed = local_trainer(longer, load_policy(config.model), engine, None, None, read_problems(rl_data))
        resumed.restore(resume=True)
    finally:
        engine.shutdown()
    assert resumed.completed_steps == 1 and trainer.completed_steps == 1
    fresh = PromptOrder(len(resumed.problems), config.seed)
    assert resumed.order.position() == trainer.order.position() != fresh.position()


def test_a_run_that_trains_nothing_for_a_whole_pass_stops_checkpointed_and_fails(tmp_path, sandbox_url):
    """The untrained model never answers in the rewarded format: no step trains, so the run
    stops after one pass over its two problems (the floor: 3 steps), not after all 6, and fails."""
    data = write_problems(tmp_path / "two.jsonl", split_tasks(seed=0, sft=1, rl=1, heldout=20).heldout[:2])
    config = make_config(tmp_path, data, steps=6, prompts_per_step=1, group_size=2, max_tokens=8)
    config = config.model_copy(update={"checkpoint": config.checkpoint.model_copy(update={"every_steps": 5})})
    model = load_policy(config.model)
    engine = HFEngine(HFEngineConfig(dtype="float32", max_batch_size=4), model=model)
    try:
        with Grader(workers=1) as grader:
            async def run():
                async with SandboxClient([sandbox_url]) as sandbox:
                    trainer = build_trainer(config, LocalLearner(learner_settings(config), model, engine), engine,
                                            engine.tokenizer, sandbox, grader, read_problems(data))
                    trainer.restore(resume=False)
                    with pytest.raises(NothingLearned) as stopped:
                        await trainer.run()
                    return trainer, stopped.value
            trainer, stopped = asyncio.run(run())
    finally:
        engine.shutdown()
    assert trainer.silent_steps_limit() == 3 and trainer.completed_steps == stopped.step == 3
    assert [row["step"] for row in read_metrics(config.run_dir)] == [1, 2, 3]
    checkpoints = sorted(p.name for p in (config.run_dir / "checkpoints").iterdir())
    assert checkpoints == ["step_00000003"]  # forced: every_steps 5 alone would have saved none
    assert str(stopped).startswith("stopped after step 3 of 6, a failed run: the last 3 steps trained nothing")


def test_the_silent_step_limit_follows_the_problems_per_pass_or_the_setting(tmp_path, rl_data):
    problems = read_problems(rl_data) * 5  # 50

    def limit(count, **rl):
        config = make_config(tmp_path, rl_data, prompts_per_step=4, **rl)
        return Trainer(trainer_settings(config), None, None, problems[:count]).silent_steps_limit()

    assert limit(10) == limit(9) == 3  # ceil(10 / 4): steps per pass
    assert limit(2) == 3  # the floor
    assert limit(50) == 13
    assert limit(50, max_silent_steps=1) == 1
    with pytest.raises(ConfigError, match="max_silent_steps"):
        make_config(tmp_path, rl_data, max_silent_steps=0)


def test_asynchronous_at_staleness_zero_samples_the_synchronous_first_step(tmp_path, rl_data, sandbox_url):
    """k = 0: the same batch, seeds, weights and engine state as the synchronous loop, so the
    same rollouts and the same RoC verdicts (the engine holds its own float32 copy in both)."""
    logged = {}
    for mode in ("sync", "async"):
        config = make_config(tmp_path / mode, rl_data, engine={"dtype": "float32"}, steps=1, prompts_per_step=1,
                             group_size=2, max_tokens=24, asynchronous={"enabled": mode == "async", "max_staleness": 0})
        model = load_policy(config.model)
        engine = HFEngine(HFEngineConfig(dtype="float32", max_batch_size=4))
        try:
            asyncio.run(train(config, model, engine, sandbox_url))
        finally:
            engine.shutdown()
        rows = [json.loads(line) for line in (config.run_dir / "rollouts" / "step_1.jsonl").open()]
        logged[mode] = ([(r["response"], r["token_logprobs"], r["kept"], r["group_dropped"]) for r in rows],
                        read_metrics(config.run_dir)[-1])
    assert logged["async"][0] == logged["sync"][0]
    (_, sync), (_, ahead) = logged["sync"], logged["async"]
    assert "async/wait_s" in ahead and "async/wait_s" not in sync
    assert ahead.get("async/staleness_max", 0) == 0
    for key in ("reward/accuracy", "roc/dropped_share", "response/length_mean"):
        assert ahead[key] == sync[key]
