"""Agreement, speed and hostile-input cost of rstar2.reward, beside plain math-verify.

Run (heavy: uses both cores for a few minutes; take the shared lock):
    flock /tmp/rstar2-heavy.lock .venv/bin/python benchmarks/reward_bench.py
    ... benchmarks/reward_bench.py --skip-hostile        (no 5-8 s math-verify hostile runs)

Data: ../shared/data relative to the repository, or $RSTAR2_SHARED_DATA.

Printed, for rstar2 and for plain `math_verify.verify(parse(gold), parse(text))` (0.9.0, its
default signal-based 5 s timeouts) in the same run:
1. agreement: answer_equiv per source (one uniform mode); the 800 graded Qwen2.5-Math
   outputs with the gold bare, in `$...$` and in `\\boxed{}`; ToRA-70B GSM8K against its
   recorded grades; MATH-500 + HMMT-2025 gold answers equal to themselves; shuffled pairs
   wrongly equal;
2. speed on the 800 real outputs (extraction + verification, gold bare): per-output latency
   p50/p99/max and outputs per second, in one process, through the one-worker deadline pool
   that `score` uses, and as a batch on all cores (twice: parse caches start cold, then warm,
   as across the steps of a training run);
3. the deadline's margin: the slowest symbolic checks of the data above (answer_equiv both
   ways, the Qwen outputs against each gold form, the gold answers against themselves), each
   timed again alone in a fresh worker (its first check: the costliest case, as after a
   replacement), in CPU seconds against the CPU limit `DEFAULT_DEADLINE_S`;
4. hostile inputs: wall-clock cost of each, with rstar2's deadline and with plain
   math-verify.
"""

import argparse
import json
import logging
import os
import random
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from math_verify import parse, verify

from rstar2.reward import Grader, extract_answer
from rstar2.reward.equivalence import equivalent, symbolically_equivalent
from rstar2.reward.grading import DEFAULT_DEADLINE_S, EQUIVALENCE_CHECK, WARMUP_PAIRS
from rstar2.reward.normalize import verdict_without_parser
from rstar2.reward.pool import DeadlinePool, available_cores

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("RSTAR2_SHARED_DATA", REPO.parent / "shared" / "data"))
GOLD_FORMS = {"bare": "{}", "$...$": "${}$", "\\boxed{}": "\\boxed{{{}}}"}
HOSTILE = {
    "10^{10^{10}}": "10^{10^{10}}",
    "nested fractions x300": "\\frac{1}{" * 300 + "2" + "}" * 300,
    "100k-term sum": "+".join(["x"] * 100_000),
    "1M digits + .5": "9" * 1_000_000 + ".5",
    "nested roots x500": "\\sqrt{" * 500 + "2" + "}" * 500,
    "((10!)!)!": "((10!)!)!",
}
LONG_INTEGER = "7" * 4_301

logging.getLogger("math_verify").setLevel(logging.ERROR)


def read_rows(relative: str) -> list[dict]:
    with (DATA / relative).open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def plain_math_verify(text: str, gold: str) -> bool:
    """What a caller of math-verify writes: parse both, verify gold against prediction."""
    return verify(parse(gold), parse(text))


def percentiles_ms(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * len(ordered)) - 1)]
    median, longest = statistics.median(ordered), ordered[-1]
    return f"p50 {median * 1e3:6.2f} ms  p99 {p99 * 1e3:6.2f} ms  max {longest * 1e3:7.1f} ms"


def section(title: str) -> None:
    print(f"\n## {title}")


def agreement_answer_equiv(grader: Grader) -> None:
    rows = read_rows("answer_equiv/answer_equiv.jsonl")
    ours = grader.compare_many([(row["pred"], row["gold"]) for row in rows])
    theirs = [row["gold"] is not None and plain_math_verify(row["pred"], row["gold"]) for row in rows]
    totals, ours_ok, theirs_ok = Counter(), Counter(), Counter()
    for row, mine, plain in zip(rows, ours, theirs):
        source = row["source"].split(":")[0]
        totals[source] += 1
        ours_ok[source] += mine.correct == row["equal"]
        theirs_ok[source] += plain == row["equal"]
    ours_ok["all"], theirs_ok["all"], totals["all"] = sum(ours_ok.values()), sum(theirs_ok.values()), len(rows)
    for source, total in totals.items():
        print(f"answer_equiv {source:15} rstar2 {ours_ok[source]:3}/{total}   math-verify {theirs_ok[source]:3}/{total}")


def agreement_qwen(grader: Grader) -> None:
    rows = read_rows("math_cot_samples/qwen25_math_cot_100x8.jsonl")
    for form, template in GOLD_FORMS.items():
        golds = [template.format(row["answer"]) for row in rows]
        pairs = [(r["response"], g) for r, g in zip(rows, golds)]
        ours = grader.grade_many(pairs, require_answer_tag=False)
        ours_ok = sum(g.correct == r["score"] for g, r in zip(ours, rows))
        theirs_ok = sum(plain_math_verify(r["response"], g) == r["score"] for r, g in zip(rows, golds))
        print(f"qwen2.5-math 800, gold {form:9} rstar2 {ours_ok}/800   math-verify {theirs_ok}/800")


