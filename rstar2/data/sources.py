"""Where a data set's rows come from: a file, a folder, a ``datasets`` folder or a hub data set.

    source = open_source("data/train.parquet")
    source = open_source("runs/mydata", split="test")                # saved with save_to_disk
    source = open_source("openai/gsm8k", subset="main", split="train")
    for where, key, row in source.rows(): ...

A spec is, in this order:

* a **file**: ``.jsonl`` (one JSON object per line), ``.parquet``, or ``.arrow``;
* a **folder saved by Hugging Face ``datasets``** (``save_to_disk``): a ``Dataset`` (its
  ``state.json`` lists its Arrow files) or a ``DatasetDict`` (``dataset_dict.json`` lists the
  splits, one sub-folder each);
* any other **folder of data files**, read as the hub lays out a data set: the card's
  ``configs:`` (``README.md`` front matter) say which files make which split of which subset;
  without them, a file belongs to the split whose name is a word of its name or a folder above
  it (``train-00000-of-00002.parquet``, ``data/test.jsonl``; ``dev``/``val`` are
  ``validation``), a ``subset`` is the top folder of that name, and files that name no split
  are all ``train`` -- the rules of ``datasets.load_dataset``;
* a **hub id** ``org/name[@revision]`` (``rstar2.data.hub``): its snapshot in the HF cache,
  read as a folder.

``split`` and ``subset`` choose among what the source holds; a source with one split needs
none, and naming a split or subset that does not exist, or leaving one out where there are
several, raises ``DataError`` listing the ones there are. Nothing here checks the rows: that is
``rstar2.data.problems``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from rstar2.data.hub import dataset_snapshot, is_hub_id
from rstar2.data.jsonl import DataError
from rstar2.data.tables import ROW_READERS, file_rows

SPLIT_WORDS = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "val", "dev", "eval"),
    "test": ("test", "testing"),
}
"""The words that name a split in a file or folder name, as ``datasets`` reads them."""
WORD_BREAK = re.compile(r"[-._ 0-9]+")


@dataclass(frozen=True)
class DataSource:
    """The files of one split of a data set, in order."""

    name: str
    """Short name: benchmark name in ``rstar2 eval`` and prefix of default row ids."""
    origin: str
    """What the user named (with the split and subset chosen), for messages."""
    files: tuple[Path, ...]

    def rows(self) -> Iterator[tuple[str, int, dict]]:
        """``(where, key, row)``: where the row is, for messages (``line 3``, ``row 3``, with
        the file's name when there are several), and a number unique in the source (the line
        or row of a single file; the running row count across several)."""
        key = 0
        for file in self.files:
            unit = "line" if file.suffix.lower() == ".jsonl" else "row"
            prefix = f"{file.name} " if len(self.files) > 1 else ""
            for number, row in file_rows(file):
                key = key + 1 if len(self.files) > 1 else number
                yield f"{prefix}{unit} {number}", key, row


def open_source(spec: str | Path, split: str | None = None, subset: str | None = None) -> DataSource:
    """The rows ``spec`` names (module docstring)."""
    text = str(spec)
    path = Path(text).expanduser()
    if path.is_dir():
        return folder_source(path, text, path.name, split, subset)
    if path.is_file() or path.suffix.lower() in ROW_READERS:
        if not path.is_file():
            raise DataError(f"{path}: no such file")
        refuse_choice(text, split, subset, "a single file")
        return DataSource(name=path.stem, origin=text, files=(path,))
    if is_hub_id(text):
        name = text.split("@")[0].split("/")[1]
        return folder_source(dataset_snapshot(text), text, name, split, subset)
    raise DataError(f"{text}: no such file or folder (a data set is a .jsonl, .parquet or "
                    ".arrow file, a folder of them, or a hub id org/name)")


def refuse_choice(origin: str, split: str | None, subset: str | None, what: str) -> None:
    if split is not None or subset is not None:
        chosen = f"split {split!r}" if split is not None else f"subset {subset!r}"
        raise DataError(f"{origin}: is {what}, with no {chosen} to choose")


def folder_source(folder: Path, origin: str, name: str, split: str | None, subset: str | None) -> DataSource:
    if (folder / "dataset_dict.json").is_file():
        refuse_choice(origin, None, subset, "a datasets DatasetDict")
        splits = json.loads((folder / "dataset_dict.json").read_text()).get("splits", [])
        chosen = choose(origin, "split", split, splits)
        files = saved_dataset_files(folder / chosen)
        return DataSource(f"{name}-{chosen}" if len(splits) > 1 else name,
                          f"{origin} (split {chosen})", files)
    if (folder / "state.json").is_file():
        refuse_choice(origin, split, subset, "a datasets Dataset (one split)")
        return DataSource(name, origin, saved_dataset_files(folder))
    by_split = card_splits(folder, origin, subset) or named_splits(folder, origin, subset)
    if not by_split:
        raise DataError(f"{origin}: no data files ({', '.join(ROW_READERS)}) in {folder}")
    chosen = choose(origin, "split", split, list(by_split))
    where = ", ".join(filter(None, [subset and f"subset {subset}", f"split {chosen}"]))
    return DataSource(f"{name}-{chosen}" if len(by_split) > 1 else name, f"{origin} ({where})",
                      tuple(by_split[chosen]))


def choose(origin: str, kind: str, wanted: str | None, available: list[str]) -> str:
    """``wanted`` if the source has it, the only one if it has one, else a ``DataError``."""
    if wanted is not None and wanted in available:
        return wanted
    if wanted is None and len(available) == 1:
        return available[0]
    listed = ", ".join(available) or "none"
    if wanted is None:
        raise DataError(f"{origin}: it has several {kind}s ({listed}); choose one "
                        f"(data.{kind} in a recipe, --{kind} on the command line)")
    raise DataError(f"{origin}: no {kind} {wanted!r} (it has {listed})")


def saved_dataset_files(folder: Path) -> tuple[Path, ...]:
    """The Arrow files of a folder ``datasets.Dataset.save_to_disk`` wrote, in order."""
    try:
        state = json.loads((folder / "state.json").read_text())
        files = tuple(folder / entry["filename"] for entry in state["_data_files"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise DataError(f"{folder}: not a folder saved by datasets ({error!r})") from None
    return files


def data_files(folder: Path) -> list[Path]:
    """Every data file under ``folder`` (hidden folders, such as ``.cache``, left out)."""
    return sorted(path for path in folder.rglob("*")
                  if path.suffix.lower() in ROW_READERS and path.is_file()
                  and not any(part.startswith(".") for part in path.relative_to(folder).parts))


def named_splits(folder: Path, origin: str, subset: str | None) -> dict[str, list[Path]]:
    """The files of each split by the words in their names (module docstring)."""
    files = data_files(folder)
    if subset is not None:
        subsets = sorted({f.relative_to(folder).parts[0] for f in files if len(f.relative_to(folder).parts) > 1})
        files = [f for f in files if f.relative_to(folder).parts[0] == choose(origin, "subset", subset, subsets)]
    by_split: dict[str, list[Path]] = {}
    for file in files:
        split = split_of(file.relative_to(folder))
        if split is not None:
            by_split.setdefault(split, []).append(file)
    return by_split or ({"train": files} if files else {})


def split_of(relative: Path) -> str | None:
    """The split a file's name or a folder above it names, if any."""
    words = WORD_BREAK.split(relative.stem.lower())
    folders = [part.lower() for part in relative.parts[:-1]]
    for split, names in SPLIT_WORDS.items():
        if any(name in words or name in folders for name in names):
            return split
    return None


