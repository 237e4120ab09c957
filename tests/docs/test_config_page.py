"""docs/config.md is the configuration reference rendered from the recipe models: it must be
current (a field added, moved or redocumented fails here until the page is regenerated), every
field must have a description to render, and the renderer must say what each field takes."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Literal

from pydantic import Field

from rstar2.section import Section, reference, undocumented_fields

REPO = Path(__file__).resolve().parents[2]
GENERATOR = runpy.run_path(str(REPO / "scripts" / "config_reference.py"))


def test_the_committed_page_is_current():
    committed = (REPO / "docs" / "config.md").read_text()
    assert committed == GENERATOR["render_page"](), (
        f"docs/config.md is stale: regenerate it with `{GENERATOR['COMMAND']}` and commit it")


def test_every_recipe_field_has_a_description():
    from rstar2.demo.gsm8k import GSM8KSettings
    from rstar2.demo.pipeline import DemoSettings
    from rstar2.run.config import RunConfig
    from rstar2.sft.config import SFTConfig

    assert undocumented_fields(RunConfig) == []
    assert undocumented_fields(DemoSettings, "demo.") == []
    assert undocumented_fields(GSM8KSettings, "gsm8k.") == []
    assert undocumented_fields(SFTConfig) == []


class Inner(Section):
    mode: Literal["a", "b"] = "a"
    """How it runs."""
    size: int = Field(4, ge=1)
    """How | big."""


class Member(Section):
    url: str | None = None
    """Where it is."""


class Outer(Section):
    steps: int = Field(ge=1)
    """Steps to take."""
    inner: Inner = Inner(size=8)
    """The ``inner`` part."""
    spare: Inner | None = None
    """An optional part."""
    members: tuple[Member, ...] = ()
    """Listed parts."""
    rate: float | None = Field(None, gt=0, le=1)
    """A share."""


def test_the_reference_names_paths_values_defaults_and_meanings():
    page = reference(Outer, description="The whole.")
    assert "## Top level\n\nThe whole." in page
    assert "| `steps` | integer ≥ 1 | required | Steps to take. |" in page
    assert "| `rate` | number > 0, ≤ 1 or null | `null` | A share. |" in page
    assert "| `members` | list of section | `[]` | Listed parts. |" in page
    assert "## `inner`\n\nThe `inner` part." in page
    assert "| `inner.mode` | `a` or `b` | `a` | How it runs. |" in page
    assert "| `inner.size` | integer ≥ 1 | `8` | How \\| big. |" in page  # the parent's default, escaped pipe
    assert "| `spare` | section or null | `null` | An optional part. |" in page
    assert "| `spare.size` | integer ≥ 1 | `4` | How \\| big. |" in page  # the section's own default
    assert "| `members[].url` | text or null | `null` | Where it is. |" in page
    assert "| `inner` |" not in page  # a plain section is its own table, not a row
