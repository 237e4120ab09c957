"""The benchmark registry: names users type, the files behind them, and where files are found.

Contract of ``load_benchmark(spec, data_dir)``:

* ``spec`` is a registered name (``aime2024``, ``aime2025``, ``hmmt_feb2025``, ``math500``,
  ``amc23``, ``gsm8k``; ``gsm8k_train``, the training split, for RL and SFT data) or any data
  source (``rstar2.data.sources``: a JSONL or Parquet file, a ``datasets`` folder, a hub id),
  read through ``fields`` and named after the source (the file's stem, the folder's or data
  set's name, with the split where it has several);
* a name is looked up in ``data_dir``, flat (``DIR/<stem>.jsonl``) or nested
  (``DIR/<stem>/<stem>.jsonl``); ``None`` means the copies packaged with rstar2
  (``rstar2/data/benchmarks``, sources and licences in its README);
* anything else raises ``DataError`` listing the registered names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rstar2.data.hub import is_hub_id
from rstar2.data.jsonl import DataError
from rstar2.data.problems import FieldMap, Problem, read_problems, source_problems
from rstar2.data.sources import open_source
from rstar2.data.tables import ROW_READERS

PACKAGED_DATA_DIR = Path(__file__).resolve().parent / "benchmarks"


@dataclass(frozen=True)
class BenchmarkInfo:
    """A benchmark offered by name."""

    name: str
    stem: str
    """File name without ``.jsonl`` (also the sub-directory name in the nested layout)."""
    description: str


REGISTRY: dict[str, BenchmarkInfo] = {
    info.name: info
    for info in (
        BenchmarkInfo("aime2024", "aime2024", "AIME 2024 I+II, 30 integer answers"),
        BenchmarkInfo("aime2025", "aime2025", "AIME 2025 I+II, 30 integer answers"),
        BenchmarkInfo("hmmt_feb2025", "hmmt_feb2025", "HMMT February 2025, 30 problems, 14 integer answers"),
        BenchmarkInfo("math500", "math500", "MATH-500 (PRM800K test split), 500 problems"),
        BenchmarkInfo("amc23", "amc23", "AMC 2023 (Qwen2.5-Math set), 40 integer answers"),
        BenchmarkInfo("gsm8k", "gsm8k_test", "GSM8K test, 1,319 grade-school problems"),
        BenchmarkInfo("gsm8k_train", "gsm8k_train", "GSM8K train, 7,473 problems with annotated "
                      "solutions (training data: RL problems, SFT traces)"),
    )
}

# The benchmarks the paper decontaminates its RL data against (§4.2).
PAPER_DECONTAMINATION_SET = ("math500", "aime2024", "aime2025", "hmmt_feb2025")


@dataclass(frozen=True)
class Benchmark:
    """A loaded benchmark: its name, the file it came from, its problems."""

    name: str
    path: Path | str | None
    """What it was read from: the file, or the folder or hub id with the split chosen."""
    problems: list[Problem]


def load_benchmark(spec: str, data_dir: str | Path | None = None, fields: FieldMap | None = None, *,
                   split: str | None = None, subset: str | None = None) -> Benchmark:
    """The benchmark a user named; see the module docstring."""
    if spec in REGISTRY:
        path = registered_path(REGISTRY[spec], Path(data_dir) if data_dir else PACKAGED_DATA_DIR)
        return Benchmark(name=spec, path=path, problems=read_problems(path))
    if not (Path(spec).expanduser().exists() or Path(spec).suffix.lower() in ROW_READERS or is_hub_id(spec)):
        raise DataError(f"unknown benchmark {spec!r}: use one of {', '.join(REGISTRY)}, or a data "
                        "set (a .jsonl or .parquet file, a datasets folder, a hub id org/name)")
    source = open_source(spec, split=split, subset=subset)
    return Benchmark(name=source.name, path=source.origin, problems=source_problems(source, fields))


def registered_path(info: BenchmarkInfo, data_dir: Path) -> Path:
    """Where a registered benchmark lives in ``data_dir`` (flat or nested layout)."""
    candidates = (data_dir / f"{info.stem}.jsonl", data_dir / info.stem / f"{info.stem}.jsonl")
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    tried = " or ".join(str(c) for c in candidates)
    raise DataError(f"benchmark {info.name!r} not found in {data_dir}: looked for {tried}")


def split_specs(specs: str) -> list[str]:
    """``"aime2024, math500"`` -> ``["aime2024", "math500"]``; rejects an empty list and repeats."""
    names = [part.strip() for part in specs.split(",") if part.strip()]
    if not names:
        raise DataError("no benchmark given")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise DataError(f"benchmark listed twice: {', '.join(repeated)}")
    return names