def card_splits(folder: Path, origin: str, subset: str | None) -> dict[str, list[Path]] | None:
    """The files of each split of the chosen subset, as the card's ``configs:`` say; None
    when there is no card or it has no ``configs:``."""
    configs = card_configs(folder / "README.md")
    if not configs:
        return None
    names = [str(config.get("config_name", "default")) for config in configs]
    if subset is None:
        defaults = [n for n, c in zip(names, configs) if c.get("default")] or [n for n in names if n == "default"]
        subset = defaults[0] if defaults else None
    config = configs[names.index(choose(origin, "subset", subset, names))]
    by_split = {}
    for split, patterns in split_patterns(config.get("data_files", [])).items():
        by_split[split] = sorted({match for pattern in patterns for match in folder.glob(pattern)
                                  if match.suffix.lower() in ROW_READERS and match.is_file()})
    return {split: files for split, files in by_split.items() if files}


def card_configs(card: Path) -> list[dict]:
    """The ``configs:`` list of a data set card's YAML front matter (empty without one)."""
    if not card.is_file():
        return []
    text = card.read_text(encoding="utf-8")
    if not text.startswith("---"):
        return []
    try:
        meta = yaml.safe_load(text[3:].split("\n---", 1)[0]) or {}
    except yaml.YAMLError as error:
        raise DataError(f"{card}: its front matter is not YAML ({error})") from None
    configs = meta.get("configs", []) if isinstance(meta, dict) else []
    return [config for config in configs if isinstance(config, dict)] if isinstance(configs, list) else []


def split_patterns(data_files) -> dict[str, list[str]]:
    """A config's ``data_files`` (a pattern, a list of them, a list of ``{split, path}``, or a
    mapping of split to patterns) as split -> glob patterns; bare patterns are ``train``."""
    if isinstance(data_files, str):
        return {"train": [data_files]}
    if isinstance(data_files, dict):
        return {str(split): as_list(paths) for split, paths in data_files.items()}
    patterns: dict[str, list[str]] = {}
    for entry in data_files or []:
        if isinstance(entry, str):
            patterns.setdefault("train", []).append(entry)
        elif isinstance(entry, dict):
            patterns.setdefault(str(entry.get("split", "train")), []).extend(as_list(entry.get("path", [])))
    return patterns


def as_list(value) -> list[str]:
    return [value] if isinstance(value, str) else [str(item) for item in value or []]
