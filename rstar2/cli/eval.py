"""`rstar2 eval` (a benchmark run, the paper's §5.1 protocol by default) and `rstar2 eval compare`."""

from __future__ import annotations

from pathlib import Path

import typer

from rstar2.cli.app import command_group, fail
from rstar2.cli.data import DATA_DIR_HELP
from rstar2.cli.options import (
    DEFAULT_DTYPE,
    DEFAULT_ENGINE,
    DEFAULT_MODEL,
    AnswerTag,
    BaseUrl,
    Device,
    Dtype,
    Engine,
    Fields,
    Model,
    PromptVariant,
    SandboxUrls,
    Split,
    Subset,
    Threads,
    Tokenizer,
    announce_device,
    field_map,
    trained_card,
)

eval_app = command_group(
    "eval",
    "Evaluate a model on math benchmarks with the paper's protocol: n=16 samples per problem, "
    "temperature 0.6, up to 30,000 tokens and 30 turns with the Python tool; reports avg@n "
    "(the paper's average pass@1) with a bootstrap 95% CI, pass@k, maj@n, lengths and tool use. "
    "A model folder written by rstar2 demo or train is asked the way it was trained (its "
    "rstar2.json) unless options say otherwise. `rstar2 eval compare RUN_A RUN_B` puts two "
    "runs side by side.",
    invoke_without_command=True,
)
PAPER_LIMITS = {"max_tokens": 30000, "max_turns": 30}  # §5.1, for a model without a card


