"""Eval harness throughput on this CPU, and what the harness itself costs per sample.

Run (heavy: a few minutes on 2 cores; take the shared lock so other heavy jobs do not skew it)::

    flock /tmp/rstar2-heavy.lock .venv/bin/python benchmarks/eval_bench.py
    flock /tmp/rstar2-heavy.lock .venv/bin/python benchmarks/eval_bench.py --problems 32 -n 4 --max-tokens 1024
    flock /tmp/rstar2-heavy.lock .venv/bin/python benchmarks/eval_bench.py --model runs/cpu-demo/sft/final --prompt short

Part 1, samples/s: ``run_eval`` exactly as ``rstar2 eval`` runs it -- the embedded model
(SmolLM2-135M-Instruct, HFEngine), the paper's prompt with the Python tool, a local sandbox,
the grader, the append-only log, the reports -- over the first ``--problems`` GSM8K problems,
``-n`` samples each, temperature 0.6. Every generation call is recorded.

Part 2, harness overhead per sample: the same run again with the model replaced by a replay
of the recorded completions, returned at once. What remains is everything but generation:
prompt rendering and tokenising, tool-call parsing, sandbox calls, tool-response tokens,
answer extraction and grading, the sample log, progress and the final reports. Measured at
the run's concurrency (throughput cost: wall time / samples) and at concurrency 1 (latency
cost of one sample alone). Replayed rollouts follow the recorded ones as long as tool outputs
repeat; a prompt never seen before (non-deterministic tool output) ends its rollout and is
counted as a miss.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from rstar2.agent.rollout import Agent
from rstar2.data.benchmarks import load_benchmark
from rstar2.engines.base import Completion, SamplingParams
from rstar2.engines.registry import open_engine
from rstar2.eval.launch import agent_solver, engine_spec, rollout_config
from rstar2.eval.runner import EvalSettings, run_eval
from rstar2.reward import Grader
from rstar2.sandbox import SandboxClient, local_sandbox


class RecordingEngine:
    """An engine that keeps every completion it returns, by prompt, in call order."""

    def __init__(self, engine):
        self.engine = engine
        self.recorded: dict[tuple[int, ...], collections.deque[Completion]] = collections.defaultdict(collections.deque)
        self.generated_tokens = 0

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        completions = await self.engine.generate(prompts, params)
        for prompt, completion in zip(prompts, completions):
            self.recorded[tuple(prompt)].append(completion)
            self.generated_tokens += len(completion.token_ids)
        return completions

    async def close(self) -> None:
        await self.engine.close()


class ReplayEngine:
    """Returns recorded completions instantly; an unknown prompt gets a lone end-of-turn token."""

    def __init__(self, recorded: dict[tuple[int, ...], collections.deque[Completion]], end_of_turn: int):
        self.recorded = {prompt: collections.deque(queue) for prompt, queue in recorded.items()}
        self.end_of_turn = end_of_turn
        self.misses = 0

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        return [self.replay(tuple(prompt)) for prompt in prompts]

    def replay(self, prompt: tuple[int, ...]) -> Completion:
        queue = self.recorded.get(prompt)
        if queue:
            return queue.popleft()
        self.misses += 1
        return Completion(token_ids=[self.end_of_turn], logprobs=[0.0], finish_reason="stop")

    async def close(self) -> None:
        return None


async def timed_run(settings: EvalSettings, engine, tokenizer, sandbox_url: str, grader: Grader,
                    out: Path) -> tuple[float, dict]:
    """Wall seconds and results of one ``run_eval`` into ``out``."""
    benchmark = load_benchmark("gsm8k")
    async with SandboxClient(sandbox_url) as sandbox:
        solve = agent_solver(Agent(engine, tokenizer, sandbox, rollout_config(settings)))
        started = time.perf_counter()
        document = await run_eval(settings, [benchmark], solve, out, show_progress=False, reward=grader)
    return time.perf_counter() - started, document


async def main(args: argparse.Namespace) -> None:
    settings = EvalSettings(benchmarks=["gsm8k"], model=args.model, prompt=args.prompt, n=args.n,
                            limit=args.problems, max_tokens=args.max_tokens, concurrency=args.concurrency)
    samples = args.problems * args.n
    model, tokenizer = open_engine(engine_spec(settings))
    recording = RecordingEngine(model)
    with (local_sandbox(workers=args.sandbox_workers) as sandbox_url, tempfile.TemporaryDirectory() as tmp,
          Grader(workers=1) as grader):
        # Warm-up: one-off start costs (sandbox workers, the grader's worker, model kernels) are not
        # per-sample costs of the harness.
        await timed_run(settings.model_copy(update={"limit": 1, "n": 2}), model, tokenizer, sandbox_url, grader,
                        Path(tmp) / "warmup")
        grader.compare_many([("\\frac{1}{2}", "0.5")])
        seconds, document = await timed_run(settings, recording, tokenizer, sandbox_url, grader, Path(tmp) / "model")
        stats = document["benchmarks"]["gsm8k"]
        print(f"model run ({args.model}, {args.prompt} prompt): {samples} samples ({args.problems} problems x "
              f"{args.n}), concurrency {args.concurrency}, max tokens {args.max_tokens}, tools on")
        print(f"  {seconds:.1f} s -> {samples / seconds:.2f} samples/s, "
              f"{recording.generated_tokens / seconds:.0f} generated tokens/s, "
              f"{stats['mean_response_tokens']:.0f} mean response tokens, "
              f"{stats['tool_calls_per_answer']:.2f} tool calls/sample, avg@{args.n} {100 * stats['avg']:.1f}%")
        await model.close()
        end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
        for concurrency in (args.concurrency, 1):
            replay = ReplayEngine(recording.recorded, end_of_turn)
            replay_settings = settings.model_copy(update={"concurrency": concurrency})
            seconds, _ = await timed_run(replay_settings, replay, tokenizer, sandbox_url, grader,
                                         Path(tmp) / f"replay-{concurrency}")
            print(f"harness overhead at concurrency {concurrency:>3}: {1000 * seconds / samples:.1f} ms/sample "
                  f"(replayed generation; {replay.misses} prompts not replayable)")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default",
                        help="'default' (SmolLM2-135M-Instruct) or a local model directory, e.g. the demo's "
                             "runs/cpu-demo/sft/final, which calls the tool in every answer.")
    parser.add_argument("--prompt", choices=["rstar2", "short"], default="rstar2",
                        help="Prompt variant ('short' for models trained by `rstar2 demo`).")
    parser.add_argument("--problems", type=int, default=16, help="First GSM8K test problems to use.")
    parser.add_argument("-n", type=int, default=4, help="Samples per problem.")
    parser.add_argument("--max-tokens", type=int, default=512, help="Response token budget per sample.")
    parser.add_argument("--concurrency", type=int, default=32, help="Samples in flight.")
    parser.add_argument("--sandbox-workers", type=int, default=2, help="Local sandbox workers.")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
