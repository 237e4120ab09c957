"""`rstar2 eval` (a benchmark run, the paper's §5.1 protocol by default) and `rstar2 eval compare`."""

from __future__ import annotations

from pathlib import Path

import typer

from rstar2.cli.app import app
from rstar2.engines.factory import ENGINE_KINDS

eval_app = typer.Typer(
    help=(
        "Evaluate a model on math benchmarks with the paper's protocol: n=16 samples per problem, "
        "temperature 0.6, up to 30,000 tokens and 30 turns with the Python tool; reports avg@n "
        "(the paper's average pass@1) with a bootstrap 95% CI, pass@k, maj@n, lengths and tool use. "
        "`rstar2 eval compare RUN_A RUN_B` puts two runs side by side."
    ),
    invoke_without_command=True,
)
app.add_typer(eval_app, name="eval")


def fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


@eval_app.callback()
def evaluate(
    ctx: typer.Context,
    bench: str = typer.Option(None, "--bench", "-b", help="Comma-separated benchmarks: aime2024, aime2025, "
                              "hmmt_feb2025, math500, amc23, gsm8k, or paths to JSONL files of {problem, answer}."),
    model: str = typer.Option("default", "--model", "-m", help="'default' (the embedded SmolLM2-135M-Instruct), "
                              "a local model directory or .gguf file; with --engine openai, the served model name."),
    engine: str = typer.Option("hf", "--engine", help="'hf': run the model in this process (CPU or GPU); "
                               "'openai': any OpenAI-compatible server (vLLM, SGLang, `rstar2 serve-model`); "
                               "'vllm': vLLM in this process (GPU, the [gpu] extra)."),
    base_url: str = typer.Option(None, "--base-url", help="The server's URL for --engine openai, "
                                 "e.g. http://localhost:8000/v1."),
    tokenizer: str = typer.Option(None, "--tokenizer", help="Local model directory whose tokenizer to use "
                                  "when --model is a served name (--engine openai with vLLM/SGLang)."),
    n: int = typer.Option(16, "-n", min=1, help="Samples per problem."),
    temperature: float = typer.Option(0.6, "--temperature", min=0.0, help="Sampling temperature."),
    top_p: float = typer.Option(1.0, "--top-p", min=0.0, max=1.0, help="Nucleus sampling mass (1 = off)."),
    max_tokens: int = typer.Option(30000, "--max-tokens", min=1,
                                   help="Token budget of a whole response, tool outputs included."),
    max_turns: int = typer.Option(30, "--max-turns", min=1, help="Assistant turns per rollout."),
    tools: bool = typer.Option(True, "--tools/--no-tools", help="Offer the Python tool (the paper's prompt), "
                               "or the same answer format without it."),
    prompt: str = typer.Option("rstar2", "--prompt", help="'rstar2': the paper's prompt with the tool schema "
                               "(~450 tokens); 'short': its ~100-token form, which `rstar2 demo` trains with."),
    answer_tag: bool = typer.Option(True, "--answer-tag/--no-answer-tag", help="Grade only a \\boxed{} inside "
                                    "<answer>...</answer> (the paper's reward), or also the last \\boxed{} "
                                    "anywhere (for models that do not use the tags)."),
    limit: int = typer.Option(None, "--limit", min=1, help="Only the first K problems of each benchmark."),
    out: Path = typer.Option(None, "--out", "-o", help="Run directory. Default: runs/eval/<model>_<benches>_n<n>; "
                             "the same command with --resume continues it."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out: skip samples already in "
                                "its samples.jsonl (n, --limit and benchmarks may grow; generation settings may not)."),
    concurrency: int = typer.Option(32, "--concurrency", "-c", min=1, help="Samples in flight at once."),
    data_dir: Path = typer.Option(None, "--data-dir", help="Where named benchmarks are read, flat or in the shared "
                                  "layout (DIR/math500/math500.jsonl). Default: the copies packaged with rstar2."),
    sandbox_url: list[str] = typer.Option(None, "--sandbox-url", help="Sandbox service(s) for tool calls "
                                          "(repeatable). Default: start a private one for this run."),
    sandbox_workers: int = typer.Option(2, "--sandbox-workers", min=1,
                                        help="Workers of the private sandbox started when no --sandbox-url is given."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Run a benchmark evaluation; writes config.json, samples.jsonl (appended as samples finish),
    results.json and results.md to the run directory, and prints the table."""
    if ctx.invoked_subcommand is not None:
        return
    if bench is None:
        raise fail("--bench is required (e.g. --bench aime2024,math500); see `rstar2 eval --help`")
    if engine not in ENGINE_KINDS:
        raise fail(f"--engine must be one of {', '.join(ENGINE_KINDS)}, got {engine!r}")
    if prompt not in ("rstar2", "short"):
        raise fail(f"--prompt must be 'rstar2' or 'short', got {prompt!r}")
    from rstar2.data import DataError, split_specs
    from rstar2.eval.launch import RunFailed, default_out_dir, evaluate_and_report
    from rstar2.eval.runner import EvalSettings, RunConflict

    try:
        settings = EvalSettings(
            benchmarks=split_specs(bench), model=model, engine=engine, base_url=base_url, tokenizer=tokenizer,
            n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens, max_turns=max_turns, tools=tools,
            prompt=prompt, answer_tag=answer_tag,
            limit=limit, concurrency=concurrency, data_dir=str(data_dir) if data_dir else None,
        )
        table = evaluate_and_report(settings, out or default_out_dir(settings), resume=resume,
                                    sandbox_urls=sandbox_url or None, sandbox_workers=sandbox_workers,
                                    show_progress=not quiet)
    except (DataError, RunConflict, RunFailed, ValueError) as error:
        raise fail(str(error)) from error
    except KeyboardInterrupt:
        typer.echo("interrupted: finished samples are saved; repeat the command with --resume to continue",
                   err=True)
        raise typer.Exit(130) from None
    typer.echo(table)


@eval_app.command()
def compare(
    run_a: Path = typer.Argument(..., help="First run directory (or its results.json)."),
    run_b: Path = typer.Argument(..., help="Second run directory (or its results.json)."),
    top: int = typer.Option(20, "--top", min=0, help="Most changed problems to list per benchmark."),
) -> None:
    """Print two runs side by side: each metric of A and B with B - A, then the problems whose
    accuracy changed most."""
    from rstar2.eval.compare import compare_runs
    from rstar2.eval.report import read_results

    try:
        a, b = read_results(run_a), read_results(run_b)
    except (FileNotFoundError, ValueError) as error:
        raise fail(str(error)) from error
    typer.echo(compare_runs(a, b, top=top, labels=(str(run_a), str(run_b))))
