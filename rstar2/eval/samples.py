"""The run's sample log: one JSON line per finished sample, appended as each one completes.

Contract of ``SampleLog``:

* ``append(record)`` writes one whole line and flushes it to the operating system before
  returning, so a killed process (even SIGKILL) loses only the samples still in flight;
* ``open_log(path)`` reads what a previous run left: a half-written last line (the trace of a
  kill mid-write) is cut off the file, so the log stays valid JSONL, and the finished samples
  are returned keyed by ``(bench, problem_id, sample)``; a repeated key keeps its first record;
* what is kept in memory is a ``SampleOutcome`` (the record without its response text), so
  resuming or reporting a run of many long responses does not hold them all;
* the file is the source of truth for a run: reports are recomputed from it, and
  ``rstar2 data difficulty-filter`` reads it (fields ``bench``, ``problem_id``, ``sample``,
  ``correct``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from pydantic import BaseModel, ConfigDict, Field

from rstar2.data.jsonl import dump_line, read_jsonl

SampleKey = tuple[str, str, int]
TAIL_BLOCK = 1 << 16


class SampleOutcome(BaseModel):
    """What metrics need of one graded sample: everything but the response text."""

    model_config = ConfigDict(frozen=True)

    bench: str = Field(description="Benchmark name (a registered name or a custom file's stem).")
    problem_id: str = Field(description="The problem's id in its benchmark file.")
    sample: int = Field(ge=0, description="Index of this sample among the problem's n (0-based).")
    gold: str = Field(description="The gold answer it was graded against.")
    pred: str | None = Field(description="The extracted final answer; None when the response gives none.")
    correct: bool = Field(description="Whether `pred` is equivalent to `gold` (rstar2.reward).")
    response_tokens: int = Field(ge=0, description="Tokens after the prompt: sampled and tool tokens.")
    generated_tokens: int = Field(ge=0, description="Tokens the model sampled (loss-mask 1).")
    turns: int = Field(ge=0, description="Assistant turns (generation calls) in the rollout.")
    tool_calls: int = Field(ge=0, description="Tool calls made, malformed ones included.")
    tool_errors: int = Field(ge=0, description="Tool calls that failed: parse error, exception or timeout.")
    stop_reason: str = Field(description="Why the rollout ended, as the agent loop reports it.")
    truncated: bool = Field(description="Whether the token limit cut the response.")
    seconds: float = Field(ge=0, description="Wall-clock time from start of rollout to graded record.")

    @property
    def key(self) -> SampleKey:
        return (self.bench, self.problem_id, self.sample)


class SampleRecord(SampleOutcome):
    """One graded sample of one problem, as a line of ``samples.jsonl``."""

    response: str = Field(description="Everything after the prompt, tool responses included, as text.")


def repair_tail(path: Path) -> None:
    """Cut a half-written last line off ``path`` so appends start on a fresh line.

    Reads backwards from the end in blocks: the log can be far larger than memory wants.
    """
    if not path.is_file():
        return
    with path.open("rb+") as handle:
        end = handle.seek(0, 2)
        position = end
        while position > 0:
            start = max(0, position - TAIL_BLOCK)
            handle.seek(start)
            block = handle.read(position - start)
            if position == end and block.endswith(b"\n"):
                return
            newline = block.rfind(b"\n")
            if newline >= 0:
                handle.truncate(start + newline + 1)
                return
            position = start
        handle.truncate(0)


def read_outcomes(path: Path) -> dict[SampleKey, SampleOutcome]:
    """The finished samples in ``path`` by key (first one wins), tolerating a partial last line."""
    outcomes: dict[SampleKey, SampleOutcome] = {}
    if not path.is_file():
        return outcomes
    for _, row in read_jsonl(path, partial_tail_ok=True):
        outcome = SampleOutcome.model_validate(row)
        outcomes.setdefault(outcome.key, outcome)
    return outcomes


class SampleLog:
    """Append-only writer of ``samples.jsonl``; see the module docstring."""

    def __init__(self, path: Path):
        self.path = path
        self._handle: TextIO = path.open("a", encoding="utf-8")

    def append(self, record: SampleRecord) -> None:
        self._handle.write(dump_line(record.model_dump(mode="json")))
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def open_log(path: Path) -> tuple[SampleLog, dict[SampleKey, SampleOutcome]]:
    """Repair ``path``, read its finished samples, and open it for appending."""
    path.parent.mkdir(parents=True, exist_ok=True)
    repair_tail(path)
    outcomes = read_outcomes(path)
    return SampleLog(path), outcomes
