"""Number-substitution variants on real GSM8K train rows, run in the real sandbox: the new gold is
what the variant's program prints, the text and the program change the same numbers, and a row
whose program cannot be trusted with new numbers (it does not run, it has no annotation, it
holds a number the annotator computed in prose) is dropped and counted."""

import asyncio
import dataclasses
import re

import pytest

from rstar2.agent.prompt import PromptConfig
from rstar2.data import read_problems
from rstar2.data.benchmarks import PACKAGED_DATA_DIR
from rstar2.sandbox import SandboxClient
from rstar2.tasks.gsm8k import gsm8k_traces
from rstar2.tasks.gsm8k_variants import TEXT_NUMBER, number_variants

ROWS = 40


@pytest.fixture(scope="module")
def train_rows():
    return read_problems(PACKAGED_DATA_DIR / "gsm8k_train.jsonl")[:ROWS]


def run(sandbox_url, job):
    async def go():
        async with SandboxClient([sandbox_url]) as sandbox:
            return await job(sandbox)

    return asyncio.run(go())


@pytest.fixture(scope="module")
def built(sandbox_url, train_rows):
    return run(sandbox_url, lambda sandbox: number_variants(train_rows, sandbox, per_problem=2, seed=3))


def numbers(text: str) -> list[str]:
    return [m.group(0) for m in TEXT_NUMBER.finditer(text)]


def test_the_new_gold_is_what_the_variants_program_prints(sandbox_url, built):
    assert len(built.variants) >= ROWS  # two per row where a row can have them
    outputs = run(sandbox_url, lambda sandbox: asyncio.gather(*(sandbox.run(v.row["program"]) for v in built.variants)))
    for variant, result in zip(built.variants, outputs):
        assert result.ok and result.stdout.strip() == variant.answer, variant.id
        assert int(variant.answer) >= 0


def test_a_variant_changes_the_stated_numbers_in_text_and_program_alike(train_rows, built):
    originals = {p.id: p for p in train_rows}
    natalia = [v for v in built.variants if v.row["variant_of"] == "gsm8k-train-0000"]
    assert [v.id for v in natalia] == ["gsm8k-train-0000-v1", "gsm8k-train-0000-v2"]
    for variant in natalia:  # "48 of her friends ... half as many": only 48 may change, and does
        (stated,) = numbers(variant.problem)
        assert stated != "48" and variant.problem.replace(stated, "48") == originals["gsm8k-train-0000"].problem
        assert variant.row["program"].splitlines()[0] == f"clips_may = {stated} / 2"
        assert int(variant.answer) == int(stated) + int(stated) // 2
    for variant in built.variants:
        original = originals[variant.row["variant_of"]]
        assert variant.problem != original.problem
        assert len(numbers(variant.problem)) == len(numbers(original.problem))  # numbers replaced, not added
        assert re.sub(r"[\d.,]+", "#", variant.problem) == re.sub(r"[\d.,]+", "#", original.problem)


def test_rows_whose_program_cannot_follow_new_numbers_are_dropped_and_counted(sandbox_url, train_rows, built):
    assert sum(built.dropped.values()) + len({v.row["variant_of"] for v in built.variants}) == ROWS
    kept = {v.row["variant_of"] for v in built.variants}
    # Alexis: "shoes = 184 - spent", where 184 = 200 - 16 was computed in prose
    assert "gsm8k-train-0008" not in kept and built.dropped["unexplained_number"] >= 1
    broken = dataclasses.replace(train_rows[0], id="broken", row={
        **train_rows[0].row, "solution": "She sold 48/0 = <<48/0=0>>0 clips.\n#### 0"})
    bare = dataclasses.replace(train_rows[1], id="bare", row={"solution": ""})
    again = run(sandbox_url, lambda sandbox: number_variants([broken, bare, train_rows[0]], sandbox, seed=3))
    assert dict(again.dropped) == {"program_failed": 1, "no_annotation": 1}
    assert [v.id for v in again.variants] == ["gsm8k-train-0000-v1"]
    assert again.variants[0].problem == natalia_first(built)  # the same seed draws the same numbers


def natalia_first(built) -> str:
    return next(v.problem for v in built.variants if v.id == "gsm8k-train-0000-v1")


def test_variants_make_traces_that_end_in_their_gold(sandbox_url, tokenizer, built):
    variants = built.variants[:12]
    traces = run(sandbox_url, lambda sandbox: gsm8k_traces(variants, tokenizer, sandbox, PromptConfig(variant="short")))
    assert len(traces.traces) == len(variants) and not traces.dropped
    for variant, trace in zip(variants, traces.traces):
        assert trace.final_answer == f"\\boxed{{{variant.answer}}}"
        assert trace.tool_calls[-1].output.strip() == variant.answer
