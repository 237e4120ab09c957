"""The base of every configuration section (the run config, the cluster section, pipeline
recipes): unknown keys are errors and a field's docstring is its description, so a recipe typo
fails where it is read and listings can show what each field means.

``reference(model)`` is such a listing: the Markdown tables of a config tree, one per section,
each field with its dotted path, the values it takes, its default and its description, read
from the models themselves (``scripts/config_reference.py`` writes docs/config.md with it).
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticUndefined


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, field docstrings are descriptions."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


_PLAIN_TYPES = {str: "text", int: "integer", float: "number", bool: "true or false"}
_BOUNDS = ((Ge, "ge", "≥"), (Gt, "gt", ">"), (Le, "le", "≤"), (Lt, "lt", "<"))


def reference(model: type[BaseModel], path: str = "", description: str = "") -> str:
    """Markdown for the config tree ``model`` (at dotted ``path``): a heading and a table per
    section, its subsections after it, in field order."""
    return "\n".join(_section_blocks(model, path, description, None))


def undocumented_fields(model: type[BaseModel], path: str = "") -> list[str]:
    """Dotted paths of the fields of ``model``'s tree that have no description."""
    missing = []
    for name, field in model.model_fields.items():
        dotted = f"{path}{name}"
        if not field.description:
            missing.append(dotted)
        for nested, suffix in _nested_models(field.annotation):
            missing += undocumented_fields(nested, f"{dotted}{suffix}.")
    return missing


def _section_blocks(model: type[BaseModel], path: str, description: str,
                    defaults: BaseModel | None) -> Iterator[str]:
    """``defaults``: the section's default as its parent sets it, whose values may differ from
    the section model's own defaults."""
    rows, nested = [], []
    for name, field in model.model_fields.items():
        dotted = f"{path}{name}"
        default = getattr(defaults, name) if defaults is not None else _default_value(field)
        sections = _nested_models(field.annotation)
        for section, suffix in sections:
            nested.append((section, f"{dotted}{suffix}", field.description or "",
                           default if isinstance(default, section) else None))
        if sections and not _is_optional(field.annotation) and not any(suffix for _, suffix in sections):
            continue  # a plain subsection: its own table follows
        rows.append(f"| `{dotted}` | {_values(field)} | {_shown(default)} | {_text(field.description or '')} |")
    yield f"## `{path.rstrip('.')}`" if path else "## Top level"
    yield ""
    if description:
        yield _text(description, escape_pipes=False)
        yield ""
    if rows:
        yield "| field | values | default | meaning |"
        yield "|---|---|---|---|"
        yield from rows
        yield ""
    for section, dotted, text, section_defaults in nested:
        yield from _section_blocks(section, f"{dotted}.", text, section_defaults)


def _nested_models(annotation) -> list[tuple[type[BaseModel], str]]:
    """The config models inside a field's type: ``Section``, ``Section | None`` (suffix ''),
    ``tuple[Model, ...]`` or ``list[Model]`` (suffix '[]', one entry of the list)."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, "")]
    if origin in (typing.Union, types.UnionType):
        return [found for option in typing.get_args(annotation) for found in _nested_models(option)]
    if origin in (tuple, list):
        items = [arg for arg in typing.get_args(annotation) if arg is not Ellipsis]
        if len(items) == 1 and isinstance(items[0], type) and issubclass(items[0], BaseModel):
            return [(items[0], "[]")]
    return []


def _is_optional(annotation) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in typing.get_args(annotation)


def _values(field) -> str:
    """What a field takes, in words: ``'paper', 'release' or 'off'``, ``integer ≥ 1 or null``."""
    bounds = ", ".join(f"{sign} {getattr(item, attr)}" for item in field.metadata
                       for kind, attr, sign in _BOUNDS if isinstance(item, kind))
    annotation, optional = field.annotation, _is_optional(field.annotation)
    if optional:
        annotation = typing.Union[tuple(arg for arg in typing.get_args(annotation) if arg is not type(None))]
    text = " ".join(filter(None, [_type_words(annotation), bounds])) + (" or null" if optional else "")
    return text.replace("|", "\\|")


def _type_words(annotation) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "null"
    if origin is typing.Literal:
        quoted = [f"`{value}`" for value in args]
        return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_words(arg) for arg in args)
    if origin is typing.Annotated:
        return _type_words(args[0])
    if origin in (tuple, list):
        if len(args) == 1 or Ellipsis in args:
            return f"list of {_type_words(args[0])}"
        return "[" + ", ".join(_type_words(item) for item in args) + "]"
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return _PLAIN_TYPES.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default_value(field):
    """A field's default (PydanticUndefined when it is required)."""
    return field.default_factory() if field.default_factory is not None else field.default


def _shown(value) -> str:
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return "(section)"
    return f"`{_yaml(value)}`"


def _yaml(value) -> str:
    """A default as a recipe would write it."""
    if value is None:
        return "null"
    if isinstance(value, BaseModel):
        return _yaml(value.model_dump(mode="json"))
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_yaml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_yaml(item)}" for key, item in value.items()) + "}"
    return str(value)


def _text(description: str, escape_pipes: bool = True) -> str:
    """A docstring as one Markdown line: whitespace collapsed, ``code`` as `code`."""
    text = re.sub(r"\s+", " ", description).strip().replace("``", "`")
    return text.replace("|", "\\|") if escape_pipes else text
