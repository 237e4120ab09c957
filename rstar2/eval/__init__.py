"""Benchmark evaluation with the paper's protocol (§5.1): runs, metrics, reports. Knows nothing of training.

* ``runner`` -- ``run_eval``: n samples per problem with bounded concurrency, each graded and
  appended to ``samples.jsonl`` as it finishes, ``--resume`` after a kill; ``EvalSettings``;
* ``launch`` -- ``evaluate``: the engine, sandbox and agent loop around the runner (imports
  torch, so it is not imported here);
* ``metrics`` -- avg@n, unbiased pass@k, maj@n, lengths, tool statistics, bootstrap CI;
* ``samples`` -- the append-only sample log and its records;
* ``report`` -- ``results.json`` and ``results.md``; ``compare`` -- two runs side by side.
"""

from rstar2.eval.compare import compare_runs
from rstar2.eval.metrics import majority_score, pass_at_k
from rstar2.eval.report import build_results, read_results
from rstar2.eval.runner import EvalSettings, RunConflict, Solution, run_eval
from rstar2.eval.samples import SampleOutcome, SampleRecord

__all__ = [
    "EvalSettings",
    "RunConflict",
    "SampleOutcome",
    "SampleRecord",
    "Solution",
    "build_results",
    "compare_runs",
    "majority_score",
    "pass_at_k",
    "read_results",
    "run_eval",
]
