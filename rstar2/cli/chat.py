"""`rstar2 chat` (talk to a model that can run Python) and `rstar2 serve-model` (serve one)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
from pathlib import Path

import typer
from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from rstar2.cli.app import app, fail
from rstar2.cli.options import (
    DEFAULT_DTYPE,
    DEFAULT_ENGINE,
    DEFAULT_MODEL,
    AnswerTag,
    BaseUrl,
    Device,
    DrainTimeout,
    Dtype,
    Engine,
    MaxRequestMb,
    Model,
    PromptVariant,
    ReadTimeout,
    SandboxUrls,
    Threads,
    Tokenizer,
    announce_device,
    trained_card,
)
from rstar2.service import READ_TIMEOUT_S

console = Console()
SPECIAL_TOKEN = re.compile(r"<\|[^|<>\s]+\|>")  # ChatML's <|im_end|> and the like


CHAT_LIMITS = {"max_turns": 10, "max_response_tokens": 1024}  # for a model without a card


@app.command()
def chat(
    prompt: str = typer.Option(None, "--prompt", "-p", metavar="TEXT", help="Ask this one question, show the "
                               "answer and exit. Without it: an interactive session (an empty "
                               "line or Ctrl-D quits)."),
    model: Model = DEFAULT_MODEL,
    engine: Engine = DEFAULT_ENGINE,
    base_url: BaseUrl = None,
    tokenizer: Tokenizer = None,
    sandbox_url: SandboxUrls = None,
    tools: bool = typer.Option(True, "--tools/--no-tools", help="Offer the Python tool, or ask "
                               "for the same answer format without it."),
    prompt_variant: PromptVariant = None,
    answer_tag: AnswerTag = None,
    max_turns: int = typer.Option(None, "--max-turns", min=1, metavar="N", help="Assistant turns per "
                                  "question. Default: the model's rstar2.json, else 10."),
    max_tokens: int = typer.Option(None, "--max-tokens", min=16, metavar="N", help="Token budget of one "
                                   "answer, tool outputs included. Default: the model's "
                                   "rstar2.json, else 1024."),
    temperature: float = typer.Option(0.6, "--temperature", min=0.0, metavar="T", help="Sampling "
                                      "temperature (0 = greedy)."),
    dtype: Dtype = DEFAULT_DTYPE,
    device: Device = "auto",
    threads: Threads = None,
) -> None:
    """Chat with a model that reasons in <reason> tags and can run Python in the sandbox.

    Each question is a fresh rollout: the model's turns, every tool call with its sandbox
    output, and the final <answer> (with --no-answer-tag, else the last \\boxed{}) are shown. A
    model folder written by rstar2 demo or train is asked the way it was trained (its
    rstar2.json); others get the paper's prompt.
    """
    from rstar2.agent.tools import ToolContext, describe_tools
    from rstar2.engines.registry import EngineSpec, open_engine

    if engine == "hf":
        announce_device(device)
    try:
        spec = EngineSpec(kind=engine, model=model, base_url=base_url, tokenizer=tokenizer,
                          dtype=dtype, device=device)
        card = trained_card(model, tokenizer, base_url, import_tools=tools)
        config = chat_rollout_config(card, tools, prompt_variant, max_turns, max_tokens,
                                     temperature)
        if config.prompt.tools_enabled:  # a tool that does not import: one line, before the model loads
            describe_tools(config.tools, ToolContext(python_name=config.prompt.tool_name))
        tagged = (card.answer_tag if card else True) if answer_tag is None else answer_tag
        with console.status("loading the model (a .gguf file is converted on first use)"):
            llm, tok = open_engine(spec)
    except ValueError as exc:  # pydantic's ValidationError and ModelNotFound are ValueErrors
        fail(exc)
    with contextlib.ExitStack() as stack:
        url = sandbox_url
        if tools and not url:
            from rstar2.sandbox import local_sandbox

            with console.status("starting a private sandbox"):
                url = stack.enter_context(local_sandbox(workers=2))
        asyncio.run(converse(llm, tok, url, config, prompt, tagged))


def chat_rollout_config(card, tools: bool, variant: str | None, max_turns: int | None,
                        max_tokens: int | None, temperature: float):
    """The rollout settings of a chat: the options given, else the model's card, else the
    chat's own defaults."""
    from rstar2.agent.prompt import PromptConfig
    from rstar2.agent.rollout import RolloutConfig

    trained = card.prompt if card else PromptConfig()
    limits = ({"max_turns": card.max_turns, "max_response_tokens": card.max_response_tokens}
              if card else CHAT_LIMITS)
    variant = (variant or trained.variant) if tools else "no_tools"
    return RolloutConfig(max_turns=max_turns or limits["max_turns"],
                         max_response_tokens=max_tokens or limits["max_response_tokens"],
                         temperature=temperature, tool_timeout_s=None,
                         prompt=PromptConfig(variant=variant, tool_name=trained.tool_name),
                         **({"tools": card.tools} if card else {}))


