"""``rl.roc.mode: release`` against the official code, on many synthetic prompt groups.

Run (a minute; the official code is read from a checkout you provide, never shipped here)::

    git clone https://github.com/microsoft/rStar /tmp/rStar
    flock /tmp/rstar2-cpu.lock .venv/bin/python benchmarks/roc_release_bench.py --release /tmp/rStar

Random rollouts (1-5 turns; tool calls with every outcome, outputs that do or do not say
"error", answers that are missing, repeated, unbalanced or printed by the tool, a last turn cut
by the budget or whose tool responses no longer fitted) are built as rstar2 trajectories with
``trajectory``: the turns laid out as the agent renders them with a ChatML template. Each group
goes through

* rstar2: ``ReleaseRoC`` (and ``PaperRoC``) on ``trajectory_facts``, and
* the release: ``reject_equal_reward`` then ``resample_of_correct`` from the checkout's
  ``rstar2_agent/down_sample``, called as its ``RStar2AgentRayTrainer._down_sample_batch`` calls
  them with the shipped settings (both penalties on, 2 per side), world size 1, on the joined
  turn texts; verl's ``DataProto`` is stood in for by ``ReleaseBatch`` (what the code reads of it).

Printed: per group size, how many groups got the same verdict (the same kept rollouts, or both
dropped) with ``error_signal: text`` and ``outcome``, of the groups the release gives a verdict
on, and the groups where its assertion stops the run instead; then, over the 2G groups, the
kept positives' share with a failed call (by outcome) and with an unbalanced answer tag under
each selector.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import types
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from rstar2.agent.prompt import tool_responses_text
from rstar2.agent.trajectory import ToolCallRecord, Trajectory, Turn, last_answer
from rstar2.rl.advantage import group_algorithm
from rstar2.rl.config import RLConfig, RocConfig
from rstar2.rl.roc import trajectory_facts

END = "<|im_end|>"
CALL = '<tool_call>{"name": "python", "arguments": {"code": "..."}}</tool_call>'
ANSWER = "so</reason>\n<answer>\\boxed{4}</answer>"
OUTPUTS = {  # what each outcome's tool response says, as rstar2's tool_output words it
    "ok": ["4", "[1, 2, 3]", "no error found", "errors: 0", "<answer>5</answer>", "True"],
    "error": ["Traceback (most recent call last):\nZeroDivisionError: division by zero",
              "NameError: name 'x' is not defined", "Error: the program exited with an error."],
    "timeout": ["Timeout: the code did not finish within the time limit and was stopped.",
                "12\nTimeout: the code did not finish within the time limit and was stopped."],
    "killed": ["Killed: the program was terminated (out of memory, or killed by a signal)."],
    "parse_error": ["Error: the tool call is not valid JSON (Expecting value: line 1 column 1 (char 0))."],
}
STATUSES = ["ok"] * 12 + ["error", "error", "timeout", "killed", "parse_error"]
ENDINGS = {  # the last turn's text after its reasoning
    "one answer": ANSWER, "no answer": "so</reason>", "two answers": ANSWER + " <answer>4</answer>",
    "stray opener": ANSWER + " <answer>", "stray closer": ANSWER + " </answer>",
    "echoed response": ANSWER + " <tool_response>error?</tool_response>",
}


def tool_turn(outputs: list[str]) -> str:
    """The tool turn after an assistant turn: the user turn of response blocks, the next
    assistant header and the forced ``<reason>``."""
    return f"\n<|im_start|>user\n{tool_responses_text(outputs)}{END}\n<|im_start|>assistant\n<reason>"


def trajectory(*turns: tuple[str, list[tuple[str, str]]], stop: str = "answer", cut: bool = False) -> Trajectory:
    """A trajectory from its assistant turns, each ``(text, calls)`` with ``calls`` a list of
    ``(status, output)``. A turn with calls is followed by their tool turn, except the last
    (its responses no longer fitted the budget); ``cut``: the budget cut the last turn before
    the model closed it (no ``<|im_end|>``)."""
    pieces, records = [], []
    for index, (text, calls) in enumerate(turns):
        last = index == len(turns) - 1
        pieces.append(Turn(role="assistant", text=text + ("" if last and cut else END), start=len(pieces),
                           end=len(pieces) + 1))
        records += [ToolCallRecord(turn=index, code="...", raw="...", status=status, output=output,
                                   error=status != "ok") for status, output in calls]
        if calls and not last:
            pieces.append(Turn(role="tool", text=tool_turn([output for _, output in calls]), start=len(pieces),
                               end=len(pieces) + 1))
    size = len(pieces)
    assistant = "".join(turn.text for turn in pieces if turn.role == "assistant")
    return Trajectory(prompt_ids=[0], prompt_text="q", response_ids=list(range(size)), loss_mask=[1] * size,
                      logprobs=[0.0] * size, turns=pieces, tool_calls=records,
                      num_assistant_turns=len(turns), final_answer=last_answer(assistant), stop_reason=stop,
                      temperature=1.0)


def random_trajectory(rng: np.random.Generator) -> Trajectory:
    """One synthetic rollout (module docstring)."""
    turns = []
    for _ in range(int(rng.integers(0, 5))):
        statuses = rng.choice(STATUSES, size=int(rng.integers(1, 3)))
        calls = [(str(s), str(rng.choice(OUTPUTS[str(s)]))) for s in statuses]
        early_answer = " <answer>3</answer>" if rng.random() < 0.05 else ""
        turns.append(("let me compute " + CALL + early_answer, calls))
    ending = str(rng.choice(list(ENDINGS), p=[0.7, 0.1, 0.05, 0.05, 0.05, 0.05]))
    outcome = rng.random()
    if outcome < 0.08:  # the budget ran out inside the last turn
        return trajectory(*turns, (ENDINGS[ending] + " and then", []), stop="max_tokens", cut=True)
    if outcome < 0.12 and turns:  # the last turn's calls ran, their responses did not fit
        return trajectory(*turns, stop="max_tokens")
    return trajectory(*turns, (ENDINGS[ending], []), stop="answer" if "answer>" in ending else "no_tool_call")


class ReleaseBatch:
    """verl's ``DataProto`` as far as the release's down-sampling reads it: tensors in
    ``batch``, per-row arrays in ``non_tensor_batch``, rows selected by a boolean mask, rows
    iterated one by one."""

    def __init__(self, tensors: dict[str, torch.Tensor], arrays: dict[str, np.ndarray]):
        self.batch = tensors
        self.non_tensor_batch = arrays

    def __len__(self) -> int:
        return len(self.non_tensor_batch["uid"])

    def __getitem__(self, mask) -> ReleaseBatch:
        mask = torch.as_tensor(mask, dtype=torch.bool)
        return ReleaseBatch({k: v[mask] for k, v in self.batch.items()},
                            {k: v[mask.numpy()] for k, v in self.non_tensor_batch.items()})

    def __iter__(self):
        for row in range(len(self)):
            yield SimpleNamespace(batch={k: v[row] for k, v in self.batch.items()},
                                  non_tensor_batch={k: v[row] for k, v in self.non_tensor_batch.items()})


def load_release(checkout: Path) -> types.ModuleType:
    """The release's ``rstar2_agent/down_sample`` package, imported from ``checkout`` with
    ``ReleaseBatch`` standing in for ``verl.protocol``."""
    folder = checkout / "rstar2_agent" / "down_sample"
    if not (folder / "roc.py").is_file():
        raise SystemExit(f"error: {folder}/roc.py not found; --release takes a checkout of microsoft/rStar")
    protocol = types.ModuleType("verl.protocol")
    protocol.DataProto = protocol.DataProtoItem = ReleaseBatch
    sys.modules.setdefault("verl", types.ModuleType("verl"))
    sys.modules["verl.protocol"] = protocol
    spec = importlib.util.spec_from_file_location("release_down_sample", folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package
    spec.loader.exec_module(package)
    return package


def release_verdict(release, texts: list[str], rewards: list[float], keep: int, floor: int):
    """The rows the release keeps of one group (a tuple), or "dropped", or "assertion"."""
    n = len(texts)
    batch = ReleaseBatch({"token_level_scores": torch.tensor(rewards)[:, None], "input_ids": torch.zeros(n, 1)},
                         {"uid": np.array(["g"] * n, dtype=object), "row": np.arange(n),
                          "prompt_text": np.array(["q"] * n, dtype=object),
                          "response_text": np.array(texts, dtype=object)})
    settings = {"roc_error_ratio": True, "roc_answer_format": True, "min_zero_reward_trace_num": floor,
                "min_non_zero_reward_trace_num": floor, "down_sample_to_n": keep}
    batch, _ = release.reject_equal_reward(batch, True, 1)
    if batch is None:
        return "dropped"
    try:
        batch, _ = release.resample_of_correct(batch, None, settings, True, world_size=1)
    except AssertionError:
        return "assertion"
    return tuple(int(row) for row in batch.non_tensor_batch["row"]) if batch is not None else "dropped"


def rstar2_verdict(algorithm, facts, rng):
    decision = algorithm.select(facts, rng)
    return decision.kept if decision.kept else "dropped"


def kept_positive_shares(groups, verdicts) -> tuple[float, float]:
    """Among kept positives: the share with a failed call (outcome) and with unbalanced tags."""
    kept = [facts[i] for facts, verdict in zip(groups, verdicts) if isinstance(verdict, tuple)
            for i in verdict if facts[i].reward == 1.0]
    failed = sum(f.tool_errors > 0 for f in kept)
    unbalanced = sum(len({f.text.answer_openers, f.text.answer_closers, f.text.closed_answers}) > 1 for f in kept)
    return failed / max(len(kept), 1), unbalanced / max(len(kept), 1)


def compare(release, groups: int, size: int, keep: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    floor = min(2, keep // 2)
    algorithms = {signal: group_algorithm(RLConfig(steps=1, group_size=keep, roc=RocConfig(
        mode="release", error_signal=signal, min_per_side=floor))) for signal in ("text", "outcome")}
    paper = group_algorithm(RLConfig(steps=1, group_size=keep))
    counts, facts_of, verdicts = Counter(), [], {"release": [], "outcome": [], "paper": []}
    for _ in range(groups):
        accuracy = rng.random()
        rollouts = [random_trajectory(rng) for _ in range(size)]
        rewards = [float(rng.random() < accuracy) for _ in rollouts]
        facts = [trajectory_facts(t, r) for t, r in zip(rollouts, rewards)]
        official = release_verdict(release, ["".join(turn.text for turn in t.turns) for t in rollouts],
                                   rewards, keep, floor)
        ours = {signal: rstar2_verdict(algorithm, facts, rng) for signal, algorithm in algorithms.items()}
        counts["groups"] += official != "assertion"  # compared where the release gives a verdict
        counts["assertion"] += official == "assertion"
        counts["same (text)"] += official == ours["text"]
        counts["same (outcome)"] += official == ours["outcome"]
        facts_of.append(facts)
        verdicts["release"].append(official)
        verdicts["outcome"].append(ours["outcome"])
        verdicts["paper"].append(rstar2_verdict(paper, facts, rng))
    return {"counts": counts, "shares": {name: kept_positive_shares(facts_of, v) for name, v in verdicts.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--release", type=Path, required=True, help="a checkout of microsoft/rStar")
    parser.add_argument("--groups", type=int, default=2500, help="synthetic groups of 2G = 32")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    release = load_release(args.release)
    cases = [(args.groups, 32, 16)] + [(args.groups // 10, size, 16) for size in (15, 16, 17, 30, 33, 48)]
    cases.append((args.groups // 10, 14, 7))
    print(f"{'size':>4} {'G':>3} {'groups':>6} {'same (text)':>12} {'same (outcome)':>15} {'release asserts':>16}")
    results = [compare(release, groups, size, keep, args.seed + index)
               for index, (groups, size, keep) in enumerate(cases)]
    for (_, size, keep), result in zip(cases, results):
        c = result["counts"]
        print(f"{size:>4} {keep:>3} {c['groups']:>6} {c['same (text)']:>12} {c['same (outcome)']:>15} "
              f"{c['assertion']:>16}")
    print("\nkept positives of the 2G groups: share with a failed call (outcome) / with unbalanced answer tags")
    for name, label in (("release", "official code"), ("outcome", "release mode, error_signal outcome"),
                        ("paper", "paper mode")):
        failed, unbalanced = results[0]["shares"][name]
        print(f"  {label:<36} {failed:6.1%} / {unbalanced:5.1%}")


if __name__ == "__main__":
    main()
