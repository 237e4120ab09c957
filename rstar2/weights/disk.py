"""Weights a server loads from disk on request (``POST /update_weights_from_disk``): who may
ask, where they may be read from, and that they are the served model's.

* **Off unless the operator turns it on**: ``WeightUpdates.directory`` names the only
  directory whose sub-folders may be loaded, and ``token`` must then be set too; a request
  carries it as ``Authorization: Bearer <token>`` (401 without it, 403 while updates are off).
* **Only under that directory**: the requested folder and each ``*.safetensors`` file in it
  must resolve (symlinks followed) inside it (403 otherwise).
* **Every tensor is a parameter**: each tensor's name must be one of the model's and its
  shape that parameter's shape; otherwise nothing is loaded and the answer names what did
  not match (400). "loaded N tensors" then means N parameters were replaced.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path

from pydantic import Field, model_validator

from rstar2.section import Section
from rstar2.service import ServiceError

TOKEN_ENV = "RSTAR2_WEIGHTS_TOKEN"
SHOWN_NAMES = 3  # names quoted in a refusal


class WeightUpdates(Section):
    """Whether and from where a server takes new weights over HTTP."""

    directory: Path | None = None
    """The directory under which weight folders may be loaded. None: weight updates are off."""
    token: str | None = Field(None, min_length=16, repr=False)
    """The bearer token a weight update must carry (at least 16 characters); required when
    ``directory`` is set."""

    @model_validator(mode="after")
    def token_when_on(self) -> WeightUpdates:
        if self.directory is not None and self.token is None:
            raise ValueError(f"weight updates need a token (--weights-token or {TOKEN_ENV})")
        return self

    def authorize(self, authorization: str | None) -> None:
        """Refuse the request unless updates are on and it carries the token."""
        if self.directory is None:
            raise ServiceError("weight updates are off on this server (start it with a weights "
                               "directory and token to allow them)", 403)
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), self.token.encode()):
            raise ServiceError("a weight update needs this server's token as "
                               "'Authorization: Bearer <token>'", 401)

    def folder(self, requested: str) -> Path:
        """The requested folder, resolved, if it lies under ``directory``; else 403/400."""
        allowed = self.directory.resolve()
        folder = Path(requested).resolve()
        if not folder.is_relative_to(allowed):
            raise ServiceError(f"{requested} is not under the weights directory {allowed}", 403)
        if not folder.is_dir():
            raise ServiceError(f"{requested}: no such folder")
        return folder


def weight_files(folder: Path) -> list[Path]:
    """The folder's ``*.safetensors`` files, each resolving inside it (403 otherwise)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ServiceError(f"{folder}: no *.safetensors file there")
    for file in files:
        if not file.resolve().is_relative_to(folder):
            raise ServiceError(f"{file} points outside {folder}", 403)
    return files


def read_weights(folder: Path) -> dict:
    """Every tensor of the folder's ``*.safetensors`` files (400 on a file that is not one)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    state = {}
    for file in weight_files(folder):
        try:
            state.update(load_file(str(file)))
        except (OSError, SafetensorError) as exc:
            raise ServiceError(f"{file.name}: not a readable safetensors file ({exc})") from exc
    return state


def check_matches(model, state: dict) -> None:
    """400 unless every tensor names one of ``model``'s parameters (or buffers) with its shape."""
    expected = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    unknown = [name for name in state if name not in expected]
    misshapen = [f"{name} {tuple(state[name].shape)} (the model's is {expected[name]})"
                 for name in state if name in expected and tuple(state[name].shape) != expected[name]]
    problems = []
    if unknown:
        problems.append(f"{len(unknown)} of {len(state)} tensors name no parameter of the served "
                        f"model ({', '.join(unknown[:SHOWN_NAMES])})")
    if misshapen:
        problems.append(f"{len(misshapen)} have another shape: {'; '.join(misshapen[:SHOWN_NAMES])}")
    if problems:
        raise ServiceError("; ".join(problems) + "; nothing was loaded")


def token_from_env() -> str | None:
    return os.environ.get(TOKEN_ENV) or None
