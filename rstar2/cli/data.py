"""`rstar2 data ...`: the benchmark list and the paper's data filters (integer answers,
8-gram decontamination, stage-3 difficulty)."""

from __future__ import annotations

from pathlib import Path

import typer

from rstar2.cli.app import command_group
from rstar2.cli.options import Fields, Split, Subset, field_map

data_app = command_group("data", "Benchmarks and training-set filters (integer answers, "
                         "decontamination, difficulty).", no_args_is_help=True)

SOURCE_HELP = ("Problems with gold answers: a JSONL or Parquet file, a folder saved by datasets, "
               "or a hub data set id (org/name); see --field, --split.")
DATA_DIR_HELP = ("Where named benchmarks are read, flat (DIR/math500.jsonl) or as the shared "
                 "data (DIR/math500/math500.jsonl). Default: the copies inside rstar2.")


@data_app.command("list")
def list_benchmarks(data_dir: Path = typer.Option(None, "--data-dir", metavar="DIR", help=DATA_DIR_HELP)) -> None:
    """List the benchmarks `rstar2 eval --bench` knows by name, with their size and file."""
    from rstar2.data import REGISTRY, DataError, load_benchmark

    for name, info in REGISTRY.items():
        try:
            benchmark = load_benchmark(name, data_dir)
            typer.echo(f"{name:14} {len(benchmark.problems):5} problems  {info.description}  [{benchmark.path}]")
        except DataError as error:
            typer.echo(f"{name:14}     - unavailable: {error}")


@data_app.command("integer-filter")
def integer_filter(
    source: str = typer.Argument(..., metavar="SOURCE", help=SOURCE_HELP),
    out: Path = typer.Option(..., "--out", "-o", metavar="FILE", help="Where to write the kept rows (JSONL)."),
    field: Fields = None,
    split: Split = None,
    subset: Subset = None,
) -> None:
    """Keep only problems whose gold answer is an integer (the paper's RL data rule, §4.2).

    "Integer" is what the grader reads as one: signs, leading zeros, thousands separators,
    `.0`, units and `%` are decoration. Kept rows get the canonical digits as `answer` (the
    original in `answer_raw`); all other fields are kept.
    """
    from rstar2.data import read_problems, split_integer_answers, write_jsonl

    fields = field_map(field)
    kept = split_integer_answers(read_problems(source, fields, split=split, subset=subset), fields)
    write_jsonl(out, kept.kept)
    typer.echo(f"kept {len(kept.kept)}, dropped {len(kept.dropped)} non-integer answers -> {out}")
    for problem in kept.dropped[:5]:
        typer.echo(f"  dropped line {problem.line} ({problem.id}): answer {problem.answer!r}")


@data_app.command("decontaminate")
def decontaminate(
    source: str = typer.Argument(..., metavar="SOURCE", help="Training set: " + SOURCE_HELP),
    out: Path = typer.Option(..., "--out", "-o", metavar="FILE",
                             help="Where to write the rows that overlap nothing (JSONL)."),
    against: str = typer.Option("math500,aime2024,aime2025,hmmt_feb2025", "--against", metavar="BENCHES",
                                help="Comma-separated benchmarks (names or .jsonl paths). Default: the paper's."),
    report: Path = typer.Option(None, "--report", metavar="FILE",
                                help="Write one JSONL line per overlapping row: line, id, benchmark problems, "
                                     "shared n-grams, an example. Default: OUT with .overlaps.jsonl."),
    ngram: int = typer.Option(8, "--ngram", min=1, metavar="N", help="N-gram size in words (the paper: 8)."),
    min_shared: int = typer.Option(1, "--min-shared", min=1, metavar="N",
                                   help="Shared n-grams needed to call a row contaminated (the paper: 1)."),
    data_dir: Path = typer.Option(None, "--data-dir", metavar="DIR", help=DATA_DIR_HELP),
    field: Fields = None,
    split: Split = None,
    subset: Subset = None,
) -> None:
    """Remove training problems that share word n-grams with evaluation benchmarks (§4.2).

    Words are lower-cased, whitespace-separated, with sentence punctuation trimmed; a
    problem shorter than n words must match a whole short benchmark problem. Prints how many
    rows overlap each benchmark and writes the overlaps for inspection.
    """
    from rstar2.data import (find_overlaps, load_benchmark, overlaps_per_benchmark, read_problems,
                             split_specs, write_jsonl)

    fields = field_map(field)
    train = read_problems(source, fields, split=split, subset=subset)
    benchmarks = [load_benchmark(spec, data_dir) for spec in split_specs(against)]
    overlaps = find_overlaps(train, benchmarks, n=ngram, min_shared=min_shared)
    flagged = {overlap.id for overlap in overlaps}
    kept = write_jsonl(out, (p.source_row(fields) for p in train if p.id not in flagged))
    report = report or out.with_suffix(".overlaps.jsonl")
    write_jsonl(report, (overlap.to_row() for overlap in overlaps))
    typer.echo(f"{len(overlaps)} of {len(train)} rows overlap the benchmarks; kept {kept} -> {out}")
    for name, count in overlaps_per_benchmark(overlaps).items():
        typer.echo(f"  {name}: {count} rows")
    typer.echo(f"overlaps -> {report}")