def tora_recorded_grade(row: dict) -> bool:
    """ToRA's grade: its `pred` equals the gold as a number (reproduces its 84.3%)."""
    try:
        return abs(float(row["pred"].replace(",", "")) - float(row["answer"].replace(",", ""))) < 1e-4
    except ValueError:
        return False


def agreement_tora(grader: Grader) -> None:
    rows = read_rows("tir_traces/tora_70b_gsm8k.jsonl")
    recorded = [tora_recorded_grade(row) for row in rows]
    ours = grader.grade_many([(r["response"], r["answer"]) for r in rows], require_answer_tag=False)
    on_pred = grader.compare_many([(r["pred"], r["answer"]) for r in rows])
    theirs = [plain_math_verify(r["response"], r["answer"]) for r in rows]
    unboxed = sum(g.pred is None for g in ours)
    ours_ok = sum(g.correct == r for g, r in zip(ours, recorded))
    theirs_ok = sum(t == r for t, r in zip(theirs, recorded))
    on_pred_ok = sum(g.correct == r for g, r in zip(on_pred, recorded))
    print(f"tora-70b gsm8k 1319, end to end: rstar2 {ours_ok}/1319 ({unboxed} responses have no box)"
          f"   math-verify {theirs_ok}/1319")
    print(f"tora-70b gsm8k 1319, on ToRA's extracted answers: rstar2 {on_pred_ok}/1319")


def agreement_gold_answers(grader: Grader) -> None:
    rows = read_rows("math500/math500.jsonl") + read_rows("hmmt_feb2025/hmmt_feb2025.jsonl")
    golds = [row["answer"] for row in rows]
    symbolic = sum(symbolically_equivalent(gold, gold) for gold in golds)
    boxed = grader.grade_many([(f"<answer>\\boxed{{{g}}}</answer>", g) for g in golds])
    theirs_bare = sum(plain_math_verify(g, g) for g in golds)
    theirs_dollar = sum(plain_math_verify(f"${g}$", f"${g}$") for g in golds)
    print(f"MATH-500 + HMMT-2025 golds equal to themselves: rstar2 symbolic path {symbolic}/{len(golds)}, "
          f"boxed in a response {sum(g.correct for g in boxed)}/{len(golds)}   "
          f"math-verify bare {theirs_bare}/{len(golds)}, in $...$ {theirs_dollar}/{len(golds)}")
    judged_equal, distinct = [], 0
    for seed in range(3):
        partners = golds[:]
        random.Random(seed).shuffle(partners)
        pairs = [(p, g) for p, g in zip(partners, golds) if p != g]
        distinct += len(pairs)
        judged_equal += [pair for pair, g in zip(pairs, grader.compare_many(pairs)) if g.correct]
    print(f"shuffled gold pairs of different strings judged equal (3 shuffles, {distinct} pairs): "
          f"rstar2 {len(judged_equal)} {judged_equal}")
    (long_self,) = grader.compare_many([(LONG_INTEGER, LONG_INTEGER)])
    print(f"a {len(LONG_INTEGER)}-digit integer equal to itself: rstar2 {long_self.correct}"
          f"   math-verify {plain_math_verify(LONG_INTEGER, LONG_INTEGER)}")


def latency_in_process(rows: list[dict], check) -> list[float]:
    """Seconds per output for `check(response, gold)`, after the warm-up the pool's workers
    get (so in-process and pool figures start alike) and a pass over 20 outputs."""
    for pred, gold in WARMUP_PAIRS:
        check(f"\\boxed{{{pred}}}", gold)
    for row in rows[:20]:
        check(row["response"], row["answer"])
    seconds = []
    for row in rows:
        started = time.perf_counter()
        check(row["response"], row["answer"])
        seconds.append(time.perf_counter() - started)
    return seconds


def rstar2_in_process(response: str, gold: str) -> bool:
    return equivalent(extract_answer(response, require_answer_tag=False), gold)


def speed(rows: list[dict]) -> None:
    for name, check in [("rstar2, in process", rstar2_in_process), ("math-verify, in process", plain_math_verify)]:
        seconds = latency_in_process(rows, check)
        print(f"{name:34} {percentiles_ms(seconds)}   {len(rows) / sum(seconds):7.0f} outputs/s")
    with Grader(workers=1) as grader:
        grader.compare_many([("\\frac{1}{2}", "0.5")])  # start the pool
        seconds = latency_in_process(rows, lambda r, g: grader.grade_many([(r, g)], require_answer_tag=False))
    print(f"{'rstar2, one call at a time (pool)':34} {percentiles_ms(seconds)}   {len(rows) / sum(seconds):7.0f} outputs/s")
    cores = available_cores()
    pairs = [(r["response"], r["answer"]) for r in rows]
    with Grader(workers=cores) as grader:
        grader.compare_many([("\\frac{1}{2}", "0.5")] * cores)  # start the pool
        for run in ("first", "second"):
            started = time.perf_counter()
            grader.grade_many(pairs, require_answer_tag=False)
            report_batch(f"rstar2, batch on {cores} cores, {run}", len(rows), time.perf_counter() - started)
    with ProcessPoolExecutor(cores) as executor:
        list(executor.map(plain_math_verify, ["$1$"] * cores, ["1"] * cores))
        for run in ("first", "second"):
            started = time.perf_counter()
            list(executor.map(plain_math_verify, *zip(*pairs), chunksize=8))
            report_batch(f"math-verify, batch on {cores} cores, {run}", len(rows), time.perf_counter() - started)


