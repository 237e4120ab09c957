"""Every command line the user docs print (fenced and inline, doc_commands.py) names things that
exist, so a figure can be re-run with its command:

* a `benchmarks/NAME.py` line: the script exists and takes every flag it is given (read from its
  `add_argument` calls, without importing the benchmark);
* an `rstar2 ...` line: the subcommand exists and takes every flag (test_readme.py also parses
  the fenced ones whole; inline ones hold placeholders such as RECIPE.yaml, so names only);
* `--set KEY=VALUE`: applied to the recipe its command names (`rstar2 demo --recipe`, the
  `train`/`sft` RECIPE) and validated, so a removed or misspelled key fails; without a
  command (inline fragments) or with a placeholder value (LR, N, ...), KEY must be a field of
  the recipe models (RunConfig, the GSM8K pipeline's `gsm8k:` section, SFTConfig);
* a `runs/...` path given as an argument (`--model runs/cpu-demo/final`, `--set
  gsm8k.rl_train=runs/...`, `rstar2 view runs/cpu-demo`) is one a documented command writes: a
  run folder some `rstar2 demo/train/sft` line names (its --name or its recipe's name) or an
  `--out` folder, and below it a path that kind of run writes (`layouts()`, read from the code that
  writes it); a model option names a model folder (`final`, the demo's `sft/final`). A
  placeholder run (`runs/<name>/final`) stands for any run.

Commands run in a checkout of another commit (after `cd /tmp/...`) are that commit's and are
left alone.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import typer

from rstar2.cli import app
from rstar2.cli.demo import NAMED_RECIPES
from rstar2.demo.gsm8k import SECTION as GSM8K_SECTION
from rstar2.demo.gsm8k import GSM8KSettings
from rstar2.demo.pipeline import SECTION as DEMO_SECTION
from rstar2.demo.pipeline import DemoSettings, load_pipeline_recipe
from rstar2.eval.report import RESULTS_JSON, RESULTS_MD
from rstar2.eval.runner import CONFIG_JSON, SAMPLES_JSONL
from rstar2.recipe import ConfigError, field_paths, read_recipe
from rstar2.run.config import RunConfig
from rstar2.run.recipe import load_config
from rstar2.sft.config import SFTConfig, load_sft_config
from tests.docs.doc_commands import REPO, Command, commands, rstar2_args, script_args, words
from tests.docs.test_cli_help import commands as cli_commands

ROOT = typer.main.get_command(app)
TREE = cli_commands()
SUBCOMMAND = re.compile(r"^[a-z][a-z0-9-]*$")
NUMBER = re.compile(r"^-\d")
PLACEHOLDER_VALUE = re.compile(r"^(?:[A-Z][A-Z0-9_]*|\.\.\.|…|<.*>)$|\.\.\.|…")
PLACEHOLDER_KEYS = {"KEY", "dotted.path"}  # `--set KEY=VALUE` as syntax (config.md is generated)
OUTPUTS = {"--out", "-o"}
MODEL_OPTIONS = {"--model", "-m", "--sft-model"}
MODEL_KEYS = re.compile(r"(?:^|\.)(?:model\.path|sft_model)$")
MODEL_DIRS = {"final", "sft/final"}  # what save_policy/export write: a run's and the demo's SFT model
RECIPE_KEYS = {
    "run": set(field_paths(RunConfig)),
    "gsm8k": {f"{GSM8K_SECTION}.{path}" for path in field_paths(GSM8KSettings)},
    "demo": {f"{DEMO_SECTION}.{path}" for path in field_paths(DemoSettings)},
    "sft": set(field_paths(SFTConfig)),
}
RECIPE_COMMANDS = {("demo",), ("train",), ("sft",)}
STAND_IN = REPO / "recipes" / "cpu-demo.yaml"  # for `train runs/X/config.yaml`: a RunConfig like any recipe

CHECKED = [command for command in commands() if not command.elsewhere]


# --- what the runs write ----------------------------------------------------------------------

WRITES = re.compile(r'(?:run_dir\)?|/ name|(data)_dir) / "([\w.]+)"(?: / "([\w.]+)")?')
NESTED_SFT = re.compile(r'name="(\w+)", runs_dir=str\(config\.run_dir\)')  # the demo's SFT run in <run>/sft
WRITERS = {
    "train": ["rstar2/run/training.py", "rstar2/run/settings.py", "rstar2/training/runlog.py"],
    "sft": ["rstar2/sft/run.py", "rstar2/training/runlog.py"],
    "demo": ["rstar2/demo/pipeline.py"],
    "gsm8k": ["rstar2/demo/pipeline.py", "rstar2/demo/gsm8k.py"],
}


def written_by(path: str) -> set[str]:
    """The paths below a run folder that ``path`` writes (``run_dir / "final"``, ``data_dir /
    "heldout.jsonl"`` ...)."""
    found = set()
    for data, first, second in WRITES.findall((REPO / path).read_text()):
        found.add("/".join(part for part in (data, first, second) if part))
    return found


@functools.cache
def layouts() -> dict[str, set[str]]:
    """What each kind of run writes below its folder; the demo's also hold an SFT run."""
    found = {kind: set().union(*map(written_by, files)) for kind, files in WRITERS.items()}
    for kind in ("demo", "gsm8k"):
        nested = NESTED_SFT.search((REPO / "rstar2/demo/pipeline.py").read_text()).group(1)
        found[kind] |= found["train"] | {nested} | {f"{nested}/{path}" for path in found["sft"]}
    found["eval"] = {CONFIG_JSON, SAMPLES_JSONL, RESULTS_JSON, RESULTS_MD}
    found["folder"] = set()  # a benchmark's --out: the folder itself
    return found


