"""Data sets named by their Hugging Face hub id, found in (or fetched into) the standard HF cache.

    folder = dataset_snapshot("openai/gsm8k")            # .../datasets--openai--gsm8k/snapshots/<commit>
    folder = dataset_snapshot("openai/gsm8k@a1b2c3d")    # pinned to a branch, tag or commit

The files land where ``huggingface_hub`` (and so ``datasets`` and ``hf download``) keeps every
repository: ``HF_HUB_CACHE`` (``~/.cache/huggingface/hub``) as ``datasets--org--name/
snapshots/<commit>/``, with ``refs/<branch>`` naming the commit, so a data set downloaded by any
of them is found here. ``HF_HUB_OFFLINE=1`` never touches the network and reads the cache
alone; ``HF_TOKEN`` (or ``hf auth login``) opens gated and private data sets. Only the data
files rstar2 reads (``.jsonl``, ``.parquet``, ``.arrow``) and the card (``README.md``, whose
``configs:`` say which files make which split) are fetched. Every way this can fail -- no such
data set, a gated one, an unknown revision, offline and not cached, the hub unreachable -- is
one ``DataError`` line that says what to do.

A spec is read as a hub id only when it is not a path: it has the shape ``org/name[@revision]``,
no data-file suffix, and no file or folder of that name exists here.
"""

from __future__ import annotations

import re
from pathlib import Path

from rstar2.data.jsonl import DataError
from rstar2.data.tables import ROW_READERS

HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<revision>[\w./-]+))?$")
"""``org/name`` with an optional ``@revision``."""
CARD = "README.md"


def is_hub_id(spec: str) -> bool:
    """Whether ``spec`` names a hub data set rather than a local path (module docstring)."""
    return (HUB_ID.match(spec) is not None and Path(spec).suffix.lower() not in ROW_READERS
            and not Path(spec).expanduser().exists())


def dataset_snapshot(spec: str) -> Path:
    """The local snapshot folder of the hub data set ``spec`` (module docstring)."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError,
                                        RepositoryNotFoundError, RevisionNotFoundError)

    match = HUB_ID.match(spec)
    if match is None:
        raise DataError(f"{spec!r} is not a Hugging Face hub id (org/name[@revision])")
    repo, revision = match["repo"], match["revision"]
    patterns = [CARD, *(f"*{suffix}" for suffix in ROW_READERS)]
    try:
        return Path(snapshot_download(repo, repo_type="dataset", revision=revision,
                                      allow_patterns=patterns))
    except GatedRepoError:
        raise DataError(f"{spec} is a gated data set: accept its terms on "
                        f"https://huggingface.co/datasets/{repo} and log in (hf auth login, or "
                        "set HF_TOKEN)") from None
    except RepositoryNotFoundError:
        raise DataError(f"{spec}: no such data set on the Hugging Face hub (check the name; a "
                        "private one needs hf auth login or HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise DataError(f"{spec}: the data set has no revision {revision!r}") from None
    except LocalEntryNotFoundError:
        why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the hub cannot be reached"
        raise DataError(f"{spec} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
                        f"{why}: download it where there is a network (hf download {repo} "
                        "--repo-type dataset) or point HF_HUB_CACHE at a cache that holds it") from None
    except HfHubHTTPError as error:
        raise DataError(f"{spec}: the hub answered {error.response.status_code}: "
                        f"{str(error).splitlines()[0]}") from None
