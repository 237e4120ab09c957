"""``rstar2 sft RECIPE.yaml``: the report's cold-start SFT (§4.1) as a run of its own.

    final_dir = run_sft(load_sft_config("recipes/qwen3-1.7b-sft.yaml"), resume=False)

Contract, in order:

1. a run folder that already holds checkpoints is only continued with ``resume``;
2. the model is resolved (a hub id fetched) and checked, and every conversation is read,
   checked and tokenised (``rstar2.sft.chat``) -- a malformed row, an unloadable model or an
   unsupported architecture is one error *before anything is written*;
3. ``train.compute_dtype`` 'auto' is made concrete for the machine (printed in one line);
   ``<run>/config.yaml`` records the resolved recipe, that choice included; every optimizer
   step appends a line to ``metrics.jsonl`` (``sft/loss``, ``sft/lr``, ``sft/tokens``,
   ``sft/sequences_per_s``, ``time/step``) and prints a progress line, as ``rstar2 train`` does;
4. a checkpoint (weights, AdamW, schedule, RNGs; ``rstar2.training.checkpoint``, atomic,
   written in the background) every ``checkpoint.every_steps`` steps or ``every_minutes``, and
   at the last (an RL recipe can start from it: ``rl.init.checkpoint``, weights only with
   ``reset_optimizer``); ``resume`` restores the latest and continues with the very batches the
   interrupted run would have taken
   (``sft_batches`` depends on the seed and the number of conversations alone; a data file that
   changed in between is refused);
5. the model is saved as a plain directory ``<run>/final`` with its card (``rstar2.json``:
   the prompt and rollout limits of ``agent``), which chat, eval and ``rstar2 train`` read.

The demo and the GSM8K pipeline run their cold start through ``run_sft`` too, handing it the
policy they already hold (``model=``) so that RL continues from the very same object.
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml
from rich.console import Console

from rstar2.agent.prompt import ChatFormat
from rstar2.data.jsonl import DataError
from rstar2.models.loading import load_tokenizer, loadable_model_dir
from rstar2.sft.chat import conversation_sequence, read_conversations
from rstar2.sft.config import SFTConfig
from rstar2.sft.train import resolve_sft_dtype, sft_batches, sft_optimizer, sft_train
from rstar2.training.batch import TrainSequence
from rstar2.training.checkpoint import CheckpointWriter, check_run_dir, latest_checkpoint, load_checkpoint
from rstar2.training.policy import load_policy, save_policy
from rstar2.training.runlog import RunLog


def run_sft(config: SFTConfig, resume: bool = False, console: Console | None = None, model=None,
            trained_by: str | None = None) -> Path:
    """Run (or continue) the SFT ``config`` describes; returns the final model directory.
    ``model``: an already loaded policy of ``model.path`` to train in place; ``trained_by``:
    what the card says wrote the model (default ``rstar2 sft (<name>)``)."""
    console = console or Console()
    check_run_dir(config.run_dir, resume)
    if model is None:
        loadable_model_dir(config.model.path)
    tokenizer = load_tokenizer(config.model.path)
    sequences = training_sequences(config, ChatFormat(tokenizer, config.agent.prompt_config), console)
    model = model if model is not None else load_policy(config.model.policy())
    train, note = resolve_sft_dtype(config.train, model)
    if note:
        console.print(note, highlight=False)
    config = config.model_copy(update={"train": train})
    config.run_dir.mkdir(parents=True, exist_ok=True)
    (config.run_dir / "config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    batches = sft_batches(len(sequences), config.train)
    optimizer, scheduler = sft_optimizer(model, config.train, len(batches))
    checkpoints = config.run_dir / "checkpoints"
    start = 0
    if resume and latest_checkpoint(checkpoints) is not None:
        state = load_checkpoint(latest_checkpoint(checkpoints), model, optimizer, scheduler)
        if state.data_position.get("conversations") != len(sequences):
            raise DataError(f"{config.run_dir} was trained on {state.data_position.get('conversations')} "
                            f"conversations and {config.data.train} now gives {len(sequences)}: resume "
                            "with the data it started with")
        start = state.step
        console.print(f"resuming {config.run_dir} after step {start}")
    log = RunLog(config.run_dir, config.logging, len(batches), resume_step=start, console=console,
                 run_config=config.model_dump(mode="json"))
    writer = CheckpointWriter(checkpoints, keep_last=config.checkpoint.keep_last)
    clock = [time.perf_counter()]
    last_checkpoint_at = [clock[0]]  # or the start: what a crash would lose

    def on_step(step: int, total: int, loss: float) -> None:
        now = time.perf_counter()
        tokens = sum(sequences[i].loss_tokens for i in batches[step - 1])
        log.step(step, {"sft/loss": loss, "sft/lr": scheduler.get_last_lr()[0], "sft/tokens": tokens,
                        "sft/sequences_per_s": len(batches[step - 1]) / (now - clock[0]), "time/step": now - clock[0]})
        clock[0] = now
        if config.checkpoint.due(step, total, now - last_checkpoint_at[0]):
            writer.submit(step, model, optimizer, scheduler, {"step": step, "conversations": len(sequences)})
            last_checkpoint_at[0] = now

    try:
        sft_train(model, sequences, config.train, on_step,
                  start_step=start, optimizer=optimizer, scheduler=scheduler)
    finally:
        writer.wait()
        log.close()
    card = config.card(trained_by or f"rstar2 sft ({config.name})")
    return save_policy(model, tokenizer, config.run_dir / "final", card)


def training_sequences(config: SFTConfig, chat: ChatFormat, console: Console) -> list[TrainSequence]:
    """The conversations of ``data.train`` as token sequences, without those longer than
    ``data.max_tokens`` (counted and said); ``DataError`` for a malformed file."""
    sequences = [conversation_sequence(c.messages, chat) for c in read_conversations(config.data.train)]
    kept = [s for s in sequences if len(s) <= config.data.max_tokens]
    if not kept:
        raise DataError(f"{config.data.train}: no conversation fits data.max_tokens ({config.data.max_tokens})")
    if len(kept) < len(sequences):
        console.print(f"left out {len(sequences) - len(kept)} of {len(sequences)} conversations longer "
                      f"than data.max_tokens ({config.data.max_tokens})")
    return kept