def test_the_layouts_are_read_from_the_code():
    runs = layouts()
    assert {"final", "config.yaml", "metrics.jsonl", "rollouts", "checkpoints"} <= runs["train"]
    assert {"final", "config.yaml", "metrics.jsonl", "checkpoints"} <= runs["sft"]
    assert {"sft/final", "data/rl_train.jsonl", "data/heldout.jsonl", "eval", "summary.json"} <= runs["demo"]
    assert {"data/gsm8k_test_eval.jsonl", "data/rl_candidates.jsonl"} <= runs["gsm8k"] - runs["demo"]
    assert MODEL_DIRS <= runs["demo"]


# --- reading one command ----------------------------------------------------------------------

def resolve(argv: list[str]):
    """``(subcommand path, click command, the words after it)``; LookupError for a subcommand
    that does not exist."""
    path, command = (), ROOT
    while argv and hasattr(command, "commands") and SUBCOMMAND.match(argv[0]):
        path = (*path, argv[0])
        if path not in TREE:
            raise LookupError(f"`rstar2 {' '.join(path)}` is no command")
        command, argv = TREE[path], argv[1:]
    return path, command, argv


def split_argv(command, argv: list[str]) -> tuple[list[tuple[str, str | None]], list[str], list[str]]:
    """``(options given, each as (name, value or None), positionals, unknown option names)``."""
    options = {name: param for param in command.params for name in (*param.opts, *param.secondary_opts)}
    given, positionals, unknown = [], [], []
    words_left = list(argv)
    while words_left:
        word = words_left.pop(0)
        if not word.startswith("-") or word == "-" or NUMBER.match(word):
            positionals.append(word)
            continue
        name, equals, value = word.partition("=")
        param = options.get(name)
        if name == "--help":
            given.append((name, None))
        elif param is None:
            unknown.append(name)
        elif getattr(param, "is_flag", False) or getattr(param, "count", False):
            given.append((name, None))
        else:
            given.append((name, value if equals else (words_left.pop(0) if words_left else None)))
    return given, positionals, unknown


