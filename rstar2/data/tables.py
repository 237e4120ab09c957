"""Rows of one data file, whatever its format: JSON Lines, Parquet, or the Arrow files that
Hugging Face ``datasets`` writes with ``save_to_disk``.

    for number, row in file_rows(Path("train.parquet")): ...     # (1, {"question": ..., ...})

Contract of ``file_rows(path)``:

* it yields ``(number, row)`` with ``row`` a plain dict of Python values (strings, numbers,
  lists, nested dicts, None) and ``number`` the row's place in the file as a user finds it:
  the line for JSON Lines (blank lines counted, as an editor shows them), the 1-based row for
  Parquet and Arrow;
* Parquet and Arrow files are read a batch at a time, so a large file is never held twice;
* a file that cannot be read (missing, not of its format, a JSON line that is not an object)
  raises ``DataError`` naming it; pyarrow is imported only for the formats that need it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from pathlib import Path

from rstar2.data.jsonl import DataError, read_jsonl

BATCH_ROWS = 4096


def jsonl_rows(path: Path) -> Iterator[tuple[int, dict]]:
    return read_jsonl(path)


def parquet_rows(path: Path) -> Iterator[tuple[int, dict]]:
    parquet = pyarrow_module(path, "pyarrow.parquet")
    try:
        batches = parquet.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS)
        yield from numbered(batch.to_pylist() for batch in batches)
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
        raise DataError(f"{path}: not a readable Parquet file ({first_line(error)})") from None


def arrow_rows(path: Path) -> Iterator[tuple[int, dict]]:
    """An Arrow IPC file: the stream format ``datasets`` writes, or the random-access one."""
    ipc = pyarrow_module(path, "pyarrow.ipc")
    try:
        with open(path, "rb") as handle:
            try:
                reader = ipc.open_stream(handle)
            except (OSError, ValueError):
                handle.seek(0)
                reader = ipc.open_file(handle)
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
            else:
                batches = iter(reader)
            yield from numbered(batch.to_pylist() for batch in batches)
    except (OSError, ValueError) as error:
        raise DataError(f"{path}: not a readable Arrow file ({first_line(error)})") from None


ROW_READERS: dict[str, Callable[[Path], Iterator[tuple[int, dict]]]] = {
    ".jsonl": jsonl_rows,
    ".parquet": parquet_rows,
    ".arrow": arrow_rows,
}
"""The data file formats by suffix."""


def file_rows(path: Path) -> Iterator[tuple[int, dict]]:
    """``(number, row)`` for every row of ``path``; see the module docstring."""
    reader = ROW_READERS.get(path.suffix.lower())
    if reader is None:
        raise DataError(f"{path}: not a data file this reads (use {', '.join(ROW_READERS)})")
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    return reader(path)


def numbered(batches) -> Iterator[tuple[int, dict]]:
    number = 0
    for rows in batches:
        for row in rows:
            number += 1
            yield number, row


def pyarrow_module(path: Path, name: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        raise DataError(f"{path}: reading {path.suffix} files needs pyarrow "
                        "(pip install -e '.[data]' in the clone)") from None


def first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
