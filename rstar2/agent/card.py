"""How a saved model was trained to be prompted, kept beside its weights as ``rstar2.json``.

A model trained on the short prompt, with a 256-token budget and three turns, answers well only
when it is asked the same way: the paper's long prompt makes the demo's model ramble without
calling the tool. So the folders that ``rstar2 demo``, ``rstar2 train`` and the SFT write
(``sft/``, ``final/``) carry this card, and ``chat``, ``eval`` and ``serve-model`` read it and use
it unless an option says otherwise.

The folder also carries the user's own tools the card names (``rstar2.agent.card_files``):
``write_card`` copies their modules and option files into it and records them relative to it,
and ``read_card`` resolves them against the folder it reads, so a model folder can be moved,
copied to another machine or published and still rebuild its tools.

    write_card(run_dir / "final", ModelCard(prompt=..., max_response_tokens=256, max_turns=3))
    card = read_card("runs/cpu-demo/final")      # or a hub id; None for 'default', a .gguf
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rstar2.agent.card_files import ToolFiles, carry_tool_files, resolved_tool_files
from rstar2.agent.prompt import PromptConfig, tool_schema
from rstar2.agent.tools import ToolSpec
from rstar2.errors import Rstar2Error
from rstar2.models.hub import ModelNotFound, hub_snapshot, split_hub_id

CARD_FILE = "rstar2.json"


class CardError(Rstar2Error, ValueError):
    """A model folder's ``rstar2.json`` is not a card this version can read."""


class ModelCard(BaseModel):
    """What a model was trained with that decides how it must be asked."""

    model_config = ConfigDict(extra="ignore")

    prompt: PromptConfig = Field(description="Prompt variant and the name of the Python tool.")
    tool: dict | None = Field(None, description="The tool's JSON schema as the model saw it in "
                              "its prompt (for readers of the folder; rebuilt from prompt.tool_name).")
    answer_tag: bool = Field(True, description="The reward read the answer only from \\boxed{} "
                             "inside <answer> (False: the last \\boxed{} anywhere).")
    max_response_tokens: int = Field(ge=1, description="Token budget of a training rollout, "
                                     "tool outputs included.")
    max_turns: int = Field(ge=1, description="Assistant turns of a training rollout.")
    tools: tuple[ToolSpec, ...] = Field((ToolSpec(use="python"),), description="The tools it was "
                                        "trained with (a recipe's rollout.tools), which chat and eval offer too.")
    tool_files: ToolFiles = Field(ToolFiles(), description="The copies the folder holds of the "
                                  "modules and option files of its own tools (rstar2.agent.card_files); "
                                  "empty in cards written before folders carried them.")
    trained_by: str = Field("", description="What wrote the folder, e.g. 'rstar2 demo (SFT)'.")

    def summary(self) -> str:
        """One line for the commands that apply the card."""
        others = [spec.use for spec in self.tools if spec.use != "python"]
        return (f"prompt {self.prompt.variant}, tool {self.prompt.tool_name}"
                + "".join(f", tool {name}" for name in others)
                + f", answer tag {'required' if self.answer_tag else 'optional'}, "
                f"{self.max_response_tokens} tokens, {self.max_turns} turns")


def new_card(prompt: PromptConfig, max_response_tokens: int, max_turns: int, trained_by: str,
             answer_tag: bool = True, tools: tuple[ToolSpec, ...] = (ToolSpec(use="python"),)) -> ModelCard:
    """A card with the tool schema filled in from the prompt."""
    return ModelCard(prompt=prompt, tool=tool_schema(prompt.tool_name) if prompt.tools_enabled else None,
                     answer_tag=answer_tag, max_response_tokens=max_response_tokens,
                     max_turns=max_turns, tools=tools, trained_by=trained_by)


def write_card(directory: str | Path, card: ModelCard) -> Path:
    """Write ``card`` into the model folder ``directory``, with copies of its own tools'
    modules and option files (``carry_tool_files``), which the card then names."""
    directory = Path(directory)
    tools, tool_files = carry_tool_files(card.tools, card.tool_files, directory)
    carried = card.model_copy(update={"tools": tools, "tool_files": tool_files})
    path = directory / CARD_FILE
    path.write_text(json.dumps(carried.model_dump(mode="json"), indent=2) + "\n")
    return path


def card_path(model: str | None, hub: bool = True) -> Path | None:
    """Where the card of a model spec is: in a local model directory, or (``hub``) in the hub
    snapshot of a hub id (``rstar2 publish`` uploads it with the weights); None when it has
    none, or when the hub id cannot be resolved (loading the model then says why). A server's
    model name is no hub id: its card comes from the server (``hub=False``)."""
    if not model:
        return None
    path = Path(model).expanduser()
    if hub and not path.exists() and split_hub_id(model) is not None:
        try:
            path = hub_snapshot(model, weights=False)
        except ModelNotFound:
            return None
    return path / CARD_FILE if (path / CARD_FILE).is_file() else None


def read_card(model: str | None, hub: bool = True) -> ModelCard | None:
    """The card of a model directory or hub id (``card_path``), or None when it has none; the
    copies its folder holds of its tools' files are named by their paths there."""
    path = card_path(model, hub)
    if path is None:
        return None
    try:
        card = ModelCard.model_validate_json(path.read_text())
    except ValidationError as error:
        raise CardError(f"{path}: not a model card ({error.error_count()} bad fields; "
                        f"first: {error.errors()[0]['loc']}: {error.errors()[0]['msg']})") from error
    tools, tool_files = resolved_tool_files(card.tools, card.tool_files, path.parent)
    return card.model_copy(update={"tools": tools, "tool_files": tool_files})