async def converse(llm, tok, url, config, prompt, answer_tag: bool = True) -> None:
    """Answer ``prompt``, or questions read from the terminal until an empty line."""
    from rstar2.agent.rollout import Agent
    from rstar2.sandbox import SandboxClient, SandboxUnavailable

    async with contextlib.AsyncExitStack() as stack:
        runner = await stack.enter_async_context(SandboxClient(url)) if url else None
        stack.push_async_callback(llm.close)
        agent = Agent(llm, tok, runner, config)
        for question in [prompt] if prompt else iter(ask, None):
            try:
                with console.status("thinking"):
                    trajectory = await agent.rollout(question)
            except SandboxUnavailable as exc:
                fail(f"the sandbox cannot be reached: {exc}")
            show(trajectory, tools=runner is not None, answer_tag=answer_tag)


def ask() -> str | None:
    """The next question, or None when the user is done (empty line, Ctrl-D)."""
    try:
        return console.input("[bold cyan]you>[/] ").strip() or None
    except EOFError:
        return None


def show(trajectory, tools: bool, answer_tag: bool = True) -> None:
    """Print the model's turns, its tool calls with their outputs, and the outcome: the final
    <answer> block, or without ``answer_tag`` (a model that uses no tags) the last \\boxed{}."""
    calls = iter(trajectory.tool_calls)
    for turn in trajectory.turns:
        if turn.role == "assistant":
            text = SPECIAL_TOKEN.sub("", turn.text)
            console.print(Panel(Text("<reason>" + text if turn.start == 0 else text),
                                title="model", title_align="left", border_style="blue"))
            continue
        for call in itertools.islice(calls, turn.text.count("<tool_response>")):
            show_call(call)
    for call in calls:  # calls whose responses did not fit the budget
        show_call(call)
    answer = trajectory.final_answer
    if answer is None and not answer_tag:
        from rstar2.reward import extract_answer

        boxed = extract_answer(trajectory.assistant_text, require_answer_tag=False)
        answer = None if boxed is None else f"\\boxed{{{boxed}}}"
    if answer is not None:
        console.print(Panel(answer, title="answer", title_align="left", border_style="green"))
    notes = {"max_turns": "stopped: the turn limit was reached",
             "max_tokens": "stopped: the token budget ran out (truncated)"}
    if trajectory.stop_reason in notes:
        console.print(f"[yellow]{notes[trajectory.stop_reason]}[/]")
    if tools and not trajectory.tool_calls:
        console.print("[dim]The model answered without calling the Python tool (small base "
                      "models rarely do).[/]")


def show_call(call) -> None:
    if call.code is not None:
        console.print(Panel(Syntax(call.code, "python", theme="ansi_dark"),
                            title="tool call", title_align="left", border_style="magenta"))
    elif call.tool is not None:
        console.print(Panel(Text(json.dumps(call.arguments)), title=f"tool call: {call.tool}",
                            title_align="left", border_style="magenta"))
    style = "red" if call.error else "green"
    source = "sandbox" if call.code is not None else (call.tool or "tool")
    label = "parse error" if call.status == "parse_error" else f"{source}: {call.status}"
    console.print(Panel(Text(call.output or "(no output)"), title=label, title_align="left",
                        border_style=style))