@eval_app.callback()
def evaluate(
    ctx: typer.Context,
    bench: str = typer.Option(None, "--bench", "-b", metavar="BENCHES", help="Comma-separated benchmarks (aime2024, "
                              "aime2025, hmmt_feb2025, math500, amc23, gsm8k; `rstar2 data list`) "
                              "or data sets of problems with answers: JSONL or Parquet files, "
                              "datasets folders, hub ids (org/name); see --field, --split."),
    field: Fields = None,
    split: Split = None,
    subset: Subset = None,
    model: Model = DEFAULT_MODEL,
    engine: Engine = DEFAULT_ENGINE,
    base_url: BaseUrl = None,
    tokenizer: Tokenizer = None,
    dtype: Dtype = DEFAULT_DTYPE,
    device: Device = "auto",
    threads: Threads = None,
    n: int = typer.Option(16, "-n", min=1, metavar="N", help="Samples per problem."),
    temperature: float = typer.Option(0.6, "--temperature", min=0.0, metavar="T", help="Sampling temperature."),
    top_p: float = typer.Option(1.0, "--top-p", min=0.0, max=1.0, metavar="P", help="Nucleus sampling mass "
                                "(1 = off)."),
    max_tokens: int = typer.Option(None, "--max-tokens", min=1, metavar="N", help="Token budget of a whole "
                                   "response, tool outputs included. Default: the model's "
                                   "rstar2.json, else 30000."),
    max_turns: int = typer.Option(None, "--max-turns", min=1, metavar="N", help="Assistant turns per rollout. "
                                  "Default: the model's rstar2.json, else 30."),
    tools: bool = typer.Option(True, "--tools/--no-tools", help="Offer the Python tool, or keep "
                               "the answer format without it."),
    prompt_variant: PromptVariant = None,
    answer_tag: AnswerTag = None,
    limit: int = typer.Option(None, "--limit", min=1, metavar="K", help="Only the first K problems of each "
                              "benchmark."),
    out: Path = typer.Option(None, "--out", "-o", metavar="DIR", help="Run directory. Default: "
                             "runs/eval/<model>_<benches>_n<n>."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out, skipping "
                                "the samples it holds (n, --limit and benchmarks may grow; "
                                "generation settings may not)."),
    concurrency: int = typer.Option(32, "--concurrency", "-c", min=1, metavar="N", help="Samples in flight "
                                    "at once."),
    data_dir: Path = typer.Option(None, "--data-dir", metavar="DIR", help=DATA_DIR_HELP),
    sandbox_url: SandboxUrls = None,
    sandbox_workers: int = typer.Option(2, "--sandbox-workers", min=1, metavar="N", help="Workers of the "
                                        "private sandbox (without --sandbox-url)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Run a benchmark evaluation; writes config.json, samples.jsonl (appended as samples finish),
    results.json and results.md to the run directory, and prints the table."""
    if ctx.invoked_subcommand is not None:
        return
    if bench is None:
        fail("--bench is required (e.g. --bench aime2024,math500); see `rstar2 eval --help`")
    from rstar2.agent.prompt import PromptConfig
    from rstar2.data import split_specs
    from rstar2.eval.launch import default_out_dir, evaluate_and_report
    from rstar2.eval.runner import EvalSettings
    from rstar2.models.device import resolve_device

    if engine == "hf":
        announce_device(device)
    card = trained_card(model, tokenizer, base_url, import_tools=tools)
    trained = card.prompt if card else PromptConfig()
    try:
        settings = EvalSettings(
            benchmarks=split_specs(bench), fields=field_map(field).model_dump(exclude_defaults=True),
            split=split, subset=subset, model=model, engine=engine, base_url=base_url, tokenizer=tokenizer,
            dtype=dtype, device=device, n=n, temperature=temperature, top_p=top_p,
            max_tokens=max_tokens or (card.max_response_tokens if card else PAPER_LIMITS["max_tokens"]),
            max_turns=max_turns or (card.max_turns if card else PAPER_LIMITS["max_turns"]),
            tools=tools, prompt=prompt_variant or trained.variant, tool_name=trained.tool_name,
            **({"tool_specs": card.tools} if card else {}),
            answer_tag=(card.answer_tag if card else True) if answer_tag is None else answer_tag,
            limit=limit, concurrency=concurrency, data_dir=str(data_dir) if data_dir else None,
        )
        if engine == "hf" and resolve_device(device).type == "cpu":
            warn_of_paper_sizes(settings, limit)
        table = evaluate_and_report(settings, out or default_out_dir(settings), resume=resume,
                                    sandbox_urls=sandbox_url or None, sandbox_workers=sandbox_workers,
                                    show_progress=not quiet)
    except ValueError as error:
        fail(error)
    except KeyboardInterrupt:
        typer.echo("interrupted: finished samples are saved; repeat the command with --resume to continue",
                   err=True)
        raise typer.Exit(130) from None
    typer.echo(table)


def warn_of_paper_sizes(settings, limit: int | None) -> None:
    """One line when a CPU run keeps the paper's sizes (16 samples, up to 30,000 tokens each,
    every problem): what a GPU cluster does quickly takes a CPU far longer, and the user should
    know before the first sample, not after hours of them."""
    long = settings.max_tokens >= PAPER_LIMITS["max_tokens"]
    if settings.n >= 16 or (long and limit is None):
        typer.echo(f"note: {settings.n} samples of up to {settings.max_tokens} tokens per problem"
                   f"{'' if limit else ', every problem'} on a CPU can take hours; -n, --max-tokens "
                   f"and --limit make a run shorter (finished samples are kept: --resume continues)",
                   err=True)


@eval_app.command()
def compare(
    run_a: Path = typer.Argument(..., metavar="RUN_A", help="First run directory (or its results.json)."),
    run_b: Path = typer.Argument(..., metavar="RUN_B", help="Second run directory (or its results.json)."),
    top: int = typer.Option(20, "--top", min=0, metavar="N", help="Most changed problems to list per benchmark."),
) -> None:
    """Print two runs side by side: each metric of A and B with B - A, then the problems whose
    accuracy changed most."""
    from rstar2.eval.compare import compare_runs
    from rstar2.eval.report import read_results

    try:
        a, b = read_results(run_a), read_results(run_b)
    except (FileNotFoundError, ValueError) as error:
        fail(error)
    typer.echo(compare_runs(a, b, top=top, labels=(str(run_a), str(run_b))))