def report_batch(name: str, count: int, seconds: float) -> None:
    print(f"{name:41} {count / seconds:7.0f} outputs/s ({seconds:.2f} s for {count})")


def symbolic_pairs() -> list[tuple[str, str, str]]:
    """(name, pred, gold) of every pair of the agreement data that reaches a worker."""
    pairs = []
    for row in read_rows("answer_equiv/answer_equiv.jsonl"):
        pairs += [(f"answer_equiv {row['id']}", row["pred"], row["gold"]),
                  (f"answer_equiv {row['id']} reversed", row["gold"], row["pred"])]
    for row in read_rows("math_cot_samples/qwen25_math_cot_100x8.jsonl"):
        pred = extract_answer(row["response"], require_answer_tag=False)
        pairs += [(f"{row['id']}, gold {form}", pred, template.format(row["answer"]))
                  for form, template in GOLD_FORMS.items()]
    for row in read_rows("math500/math500.jsonl") + read_rows("hmmt_feb2025/hmmt_feb2025.jsonl"):
        pairs.append((f"{row['id']} against itself", row["answer"], row["answer"]))
    return [(name, pred, gold) for name, pred, gold in pairs
            if isinstance(gold, str) and verdict_without_parser(pred, gold) is None]


def fresh_check_cpu(pred: str, gold: str, warmup) -> float:
    """CPU seconds of one check, the first of a fresh worker forked after ``warmup``."""
    with DeadlinePool(EQUIVALENCE_CHECK, workers=1, deadline_s=600, warmup=warmup) as fresh:
        (outcome,) = fresh.map([(pred, gold)])
    return outcome.cpu_seconds


def deadline_margin(slowest: int = 5) -> None:
    pairs = symbolic_pairs()
    with DeadlinePool(EQUIVALENCE_CHECK, workers=available_cores(), deadline_s=600, warmup=WARMUP_PAIRS) as pool:
        outcomes = pool.map([(pred, gold) for _, pred, gold in pairs])
    ranked = sorted(zip(outcomes, pairs), key=lambda item: -(item[0].cpu_seconds or 0.0))[:slowest]
    without_sums = [pair for pair in WARMUP_PAIRS if "\\sum" not in pair[0]]
    print(f"{len(pairs)} symbolic checks in warm workers; the slowest, each again as a fresh worker's "
          "first check (with the warm-up pairs / without the warm-up's sum):")
    worst = 0.0
    for warm, (name, pred, gold) in ranked:
        cold, cold_without_sum = fresh_check_cpu(pred, gold, WARMUP_PAIRS), fresh_check_cpu(pred, gold, without_sums)
        worst = max(worst, cold)
        print(f"  {name:42} warm {warm.cpu_seconds:5.2f} s   fresh {cold:5.2f} s / {cold_without_sum:5.2f} s CPU")
    print(f"CPU limit {DEFAULT_DEADLINE_S} s: {DEFAULT_DEADLINE_S / worst:.1f} times the slowest fresh check")


def hostile_costs() -> None:
    with Grader(workers=1) as grader:
        grader.compare_many([("1", "\\frac{2}{2}")])
        for name, answer in HOSTILE.items():
            started = time.perf_counter()
            (grade,) = grader.compare_many([(answer, "\\frac{1}{7}")])
            ours = time.perf_counter() - started
            started = time.perf_counter()
            plain = plain_math_verify(f"$\\boxed{{{answer}}}$", "$\\frac{1}{7}$")
            theirs = time.perf_counter() - started
            verdict = "timed out" if grade.timed_out else grade.error or f"correct={grade.correct}"
            print(f"{name:24} rstar2 {ours:5.2f} s ({verdict})   math-verify {theirs:5.2f} s (correct={plain})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--skip-hostile", action="store_true", help="skip the hostile inputs (math-verify takes 5-8 s each)"
    )
    args = parser.parse_args()
    if not DATA.is_dir():
        sys.exit(f"shared data not found at {DATA}; set RSTAR2_SHARED_DATA")
    section("agreement")
    with Grader() as grader:
        agreement_answer_equiv(grader)
        agreement_qwen(grader)
        agreement_tora(grader)
        agreement_gold_answers(grader)
    section("speed on 800 real outputs (extraction + verification)")
    speed(read_rows("math_cot_samples/qwen25_math_cot_100x8.jsonl"))
    section("the deadline's margin: the slowest symbolic checks, in CPU seconds")
    deadline_margin()
    if not args.skip_hostile:
        section("hostile inputs (pred against gold \\frac{1}{7})")
        hostile_costs()


if __name__ == "__main__":
    main()
