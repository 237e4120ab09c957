"""Models named by their Hugging Face hub id, found in (or fetched into) the standard HF cache.

    path = hub_snapshot("Qwen/Qwen3-1.7B", weights=True)          # .../snapshots/<commit>
    path = hub_snapshot("Qwen/Qwen3-1.7B@a1b2c3d", weights=False)   # tokenizer and config only

This is what transformers and vLLM do with a hub id, through ``huggingface_hub`` itself: the
files land in ``HF_HUB_CACHE`` (``~/.cache/huggingface/hub``) as ``models--org--name/
snapshots/<commit>/`` with ``refs/<branch>`` naming the commit, so a model downloaded by either
of them is found here and the other way round. ``@REVISION`` pins a branch, tag or commit
(default ``main``); ``HF_HUB_OFFLINE=1`` never touches the network and uses the cache alone;
``HF_TOKEN`` (or ``hf auth login``) opens gated and private models.

Only what rstar2 loads is fetched: the config, the tokenizer files and, when ``weights``, the
safetensors shards (a repo's ``.bin``, ``.pth``, ``.gguf`` and ONNX copies are skipped). Every
way this can fail -- no such model, a gated model without access, an unknown revision, offline
and not cached, the hub unreachable -- is one ``ModelNotFound`` line that says what to do.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from rstar2.errors import Rstar2Error

HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<revision>[\w./-]+))?$")
"""``org/name`` with an optional ``@revision``; a local path that exists is never read as one."""
CONFIG_FILES = ("config.json", "generation_config.json", "rstar2.json", "tools/*")
"""``rstar2.json`` is the card of a model rstar2 trained (``rstar2.agent.card``) and ``tools/`` the
copies of its own tools the card names: a published model is asked the way it was trained, with
its tools, wherever it is downloaded."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model",
                   "chat_template.jinja", "chat_template.json")
WEIGHT_FILES = ("*.safetensors", "model.safetensors.index.json")


class ModelNotFound(Rstar2Error, ValueError):
    """The model spec names nothing loadable on this machine (the message says why and what
    to do)."""


def split_hub_id(spec: str) -> tuple[str, str | None] | None:
    """``(repo_id, revision)`` when ``spec`` has the shape of a hub id, else None."""
    match = HUB_ID.match(spec)
    return (match["repo"], match["revision"]) if match else None


def hub_snapshot(spec: str, weights: bool = True) -> Path:
    """The local snapshot directory of hub id ``spec`` (module docstring)."""
    from huggingface_hub import constants

    repo, revision = split_hub_id(spec) or (None, None)
    if repo is None:
        raise ModelNotFound(f"{spec!r} is not a Hugging Face hub id (org/name[@revision])")
    # The cache location and offline switch are part of the key: tests (and users) change them.
    return cached_snapshot(repo, revision, weights, constants.HF_HUB_CACHE, constants.HF_HUB_OFFLINE)


@functools.lru_cache(maxsize=32)
def cached_snapshot(repo: str, revision: str | None, weights: bool, cache: str, offline: bool) -> Path:
    """One resolution per process and request: a command asks for its model several times
    (tokenizer, weights, card), and each online ask is a round trip to the hub."""
    patterns = [*CONFIG_FILES, *TOKENIZER_FILES, *(WEIGHT_FILES if weights else ())]
    return download_snapshot(repo, revision, patterns, ModelNotFound)


def download_snapshot(repo: str, revision: str | None, patterns: list[str],
                      error: type[Exception], repo_type: str = "model") -> Path:
    """``huggingface_hub.snapshot_download`` of the files matching ``patterns``, every way it
    fails (no such repository, gated, unknown revision, offline and not cached, the hub
    unreachable) raised as one ``error`` line that says what to do; models and data sets
    (``repo_type='dataset'``) alike."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    noun = "data set" if repo_type == "dataset" else "model"
    page = f"https://huggingface.co/{'datasets/' if repo_type == 'dataset' else ''}{repo}"
    named = f"{repo}@{revision}" if revision else repo
    try:
        return Path(snapshot_download(repo, repo_type=repo_type, revision=revision,
                                      allow_patterns=patterns))
    except GatedRepoError:
        raise error(f"{named} is a gated {noun}: accept its terms on {page} and log in (hf auth "
                    "login, or set HF_TOKEN)") from None
    except RepositoryNotFoundError:
        raise error(f"{named}: no such {noun} on the Hugging Face hub (check the name; a private "
                    f"{noun} needs hf auth login or HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise error(f"{named}: the {noun} has no revision {revision!r}") from None
    except LocalEntryNotFoundError:
        why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the hub cannot be reached"
        fetch = f"hf download {named}" + (" --repo-type dataset" if repo_type == "dataset" else "")
        raise error(f"{named} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
                    f"{why}: download it where there is a network ({fetch}) or point "
                    "HF_HUB_CACHE at a cache that holds it") from None
    except HfHubHTTPError as failure:
        raise error(f"{named}: the hub answered {failure.response.status_code}: "
                    f"{str(failure).splitlines()[0]}") from None