@data_app.command("difficulty-filter")
def difficulty_filter(
    source: str = typer.Argument(..., metavar="SOURCE", help="Training set the eval run was made on: " + SOURCE_HELP),
    run: Path = typer.Argument(..., metavar="RUN", help="The eval run directory (or its samples.jsonl)."),
    out: Path = typer.Option(..., "--out", "-o", metavar="FILE", help="Where to write the problems kept (JSONL)."),
    bench: str = typer.Option(None, "--bench", metavar="NAME", help="Benchmark name in the run. Default: SOURCE's "
                              "name, as rstar2 eval names it (a file's stem)."),
    field: Fields = None,
    split: Split = None,
    subset: Subset = None,
) -> None:
    """Keep the problems a policy did not solve in all k samples (the stage-3 rule, §4.4).

    Make the run first, e.g. `rstar2 eval --bench train.jsonl -n 8 --temperature 1.0 --out runs/eval/hard`;
    k is the run's samples per problem, and every problem must have all k. The rows written are
    the training set's own, so OUT serves as a recipe's data.train or data.keep_ids.
    """
    from rstar2.data import open_source, split_by_difficulty, write_jsonl
    from rstar2.data.problems import source_problems

    fields = field_map(field)
    samples = run if run.suffix == ".jsonl" else run / "samples.jsonl"
    data = open_source(source, split=split, subset=subset)
    hard = split_by_difficulty(source_problems(data, fields), samples, bench or data.name)
    write_jsonl(out, (p.source_row(fields) for p in hard.kept))
    typer.echo(f"kept {len(hard.kept)} problems not solved {hard.k}/{hard.k}, "
               f"dropped {len(hard.dropped)} always solved -> {out}")


@data_app.command("sft-traces")
def sft_traces(
    source: str = typer.Argument("gsm8k_train", metavar="SOURCE", help="GSM8K-style rows with "
                                 "calculator-annotated solutions: a packaged data set's name or a "
                                 "JSONL file."),
    out: Path = typer.Option(..., "--out", "-o", metavar="FILE", help="Where to write the "
                             "conversations (chat JSONL)."),
    limit: int = typer.Option(None, "--limit", min=1, metavar="N", help="Only the first N rows."),
    broken_share: float = typer.Option(0.1, "--broken-share", min=0.0, max=1.0, metavar="SHARE",
                                       help="Share of traces whose first program fails in the "
                                       "sandbox and is fixed."),
    seed: int = typer.Option(0, "--seed", metavar="SEED", help="Seeds which traces fail first."),
    sandbox_workers: int = typer.Option(2, "--sandbox-workers", min=1, metavar="N",
                                        help="Workers of the private sandbox."),
) -> None:
    """Make cold-start SFT data for `rstar2 sft`: one tool-use conversation per problem, its
    program computing the solution's annotated steps, run in the real sandbox, ending in the
    gold answer (problems whose annotations cannot become a program are dropped and counted).

    Decontaminate the source against your benchmarks first (`rstar2 data decontaminate`).
    """
    from rstar2.sft.dataset import write_gsm8k_conversations

    built = write_gsm8k_conversations(source, out, limit, broken_share, seed, sandbox_workers)
    typer.echo(f"kept {len(built.traces)} conversations, dropped {dict(built.dropped) or 'none'} -> {out}")
