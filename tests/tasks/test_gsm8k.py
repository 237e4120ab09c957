"""GSM8K cold-start traces on real GSM8K rows: the program chains the annotated steps, the tool
output is the real sandbox's, the answer is the gold one, and rows that cannot make a trace
(invalid annotation, none at all, a program that prints something else) are dropped and counted."""

import asyncio
import dataclasses

import pytest

from rstar2.agent.prompt import ChatFormat, PromptConfig
from rstar2.agent.toolcall import tool_output
from rstar2.data import read_problems
from rstar2.data.benchmarks import PACKAGED_DATA_DIR
from rstar2.reward import score
from rstar2.sandbox import SandboxClient
from rstar2.tasks.gsm8k import AnnotationError, gsm8k_task, gsm8k_traces, python_expression, step_count

PROMPT = PromptConfig(variant="short")


@pytest.fixture(scope="module")
def gsm8k_rows():
    return {p.id: p for p in read_problems(PACKAGED_DATA_DIR / "gsm8k_train.jsonl")[:60]}


def edited(problem, old: str, new: str):
    """A real row with one piece of its solution replaced."""
    assert old in problem.row["solution"]
    return dataclasses.replace(problem, row={**problem.row, "solution": problem.row["solution"].replace(old, new)})


def build(sandbox_url, tokenizer, problems, broken_share=0.0):
    async def run():
        async with SandboxClient([sandbox_url]) as sandbox:
            built = await gsm8k_traces(problems, tokenizer, sandbox, PROMPT, broken_share=broken_share, seed=0)
            reruns = [[await sandbox.run(call.code) for call in trace.tool_calls] for trace in built.traces]
        return built, reruns

    return asyncio.run(run())


def test_program_computes_each_annotated_step_into_a_named_variable(gsm8k_rows):
    task = gsm8k_task(gsm8k_rows["gsm8k-train-0000"])  # 48/2 = <<48/2=24>>24 clips in May. 48+24 = <<48+24=72>>72 ...
    lines = task.code.splitlines()
    assert lines[0] == "clips_may = 48 / 2"
    assert lines[1].endswith("= 48 + clips_may")  # the earlier result is chained, not copied
    assert lines[-1] == f"print(round({lines[1].split(' =')[0]}))"
    assert task.reason == "" and task.answer == 72  # a short trace: the program, no paraphrase
    assert step_count(gsm8k_rows["gsm8k-train-0000"]) == 2 and step_count(gsm8k_rows["gsm8k-train-0029"]) is None


def test_traces_carry_the_sandbox_output_and_the_gold_answer(sandbox_url, tokenizer, gsm8k_rows):
    problems = list(gsm8k_rows.values())
    (built, reruns) = build(sandbox_url, tokenizer, problems, broken_share=0.2)
    assert len(built.traces) + sum(built.dropped.values()) == len(problems)
    assert len(built.traces) >= 0.85 * len(problems)
    assert built.dropped["no_annotation"] == 1  # gsm8k-train-0029 computes in prose only
    chat = ChatFormat(tokenizer, PROMPT)
    fixed = 0
    for problem, trace, results in zip(built.kept, built.traces, reruns):
        assert trace.prompt_ids == chat.prompt_ids(problem.problem)
        assert [call.output for call in trace.tool_calls] == [tool_output(r) for r in results]
        assert trace.tool_calls[-1].output == problem.answer
        assert trace.final_answer == f"\\boxed{{{problem.answer}}}"
        assert score(trace.assistant_text, problem.answer) == 1.0
        assert trace.turns[0].text.startswith("</reason>")  # the program straight away
        fixed += trace.tool_calls[0].error
    assert 0 < fixed < len(built.traces)  # some first programs fail in the sandbox, then are fixed


def test_a_program_that_does_not_print_the_gold_answer_is_dropped(sandbox_url, tokenizer, gsm8k_rows):
    # gsm8k-train-0048: the last step ("4+6=10 digits") is prose without an annotation
    built, _ = build(sandbox_url, tokenizer, [gsm8k_rows["gsm8k-train-0048"], gsm8k_rows["gsm8k-train-0000"]])
    assert [p.id for p in built.kept] == ["gsm8k-train-0000"]
    assert built.dropped == {"output_not_gold": 1}


def test_repairable_annotations_are_repaired_and_still_print_the_gold(sandbox_url, tokenizer, gsm8k_rows):
    row = edited(gsm8k_rows["gsm8k-train-0003"], "<<12*2=24>>", "<<12 x 2=24>>")
    row = edited(row, "<<120-36=84>>", "<<$120-36=84>>")
    assert "12 * 2" in gsm8k_task(row).code
    built, _ = build(sandbox_url, tokenizer, [row])
    assert built.traces[0].tool_calls[-1].output == "42" and not built.dropped


def test_an_annotation_that_is_not_python_is_dropped_and_counted(sandbox_url, tokenizer, gsm8k_rows):
    broken = edited(gsm8k_rows["gsm8k-train-0000"], "<<48/2=24>>", "<<48 halved=24>>")
    with pytest.raises(AnnotationError, match="not Python") as error:
        gsm8k_task(broken)
    assert error.value.reason == "invalid_annotation"
    built, _ = build(sandbox_url, tokenizer, [broken, gsm8k_rows["gsm8k-train-0001"]])
    assert [p.id for p in built.kept] == ["gsm8k-train-0001"]
    assert built.dropped == {"invalid_annotation": 1}


@pytest.mark.parametrize(("annotation", "python"), [
    ("$1,200*3", "1200 * 3"), ("12 x 2", "12 * 2"), ("2^3", "2 ** 3"), ("20%*50", "20 / 100 * 50"),
    ("05+1.05", "5 + 1.05"), ("12*.5", "12 * 0.5"),
])
def test_annotation_repairs(annotation, python):
    assert python_expression(annotation) == python


@pytest.mark.parametrize("annotation", ["48 halved", "print(1)", "x+1", "'a'*3"])
def test_non_arithmetic_annotations_are_refused(annotation):
    with pytest.raises(AnnotationError):
        python_expression(annotation)
