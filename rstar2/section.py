"""The base of every configuration section (the run config, the cluster section, pipeline
recipes): unknown keys are errors and a field's docstring is its description, so a recipe typo
fails where it is read and ``--help``-style listings can show what each field means."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, field docstrings are descriptions."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
