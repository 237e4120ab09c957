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

from pathlib import Path

from rstar2.data.jsonl import DataError
from rstar2.data.tables import ROW_READERS
from rstar2.models.hub import HUB_ID, download_snapshot

CARD = "README.md"


def is_hub_id(spec: str) -> bool:
    """Whether ``spec`` names a hub data set rather than a local path (module docstring)."""
    return (HUB_ID.match(spec) is not None and Path(spec).suffix.lower() not in ROW_READERS
            and not Path(spec).expanduser().exists())


def dataset_snapshot(spec: str) -> Path:
    """The local snapshot folder of the hub data set ``spec`` (module docstring)."""
    match = HUB_ID.match(spec)
    if match is None:
        raise DataError(f"{spec!r} is not a Hugging Face hub id (org/name[@revision])")
    patterns = [CARD, *(f"*{suffix}" for suffix in ROW_READERS)]
    return download_snapshot(match["repo"], match["revision"], patterns, DataError, repo_type="dataset")