@app.command("serve-model")
def serve_model(
    model: Model = DEFAULT_MODEL,
    engine: str = typer.Option("hf", "--engine", hidden=True, help="Only hf: the embedded engine "
                               "is the one serve-model serves."),
    tokenizer: Tokenizer = None,
    dtype: Dtype = DEFAULT_DTYPE,
    device: Device = "auto",
    threads: Threads = None,
    host: str = typer.Option("127.0.0.1", metavar="ADDRESS", help="Address to listen on."),
    port: int = typer.Option(8000, metavar="PORT", help="Port to listen on."),
    name: str = typer.Option(None, "--served-model-name", metavar="NAME", help="Model name clients "
                             "use. Default: --model."),
    max_batch_size: int = typer.Option(32, "--max-batch-size", min=1, metavar="N",
                                       help="Sequences decoded together."),
    kv_budget_tokens: int = typer.Option(None, "--kv-budget-tokens", min=1, metavar="N",
                                         help="KV tokens the running requests may hold; more "
                                         "wait (reported at /metrics as the KV capacity). "
                                         "Default: max batch size x the model's context."),
    max_n: int = typer.Option(None, "--max-n", min=1, metavar="N", help="Largest n of a request. "
                              "Default: 8 x --max-batch-size."),
    max_completion_tokens: int = typer.Option(None, "--max-completion-tokens", min=1, metavar="N",
                                              help="Largest max_tokens of a request. Default: the "
                                              "model's context."),
    max_request_tokens: int = typer.Option(None, "--max-request-tokens", min=1, metavar="N", help=(
        "Most tokens one request may ask for (n x prompts x (prompt + max_tokens)). "
        "Default: the KV capacity.")),
    max_inflight_tokens: int = typer.Option(None, "--max-inflight-tokens", min=1, metavar="N", help=(
        "Most tokens all requests in flight may ask for; past it a request is answered 429. "
        "Default: 16 x the KV capacity.")),
    max_request_share: int = typer.Option(None, "--max-request-share", min=1, metavar="N", help=(
        "Most sequences of one request in the engine at once; the rest wait their turn, so one "
        "request never takes every decode row. Default: half of --max-batch-size.")),
    max_request_kv_tokens: int = typer.Option(None, "--max-request-kv-tokens", min=1, help=(
        "Most KV tokens one request's sequences may hold in the engine at once; a request with "
        "one sequence (prompt + max_tokens) over it is answered 400. Default: half the KV "
        "capacity, at least the context."), metavar="N"),
    max_prompt_bytes: int = typer.Option(None, "--max-prompt-bytes", min=1, metavar="N", help=(
        "Longest text prompt, UTF-8 bytes, checked before tokenising. Default: the context x "
        "the longest token's bytes.")),
    max_request_mb: MaxRequestMb = 32.0,
    drain_timeout_s: DrainTimeout = 30.0,
    read_timeout_s: ReadTimeout = READ_TIMEOUT_S,
    weights_dir: Path = typer.Option(None, "--weights-dir", metavar="DIR", help=(
        "Allow POST /update_weights_from_disk for folders under DIR (off by default); needs "
        "--weights-token.")),
    weights_token: str = typer.Option(None, "--weights-token", metavar="TOKEN",
                                      envvar="RSTAR2_WEIGHTS_TOKEN", show_envvar=True, help=(
        "Bearer token a weight update must carry (16+ characters).")),
) -> None:
    """Serve a model with the embedded engine over an OpenAI-compatible API (/v1/completions
    with token-id prompts, token ids and log-probs back), for `--engine openai` clients and
    fleets (its load at /metrics under vLLM's metric names). A model folder's rstar2.json (how
    it was trained to be prompted) is served in /v1/models, where rstar2 chat and eval read it.
    The model runs in this process (--engine hf, the only engine it serves: vLLM and SGLang
    have servers of their own, which --engine openai clients use the same way).

    Requests over the limits are refused before any work (400; 429 while the server is full);
    a request's sequences enter the engine in turns (--max-request-share), so a big request
    cannot hold up a small one; a request whose client disconnects stops generating."""
    from rstar2.engines.hf import HFEngine, HFEngineConfig
    from rstar2.models.loading import load_tokenizer
    from rstar2.serve.admission import ServeLimits
    from rstar2.serve.server import create_app
    from rstar2.service import run_service
    from rstar2.weights.disk import WeightUpdates

    if engine != "hf":
        fail(f"serve-model serves a model in this process (--engine hf), not {engine!r}: "
             "vLLM and SGLang have servers of their own (vllm serve MODEL), which clients reach "
             "with --engine openai --base-url URL")
    announce_device(device)
    try:
        card = trained_card(model, tokenizer, import_tools=False)  # served to clients, who build the tools
        limits = ServeLimits(max_n=max_n, max_completion_tokens=max_completion_tokens,
                             max_request_tokens=max_request_tokens,
                             max_inflight_tokens=max_inflight_tokens,
                             max_request_share=max_request_share,
                             max_request_kv_tokens=max_request_kv_tokens,
                             max_prompt_bytes=max_prompt_bytes, max_request_mb=max_request_mb)
        weights = WeightUpdates(directory=weights_dir, token=weights_token)
        config = HFEngineConfig(model=model, dtype=dtype, max_batch_size=max_batch_size,
                                kv_budget_tokens=kv_budget_tokens, device=device)
        with console.status("loading the model"):
            served = HFEngine(config, tokenizer=load_tokenizer(tokenizer) if tokenizer else None)
    except ValueError as exc:
        fail(exc)
    app = create_app(served, name or model, card.model_dump(mode="json") if card else None,
                     limits, weights, read_timeout_s)
    console.print(f"serving {model!r} at http://{host}:{port}/v1")
    run_service(app, host, port, drain_timeout_s)
    served.shutdown()
