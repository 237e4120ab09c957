"""The options several `rstar2` commands share (model, engine, server, tokenizer, dtype,
device, sandbox, the answer-tag rule), declared once so that every command spells and explains
them the same way. Every option names its value in words (``--workers N``), never by a Python
type (tests/docs/test_cli_help.py holds every command to that).

``trained_card`` finds how the model was trained to be prompted (its ``rstar2.json``), which
chat and eval use where no option says otherwise. The engine kinds
(``rstar2.engines.registry.ENGINE_KINDS``, the one vocabulary) and dtypes are the factory's, so a
new kind there shows up in every command's ``--engine`` choices.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional, get_args

import typer

from rstar2.agent.prompt import PromptConfig
from rstar2.cli.app import fail
from rstar2.engines.registry import ENGINE_KINDS, EngineSpec
from rstar2.models.device import DEVICE_HELP

DEFAULT_ENGINE: str = EngineSpec.model_fields["kind"].default
DTYPES: tuple[str, ...] = get_args(EngineSpec.model_fields["dtype"].annotation)
DEFAULT_DTYPE: str = EngineSpec.model_fields["dtype"].default
DEFAULT_MODEL: str = EngineSpec.model_fields["model"].default
PROMPT_VARIANTS: tuple[str, ...] = tuple(  # the variants with the tool; --no-tools drops it
    variant for variant in get_args(PromptConfig.model_fields["variant"].annotation)
    if PromptConfig(variant=variant).tools_enabled)


def one_of(choices: tuple[str, ...], what: str) -> dict:
    """Option settings that accept only ``choices`` (shown as the metavar) and refuse anything
    else in one line, passing the value on as a plain string."""
    def parse(value: str) -> str:
        if value not in choices:
            fail(f"unknown {what} {value!r}: choose one of {', '.join(choices)}")
        return value

    return {"parser": parse, "metavar": "[" + "|".join(choices) + "]"}


Model = Annotated[str, typer.Option(
    "--model", "-m", metavar="MODEL",
    help="'default' (the embedded SmolLM2-135M-Instruct), a model directory such as "
         "runs/<run>/final, a .gguf file, or a Hugging Face hub id such as Qwen/Qwen3-1.7B "
         "(@REVISION pins one; fetched into the HF cache, HF_HUB_OFFLINE=1 uses the cache "
         "alone); with --engine openai also a served model's name.")]
Engine = Annotated[str, typer.Option(
    "--engine", **one_of(ENGINE_KINDS, "engine"),
    help="Where the model runs: in this process (hf), behind an OpenAI-compatible server at "
         "--base-url (openai: vLLM, SGLang, rstar2 serve-model), or in-process vLLM on a GPU.")]
BaseUrl = Annotated[Optional[str], typer.Option(
    "--base-url", metavar="URL", help="Server URL for --engine openai, e.g. http://localhost:8000/v1.")]
Tokenizer = Annotated[Optional[str], typer.Option(
    "--tokenizer", metavar="DIR", help="Model directory or hub id whose tokenizer to use instead "
                        "of --model's (needed when --model is a served name).")]
Dtype = Annotated[str, typer.Option(
    "--dtype", **one_of(DTYPES, "dtype"), help="Weights dtype of an in-process model.")]
ANSWER_TAG_HELP = ("Read the answer only from \\boxed{} inside <answer>...</answer> (the paper's "
                   "reward), or also the last \\boxed{} anywhere (--no-answer-tag: models that "
                   "use no tags).")
AnswerTag = Annotated[Optional[bool], typer.Option(
    "--answer-tag/--no-answer-tag",
    help=ANSWER_TAG_HELP + " Default: the model's rstar2.json, else --answer-tag.")]
SandboxUrls = Annotated[Optional[list[str]], typer.Option(
    "--sandbox-url", metavar="URL", help="Sandbox service for tool calls (repeatable). Default: start a "
                          "private one.")]
Device = Annotated[str, typer.Option(
    "--device", metavar="DEVICE", help="Where an in-process model runs: " + DEVICE_HELP)]
Overrides = Annotated[Optional[list[str]], typer.Option(
    "--set", metavar="KEY=VALUE", help="Dotted override of one of the recipe's fields, "
    "repeatable: --set section.field=value (docs/config.md lists every field).")]
Resume = Annotated[bool, typer.Option(
    "--resume", help="Continue the run from its latest checkpoint (weights, optimizer, schedule, "
    "data position and RNG state).")]
RunName = Annotated[Optional[str], typer.Option(
    "--name", metavar="NAME", help="Run name (the folder under runs_dir); overrides the recipe's `name`.")]


def apply_threads(threads: int | None) -> int | None:
    """Make ``--threads`` the process's choice as soon as it is parsed, before any model
    loads (``rstar2.models.loading.use_cpu_threads``)."""
    if threads is not None:
        from rstar2.models.loading import use_cpu_threads

        use_cpu_threads(threads)
    return threads


Threads = Annotated[Optional[int], typer.Option(
    "--threads", min=1, metavar="N", envvar="OMP_NUM_THREADS", callback=apply_threads,
    help="CPU threads for the model's arithmetic. Default: every core this process may use. "
         "Beside another busy job, give fewer threads than there are idle cores: a thread "
         "that has to wait for its core slows every step.")]
RecipeDevice = Annotated[Optional[str], typer.Option(
    "--device", metavar="DEVICE", help="Where the policy trains and the engine samples (sets "
    "model.device; default: the recipe's, auto unless set): " + DEVICE_HELP)]


MaxRequestMb = Annotated[float, typer.Option(
    "--max-request-mb", min=0.001, metavar="MIB", help="Largest HTTP request body, MiB; a "
    "larger one is answered 413 without being read.")]
DrainTimeout = Annotated[float, typer.Option(
    "--drain-timeout-s", min=0.0, metavar="SECONDS", help="On SIGTERM or Ctrl-C: seconds the "
    "requests in flight may take to finish; those still running are then aborted (each "
    "answered 503) and the server exits.")]
ReadTimeout = Annotated[float, typer.Option(
    "--read-timeout-s", min=0.001, metavar="SECONDS", help="Time a client gets to send a "
    "request's headers, then as long again for its body; a connection that stalls longer is "
    "closed (a stalled body is answered 408).")]


RunOut = Annotated[Optional[Path], typer.Option(
    "--out", metavar="DIR", help="The run folder itself, e.g. /data/runs/try-3 (runs_dir and name "
    "from its parent and last part); instead of --name.")]


def recipe_overrides(overrides: list[str] | None, name: str | None, device: str | None,
                     out: Path | None = None) -> list[str]:
    """The ``--set`` overrides with ``--name`` (or ``--out``, the folder they make) and
    ``--device`` as the fields they set."""
    if out is not None and name:
        fail("--out and --name both say where the run goes: give one")
    if out is not None:
        if not out.name:
            fail(f"--out {out}: name the run's own folder, not a root")
        folder = [f"runs_dir={out.parent}", f"name={out.name}"]
    else:
        folder = [f"name={name}"] if name else []
    return [*(overrides or []), *folder, *([f"model.device={device}"] if device else [])]


Fields = Annotated[Optional[list[str]], typer.Option(
    "--field", metavar="ROLE=NAME",
    help="Read a problem's ROLE (problem, answer or id) from the rows' field NAME, e.g. "
         "--field problem=question --field answer=final_answer (repeatable). Default: problem, "
         "answer, id.")]
Split = Annotated[Optional[str], typer.Option(
    "--split", metavar="NAME", help="Which split of a data set that has several (a datasets "
    "folder, a hub data set): train, test, validation, ...")]
Subset = Annotated[Optional[str], typer.Option(
    "--subset", metavar="NAME", help="Which subset (configuration) of a hub data set that has several.")]


def field_map(pairs: list[str] | None):
    """``--field problem=question ...`` as a ``rstar2.data.FieldMap``; a bad pair stops the
    command in one line."""
    from pydantic import ValidationError

    from rstar2.data import FieldMap

    mapping = {}
    for pair in pairs or []:
        role, sep, name = pair.partition("=")
        if not sep or not name.strip():
            fail(f"--field {pair!r}: expected ROLE=NAME, e.g. --field problem=question")
        mapping[role.strip()] = name.strip()
    try:
        return FieldMap(**mapping)
    except ValidationError:
        roles = ", ".join(FieldMap.model_fields)
        fail(f"--field: unknown role in {', '.join(mapping)}: the roles are {roles}")


def announce_device(setting: str) -> None:
    """Say on stderr which device ``setting`` resolves to (and why, for auto); a bad or
    missing one stops the command in one line."""
    from rstar2.models.device import device_note

    try:
        typer.echo(device_note(setting), err=True)
    except ValueError as error:
        fail(error)


PromptVariant = Annotated[Optional[str], typer.Option(
    "--prompt-variant", **one_of(PROMPT_VARIANTS, "prompt variant"),
    help="The agent's prompt: the paper's (rstar2) or its short form (short, what rstar2 demo "
         "trains with). Default: the model's rstar2.json, else rstar2.")]


def trained_card(model: str, tokenizer: str | None = None, base_url: str | None = None,
                 import_tools: bool = True):
    """The card (``rstar2.agent.card``) of the model a command is about to use: from its folder,
    its tokenizer's folder, or the server that serves it; announced on stderr, since it changes
    how the model is asked. None when there is none. With ``import_tools`` (a command that
    builds the card's tools) the copies of the tool modules its folder carries are imported, so
    the tools are built from the folder's copy wherever the folder is."""
    from rstar2.agent.card import ModelCard, card_path, read_card
    from rstar2.agent.card_files import import_tool_modules

    card = None
    hub = base_url is None  # a served model's name is the server's, not the hub's
    for source in (model, tokenizer):
        card = read_card(source, hub)
        if card is not None:
            typer.echo(f"using {card_path(source, hub)}: {card.summary()}", err=True)
            break
    if card is None and base_url is not None:
        served = served_model_entry(base_url).get("rstar2")
        if served:
            card = ModelCard.model_validate(served)
            typer.echo(f"using the card {base_url} serves: {card.summary()}", err=True)
    if card is not None and import_tools:
        import_tool_modules(card.tool_files)
    return card


def served_model_entry(base_url: str) -> dict:
    """The first entry of a server's ``/models`` listing; empty when it cannot be read (the
    command then meets the server's error where it uses it)."""
    import httpx

    from rstar2.engines.openai import api_base

    try:
        listing = httpx.get(f"{api_base(base_url)}/models", timeout=10).json()
        return (listing.get("data") or [{}])[0]
    except (httpx.HTTPError, ValueError, AttributeError):
        return {}
