"""Reading a run config: YAML recipes, dotted overrides, errors that name the bad field.

    config = load_config("recipes/qwen3-14b-stage1.yaml", ["rl.optimizer.lr=2e-6"])

Bad input raises ``ConfigError`` naming each bad field by its dotted path (``rstar2.recipe``
reads and validates every recipe).

Recipes written before the rollout section became the agent's own keep loading: their
``rollout.engine*``, ``rollout.members``, ``rollout.scheduler`` and ``rollout.sandbox_*`` fields
are read at their new places (``MOVED``) with a ``FutureWarning`` asking to update the recipe
(saved ``runs/<name>/config.yaml`` files are recipes too, read again by ``--resume``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rstar2.recipe import ConfigError, read_recipe, validate_tree
from rstar2.run.config import RunConfig

__all__ = ["ConfigError", "MOVED", "load_config", "moved_fields", "read_recipe", "validate_config"]


MOVED: dict[str, str] = {
    "rollout.engine": "engine.kind",
    "rollout.engine_dtype": "engine.dtype",
    "rollout.engine_device": "engine.device",
    "rollout.members": "engine.members",
    "rollout.scheduler": "engine.scheduler",
    "rollout.sandbox_urls": "sandbox.urls",
    "rollout.sandbox_workers": "sandbox.workers",
}
"""Old field paths still read, and where they live now."""


def load_config(path: str | Path, overrides: Iterable[str] = ()) -> RunConfig:
    """Read a YAML recipe, apply ``KEY=VALUE`` dotted overrides in order, validate."""
    return validate_config(read_recipe(path, overrides), source=str(path))


def validate_config(tree: dict[str, Any], source: str = "config") -> RunConfig:
    """Build a ``RunConfig`` or raise ``ConfigError`` listing every bad field."""
    return validate_tree(RunConfig, moved_fields(tree, source), source)


def moved_fields(tree: dict[str, Any], source: str) -> dict[str, Any]:
    """``tree`` with the fields of ``MOVED`` at their new paths (a copy; the recipe's own tree
    is left alone), and one warning naming them."""
    tree = {key: dict(value) if isinstance(value, dict) else value for key, value in tree.items()}
    moved = []
    for old, new in MOVED.items():
        (old_section, old_name), (new_section, new_name) = old.split("."), new.split(".")
        section = tree.get(old_section)
        if not isinstance(section, dict) or old_name not in section:
            continue
        target = tree.setdefault(new_section, {})
        if not isinstance(target, dict):
            continue  # the section's own error says what is wrong with it
        if new_name in target:
            raise ConfigError(f"{source}: {old} and {new} are the same setting; keep {new}")
        target[new_name] = section.pop(old_name)
        moved.append(f"{old} -> {new}")
    if moved:
        warnings.warn(f"{source}: these fields have moved, please update the recipe: "
                      + ", ".join(moved), FutureWarning, stacklevel=3)
    return tree
