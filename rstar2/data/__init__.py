"""Benchmark and training sets, and the paper's data filters (§4.2, §4.4). Knows nothing of models.

* ``load_benchmark`` / ``REGISTRY`` -- benchmarks by name (packaged copies, or ``data_dir``) or
  any JSONL file of ``{problem, answer}`` rows (``benchmarks``);
* ``read_problems`` / ``Problem`` / ``FieldMap`` -- rows of any source, through a field mapping,
  checked with numbered errors (``problems``);
* ``open_source`` -- JSONL, Parquet, ``datasets`` folders, hub data sets by id (``sources``);
* ``split_integer_answers`` -- keep integer-answer problems (``integer``);
* ``find_overlaps`` -- n-gram decontamination against benchmarks (``decontaminate``);
* ``split_by_difficulty`` -- drop problems an eval run solved in all k samples; ``split_by_pass_rate``
  -- keep those it solved in some but not all (``difficulty``);
* ``DataError`` -- every data problem a user can cause, with file and line.
"""

from rstar2.data.benchmarks import (
    PAPER_DECONTAMINATION_SET,
    REGISTRY,
    Benchmark,
    load_benchmark,
    split_specs,
)
from rstar2.data.decontaminate import DEFAULT_NGRAM, Overlap, find_overlaps, overlaps_per_benchmark
from rstar2.data.difficulty import DifficultySplit, PassRateSplit, split_by_difficulty, split_by_pass_rate
from rstar2.data.integer import IntegerSplit, split_integer_answers
from rstar2.data.jsonl import DataError, read_jsonl, write_jsonl
from rstar2.data.problems import FieldMap, Problem, read_ids, read_problems
from rstar2.data.sources import DataSource, open_source

__all__ = [
    "DEFAULT_NGRAM",
    "PAPER_DECONTAMINATION_SET",
    "REGISTRY",
    "Benchmark",
    "DataError",
    "DataSource",
    "FieldMap",
    "DifficultySplit",
    "IntegerSplit",
    "Overlap",
    "PassRateSplit",
    "Problem",
    "find_overlaps",
    "load_benchmark",
    "open_source",
    "overlaps_per_benchmark",
    "read_ids",
    "read_jsonl",
    "read_problems",
    "split_by_difficulty",
    "split_by_pass_rate",
    "split_integer_answers",
    "split_specs",
    "write_jsonl",
]
