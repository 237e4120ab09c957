"""Reading recipes: YAML files of config sections, dotted ``KEY=VALUE`` overrides, and
validation errors that name each bad field by its dotted path.

Every command that takes a recipe (``rstar2 train``, ``rstar2 sft``, the demo's pipelines)
reads it here, so they share one syntax and one error style, e.g.
``recipes/x.yaml: rl.roc.mode: must be one of 'paper', 'release', 'off' (got 'sort')``, with the
right path suggested for a field put in the wrong place (``rl.lr`` -> ``rl.optimizer.lr``).
Recipes and override values are read as YAML with YAML 1.2 booleans (only true/false), so
``rl.roc.mode=off`` means the string 'off'.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from rstar2.errors import Rstar2Error


class RecipeLoader(yaml.SafeLoader):
    """YAML with YAML 1.2 booleans: only true/false, so ``mode: off`` stays the string 'off'."""


RecipeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)

ModelT = TypeVar("ModelT", bound=BaseModel)


class ConfigError(Rstar2Error, ValueError):
    """A recipe or override that does not describe a valid run or job; the message names the
    field."""


def read_recipe(path: str | Path, overrides: Iterable[str] = ()) -> dict[str, Any]:
    """A YAML recipe as a raw tree with the overrides applied, not yet validated (a pipeline
    recipe pops its own section first, e.g. ``gsm8k:`` in ``recipes/gsm8k-cpu.yaml``)."""
    path = Path(path)
    try:
        tree = yaml.load(path.read_text(), Loader=RecipeLoader) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: cannot read recipe: {error}") from error
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: a recipe is a mapping of sections, got {type(tree).__name__}")
    for override in overrides:
        apply_override(tree, override)
    return tree


def validate_tree(root: type[ModelT], tree: dict[str, Any], source: str = "config") -> ModelT:
    """Build ``root`` (a recipe's top section) from ``tree`` or raise ``ConfigError`` listing
    every bad field by its dotted path."""
    try:
        return root.model_validate(tree)
    except ValidationError as error:
        lines = [describe_error(problem, root) for problem in error.errors()]
        if len(lines) == 1:
            raise ConfigError(f"{source}: {lines[0]}") from None
        raise ConfigError(f"{source}: {len(lines)} problems:\n  " + "\n  ".join(lines)) from None


def apply_override(tree: dict[str, Any], override: str) -> None:
    """Set ``a.b.c=value`` in a raw recipe tree; the value is read as YAML (``1e-6``, ``true``,
    ``[a, b]``, ``null``), and missing sections are created."""
    key, sep, text = override.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ConfigError(f"--set {override!r}: expected KEY=VALUE with a dotted KEY")
    node = tree
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"--set {override!r}: {'.'.join(parts[:depth + 1])} is not a section")
        node = child
    node[parts[-1]] = yaml.load(text, Loader=RecipeLoader)


def describe_error(problem: dict[str, Any], root: type[BaseModel]) -> str:
    """One pydantic error as ``dotted.path: message (got value)``; an unknown field gets a
    suggestion from the fields of ``root`` (the tree validated)."""
    loc = tuple(problem["loc"])
    where = ".".join(str(part) for part in loc)
    kind = problem["type"]
    if kind == "extra_forbidden":
        return f"{where}: unknown field{suggestion(loc, root)}"
    if kind == "missing":
        return f"{where}: required field is missing"
    if kind == "literal_error":
        message = f"must be one of {', '.join(literal_options(problem['ctx']['expected']))}"
    elif kind == "value_error" and isinstance(problem["input"], dict):
        # a section's own check; its message says it all (the run's checks name their section)
        return f"{where}: {problem['ctx']['error']}" if where else str(problem["ctx"]["error"])
    elif kind == "value_error":
        message = str(problem["ctx"]["error"])  # a field's own check
    else:
        message = problem["msg"][:1].lower() + problem["msg"][1:]
    return f"{where or '(top level)'}: {message} (got {problem['input']!r})"


def literal_options(expected: str) -> list[str]:
    """pydantic's "'a', 'b' or 'c'" as ['a', 'b', 'c']."""
    return [part.strip() for part in expected.replace(" or ", ", ").split(",")]


def suggestion(loc: Sequence[Any], root: type[BaseModel]) -> str:
    """Where a misplaced or misspelled field probably belongs, as ' (did you mean ...?)'."""
    name = str(loc[-1])
    everywhere = list(field_paths(root))
    same_name = [path for path in everywhere if path.rsplit(".", 1)[-1] == name]
    parent = ".".join(str(part) for part in loc[:-1])
    siblings = {
        path.rpartition(".")[2]: path for path in everywhere if path.rpartition(".")[0] == parent
    }
    close = difflib.get_close_matches(name, list(siblings), n=2, cutoff=0.6)
    candidates = same_name or [siblings[match] for match in close]
    return f" (did you mean {' or '.join(candidates)}?)" if candidates else ""


def field_paths(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every dotted field path of a config tree, sections included."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path
        section = section_type(field.annotation)
        if section is not None:
            yield from field_paths(section, path + ".")


def section_type(annotation: Any) -> type[BaseModel] | None:
    """The section model inside ``Section`` or ``Section | None``, else None."""
    options = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    for option in options:
        if isinstance(option, type) and issubclass(option, BaseModel):
            return option
    return None