def loose_pairs(argv: list[str]) -> list[tuple[str | None, str]]:
    """``(the option before it or None, word)`` for each word that is not an option, for
    commands whose parser the test does not hold (benchmarks, inline fragments)."""
    pairs, before = [], None
    for word in argv:
        if word.startswith("-") and not NUMBER.match(word):
            name, equals, value = word.partition("=")
            before = None if equals else name
            if equals:
                pairs.append((name, value))
        else:
            pairs.append((before, word))
            before = None
    return pairs


def overrides(pairs) -> list[str]:
    return [value for name, value in pairs if name == "--set" and value]


def option(given, *names: str) -> str | None:
    values = [value for name, value in given if name in names]
    return values[-1] if values else None


@functools.cache
def script_flags(name: str) -> frozenset[str]:
    """The option strings of a benchmark's argparse parser, from its ``add_argument`` calls."""
    flags = {"-h", "--help"}
    for node in ast.walk(ast.parse((REPO / "benchmarks" / name).read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags |= {arg.value for arg in node.args
                      if isinstance(arg, ast.Constant) and str(arg.value).startswith("-")}
    return frozenset(flags)


def test_the_flags_read_from_a_script_are_its_parsers():
    """The ``add_argument`` reading agrees with the parser itself (one script that starts fast)."""
    shown = subprocess.run([sys.executable, "benchmarks/sandbox_cpu_bench.py", "--help"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout
    options = shown[shown.index("options:"):]
    assert set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", options)) == script_flags("sandbox_cpu_bench.py")


# --- the checks -------------------------------------------------------------------------------

def case_id(command: Command) -> str:
    return f"{command.where}: {command.text[:50]}"


RSTAR2 = [command for command in CHECKED if rstar2_args(command.text) is not None]
SCRIPTS = [command for command in CHECKED if script_args(command.text) is not None]
FRAGMENTS = [command for command in CHECKED if not command.fenced and command.text.startswith("-")
             and script_args(command.text) is None]


@pytest.mark.parametrize("command", SCRIPTS, ids=case_id)
def test_benchmark_lines_name_a_script_and_its_flags(command):
    name, args = script_args(command.text)
    assert (REPO / "benchmarks" / name).is_file(), f"{command.where}: no benchmarks/{name}"
    source = (REPO / "benchmarks" / name).read_text()
    first = re.search(r"^(from|import) benchmarks\b", source, re.M)
    assert first is None or "sys.path.insert" in source[:first.start()], (
        f"{command.where}: benchmarks/{name} imports the benchmarks package without putting the "
        "repository on its path: run as shown, it stops at the import")
    flags = [word.partition("=")[0] for word in words(args) if word.startswith("-") and not NUMBER.match(word)]
    unknown = [flag for flag in flags if flag not in script_flags(name)]
    assert unknown == [], (f"{command.where}: benchmarks/{name} takes no {', '.join(unknown)} "
                           f"(it takes {', '.join(sorted(script_flags(name)))})")


@pytest.mark.parametrize("command", RSTAR2, ids=case_id)
def test_rstar2_lines_name_a_command_and_its_flags(command):
    try:
        path, click_command, argv = resolve(words(rstar2_args(command.text)))
    except LookupError as error:
        pytest.fail(f"{command.where}: {error}")
    _, _, unknown = split_argv(click_command, argv)
    assert unknown == [], f"{command.where}: `rstar2 {' '.join(path)}` takes no {', '.join(unknown)}"


def parse(command: Command):
    """``(subcommand path, options given, positionals)`` of an rstar2 command; None for a
    benchmark line, an inline fragment or a subcommand that does not exist (its test says so)."""
    args = rstar2_args(command.text)
    if args is None or script_args(command.text) is not None:
        return None
    try:
        path, click_command, argv = resolve(words(args))
    except LookupError:
        return None
    given, positionals, _ = split_argv(click_command, argv)
    return path, given, positionals


def recipe_of(path: tuple[str, ...], given, positionals) -> Path | None:
    """The recipe file a demo/train/sft line reads (None: a placeholder such as RECIPE.yaml)."""
    if path == ("demo",):
        recipe = option(given, "--recipe") or "cpu-demo"
        return NAMED_RECIPES.get(recipe, REPO / recipe)
    recipe = REPO / positionals[0] if positionals else None
    if recipe is not None and not recipe.is_file() and recipe.relative_to(REPO).parts[0] == "runs":
        return STAND_IN if path == ("train",) else None
    return recipe if recipe is not None and recipe.is_file() else None


def check_overrides(where: str, path: tuple[str, ...], recipe: Path | None, given, settings: list[str]) -> None:
    """Apply ``settings`` to the recipe the way the command does and validate; with a
    placeholder value or no recipe, only the keys are checked."""
    if recipe is None or any(PLACEHOLDER_VALUE.search(s.partition("=")[2]) for s in settings):
        kinds = {("sft",): ["sft"], ("demo",): ["run", "gsm8k", "demo"], ("train",): ["run"]}.get(path, list(RECIPE_KEYS))
        known = set().union(*(RECIPE_KEYS[kind] for kind in kinds))
        unknown = [s for s in settings if s.partition("=")[0] not in known | PLACEHOLDER_KEYS]
        if unknown:
            pytest.fail(f"{where}: no such recipe field: {', '.join(unknown)}")
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # a moved field: the docs use the new place
        try:
            if path == ("sft",):
                load_sft_config(recipe, settings)
            elif path == ("demo",):  # as `rstar2 demo` reads it: the pipeline's section, then the run
                section, kind = ((GSM8K_SECTION, GSM8KSettings) if GSM8K_SECTION in read_recipe(recipe)
                                 else (DEMO_SECTION, DemoSettings))
                sft_model = option(given, "--sft-model")
                load_pipeline_recipe(recipe, [*settings, *([f"{section}.sft_model={sft_model}"] if sft_model else [])],
                                     None, section, kind)
            else:
                load_config(recipe, settings)
            return
        except (ConfigError, FutureWarning) as error:
            problem = str(error).removeprefix(f"{recipe}: ")
    pytest.fail(f"{where}: {' '.join('--set ' + s for s in settings)} on {recipe.relative_to(REPO)}: {problem}")


SETS = [command for command in RSTAR2 + SCRIPTS + FRAGMENTS if "--set" in command.text]


@pytest.mark.parametrize("command", SETS, ids=case_id)
def test_every_set_names_a_recipe_field(command):
    if (parsed := parse(command)) is not None:
        path, given, positionals = parsed
        recipe = recipe_of(path, given, positionals) if path in RECIPE_COMMANDS else None
        check_overrides(command.where, path, recipe, given, overrides(given))
    else:
        check_overrides(command.where, (), None, [], overrides(loose_pairs(words(loose_args(command)))))


def loose_args(command: Command) -> str:
    """What follows the script of a benchmark line, or an inline fragment whole."""
    return script_args(command.text)[1] if script_args(command.text) else command.text


# --- run paths ---------------------------------------------------------------------------------

def is_placeholder(word: str | None) -> bool:
    return word is None or bool(PLACEHOLDER_VALUE.search(word)) or "<" in word or re.search(r"-N$", word) is not None


@functools.cache
def produced() -> dict[str, set[str]]:
    """Every run folder a documented command writes, with its kinds (keys of ``layouts()``:
    `rstar2 train recipes/cpu-demo.yaml` writes the demo's folder too)."""
    found: dict[str, set[str]] = {}
    for path, given, positionals in filter(None, map(parse, RSTAR2)):
        out = option(given, "--out", "-o")
        if path == ("eval",) and out:
            found.setdefault(out.rstrip("/"), set()).add("eval")
        if path not in RECIPE_COMMANDS:
            continue
        recipe = recipe_of(path, given, positionals)
        resumed = bool(positionals) and positionals[0].startswith("runs/")  # `train runs/X/config.yaml`: X exists
        tree = read_recipe(recipe) if recipe is not None and not resumed else {}
        name = option(given, "--name") or tree.get("name")
        if name is None or is_placeholder(name):
            continue
        kind = path[0] if path != ("demo",) else ("gsm8k" if GSM8K_SECTION in tree else "demo")
        found.setdefault(f"{tree.get('runs_dir', 'runs')}/{name}", set()).add(kind)
    for command in SCRIPTS:
        out = option(loose_pairs(words(script_args(command.text)[1])), "--out")
        if out:
            found.setdefault(out.rstrip("/"), set()).add("folder")
    return found


def test_the_documented_commands_write_runs():
    runs = produced()
    assert runs["runs/cpu-demo"] == {"demo", "train"} and runs["runs/gsm8k-cpu"] == {"gsm8k"}
    assert runs["runs/qwen3-1.7b-stage2"] == {"train"} and runs["runs/qwen3-1.7b-sft"] == {"sft"}


def path_problem(value: str, model: bool) -> str | None:
    """Why ``value`` is not a run path a documented command writes (None when it is)."""
    value = value.rstrip("/")
    parts = value.split("/")
    if len(parts) > 1 and "<" in parts[1]:  # runs/<name>/...: any run
        candidates = [("/".join(parts[:2]), kind) for kind in ("train", "sft", "demo", "gsm8k")]
    else:
        candidates = [(folder, kind) for folder, kinds in produced().items() for kind in sorted(kinds)
                      if value == folder or value.startswith(folder + "/")]
    if not candidates:
        return "no documented command writes this run folder"
    for folder, kind in candidates:
        rest = value[len(folder) + 1:]
        if model and rest in MODEL_DIRS & layouts()[kind]:
            return None
        if not model and (rest == "" or any(rest == p or rest.startswith(p + "/") for p in layouts()[kind])):
            return None
    wanted = "a model folder (" + ", ".join(sorted(MODEL_DIRS)) + ")" if model else "a path it writes"
    return f"not {wanted} of {', '.join(f'{folder} ({kind})' for folder, kind in candidates)}"


def path_arguments(command: Command) -> list[tuple[str, str, bool]]:
    """``(option or key, runs/ path, is a model)`` for the run paths a command reads."""
    if (parsed := parse(command)) is not None:
        _, given, positionals = parsed
        pairs = [*given, *((None, word) for word in positionals)]
    else:
        pairs = loose_pairs(words(loose_args(command)))
    found = []
    for name, value in pairs:
        if name == "--set" and value:
            name, _, value = value.partition("=")
        if value and value.startswith("runs/") and name not in OUTPUTS:
            found.append((name or "argument", value, name in MODEL_OPTIONS or bool(MODEL_KEYS.search(name or ""))))
    return found


PATHS = [command for command in RSTAR2 + SCRIPTS + FRAGMENTS if "runs/" in command.text]


@pytest.mark.parametrize("command", PATHS, ids=case_id)
def test_run_paths_are_ones_the_documented_commands_write(command):
    wrong = [f"{name} {value}: {problem}" for name, value, model in path_arguments(command)
             if (problem := path_problem(value, model))]
    assert wrong == [], f"{command.where}: " + "; ".join(wrong)


def test_the_checks_catch_what_drifted():
    """The drift these tests exist for: a renamed flag, a removed key, a moved model."""
    assert "--worker-script" not in script_flags("sandbox_cpu_bench.py")
    with pytest.raises(LookupError):
        resolve(["trian", "recipes/cpu-demo.yaml"])
    assert split_argv(TREE[("chat",)], ["--modle", "x"])[2] == ["--modle"]
    with pytest.raises(pytest.fail.Exception, match="rl_problems"):
        check_overrides("here", ("demo",), NAMED_RECIPES["gsm8k"], [], ["gsm8k.rl_problems=60"])
    with pytest.raises(pytest.fail.Exception, match="no such recipe field"):
        check_overrides("here", (), None, [], ["rl.lr=LR"])
    assert path_problem("runs/cpu-demo/sft", model=True) is not None
    assert path_problem("runs/cpu-demo/sft/final", model=True) is None
    assert path_problem("runs/no-such-run/final", model=False) is not None
    assert path_problem("runs/<run>/final", model=True) is None
