"""A byte-offset index of one JSONL file, so the viewer reads any line without the whole file.

    index = LineIndex(folder, "metrics.jsonl", ".view-index/metrics.json", summarize)
    index.refresh()                 # picks up lines appended since the last call
    index.count, index.summaries    # one small dict per complete line
    index.row(i)                    # line i, parsed: one seek and one read

Contract:

* the file and its cache are opened only through ``folder`` (a ``ConfinedFolder``: relative to
  the run folder's descriptor, refusing links), every time: a name swapped for a link between
  two reads is refused, not followed;
* only complete lines (ending in a newline) are indexed; a last line without one is what a
  writer killed (or still writing) leaves, and is reported in ``partial_tail`` until it is
  finished, never parsed;
* a complete line that is not a JSON object is indexed with a summary ``{"error": ...}`` naming
  the file and line, so one bad line never hides the others;
* ``summarize(row)`` keeps what lists, filters and sorts need (no long text), and is stored
  with the offsets in the cache file (JSON), so a reopened viewer does not parse the file again;
* the cache is a claim about the file, checked before it is used and discarded (the file is
  then indexed afresh and the cache rewritten) unless it holds: it must parse, have the shape
  written here, carry the digest of its summaries (which catches damage no look at the file
  could), and match the file: as long as what it indexed, the same first bytes, and exactly
  the line starts found by one pass of looking for newlines over the indexed bytes (no line is
  parsed). A file rewritten in place later (a resumed run trims its ``metrics.jsonl``) is
  indexed afresh as well;
* a cache that cannot be written (a read-only run folder, a link on its way) is given up and
  the index lives in memory only; it is written under a fresh name and renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath
from typing import BinaryIO

from rstar2.view.confined import ConfinedFolder, ViewError

HEAD_BYTES = 256
READ_BLOCK = 1 << 20
CACHE_VERSION = 3  # 2: the summaries' digest; 3: rollout summaries say whether the row has its group's prompt

Summarize = Callable[[dict], dict]


class LineIndex:
    """Offsets and summaries of the complete lines of one JSONL file; see the module docstring."""

    def __init__(self, folder: ConfinedFolder, name: str | PurePosixPath, cache_name: str | PurePosixPath | None,
                 summarize: Summarize, what: str = "a JSONL file"):
        self.folder, self.name, self.what = folder, PurePosixPath(name), what
        self.path = folder.path / name  # for messages
        self.cache_name = cache_name
        self.summarize = summarize
        self.offsets: list[int] = []
        self.summaries: list[dict] = []
        self.indexed_size = 0
        self.head = file_head_of_nothing()
        self.partial_tail = False
        self.cache_unread = cache_name is not None  # read at the first refresh, against the open file
        self.lock = threading.Lock()

    @property
    def count(self) -> int:
        return len(self.offsets)

    def refresh(self) -> None:
        """Index the lines appended since the last call (all of them if the file was rewritten)."""
        with self.lock, self.folder.open(self.name, self.what) as handle:
            size = os.fstat(handle.fileno()).st_size
            if self.cache_unread:
                self.cache_unread = False
                self.adopt_cache(handle, size)
            if size < self.indexed_size or file_head(handle, self.indexed_size) != self.head:
                self.offsets, self.summaries, self.indexed_size = [], [], 0
            if size > self.indexed_size:
                self.extend(handle, size)
                self.head = file_head(handle, self.indexed_size)
                self.save_cache()

    def extend(self, handle: BinaryIO, size: int) -> None:
        """Read from the indexed end to ``size``, indexing each complete line."""
        self.partial_tail = False
        for offset, line, complete in lines_of(handle, self.indexed_size, size):
            if not complete:
                self.partial_tail = bool(line.strip())
                break
            self.add_line(offset, line)
            self.indexed_size = offset + len(line) + 1

    def add_line(self, offset: int, line: bytes) -> None:
        if not line.strip():
            return
        self.offsets.append(offset)
        number = len(self.offsets)
        try:
            value = json.loads(line)
        except ValueError as error:  # UnicodeDecodeError included
            self.summaries.append({"error": f"{self.path} record {number}: not valid JSON ({error})"})
            return
        if not isinstance(value, dict):
            self.summaries.append({"error": f"{self.path} record {number}: not a JSON object"})
            return
        self.summaries.append(self.summarize(value))

    def row(self, i: int) -> dict:
        """Line ``i`` (0-based among indexed lines), parsed; raises ``ValueError`` if it is bad."""
        with self.lock:
            start = self.offsets[i]
            end = self.offsets[i + 1] if i + 1 < len(self.offsets) else self.indexed_size
        with self.folder.open(self.name, self.what) as handle:
            handle.seek(start)
            line = handle.read(end - start)
        try:
            value = json.loads(line)
        except ValueError as error:
            raise ValueError(f"{self.path} record {i + 1}: not valid JSON ({error})") from error
        if not isinstance(value, dict):
            raise ValueError(f"{self.path} record {i + 1}: not a JSON object")
        return value

    def adopt_cache(self, handle: BinaryIO, size: int) -> None:
        """Take the cache's summaries if it holds for the open file (see the module docstring);
        otherwise leave the index empty, to be built afresh."""
        try:
            with self.folder.open(self.cache_name, "a cache file") as cache:
                document = cache_document(cache.read())
        except (OSError, ViewError):
            return
        if document is None or document["indexed_size"] > size:
            return
        indexed_size = document["indexed_size"]
        if document["head"] != file_head(handle, indexed_size):
            return
        offsets, end = [], 0
        for offset, line, complete in lines_of(handle, 0, indexed_size):
            if not complete:
                return
            if line.strip():
                offsets.append(offset)
            end = offset + len(line) + 1
        if offsets == document["offsets"] and end == indexed_size:
            self.offsets, self.summaries = offsets, document["summaries"]
            self.indexed_size, self.head = indexed_size, document["head"]

    def save_cache(self) -> None:
        if self.cache_name is None:
            return
        document = {"version": CACHE_VERSION, "indexed_size": self.indexed_size, "head": self.head,
                    "offsets": self.offsets, "summaries": self.summaries, "digest": digest(self.summaries)}
        try:
            self.folder.write(self.cache_name, json.dumps(document).encode())
        except (OSError, ViewError):
            self.cache_name = None  # cannot be written safely: keep the index in memory


def cache_document(raw: bytes) -> dict | None:
    """The cache file's document when it has the shape ``save_cache`` writes and its summaries
    their digest; None otherwise (garbage, truncated, another version, damaged)."""
    try:
        document = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(document, dict) or document.get("version") != CACHE_VERSION:
        return None
    offsets, summaries = document.get("offsets"), document.get("summaries")
    size, head = document.get("indexed_size"), document.get("head")
    if not (isinstance(offsets, list) and isinstance(summaries, list) and len(offsets) == len(summaries)
            and all(isinstance(summary, dict) for summary in summaries)
            and type(size) is int and size >= 0 and isinstance(head, str) and document.get("digest") == digest(summaries)):
        return None
    return document


def digest(summaries: list[dict]) -> str:
    return hashlib.sha256(json.dumps(summaries).encode()).hexdigest()


def lines_of(handle: BinaryIO, start: int, size: int) -> Iterator[tuple[int, bytes, bool]]:
    """``(offset, line without its newline, complete)`` for each line from ``start`` (a line
    start) to ``size``, a block at a time; only the last can be incomplete (no newline yet)."""
    handle.seek(start)
    position, carry = start, b""
    while position + len(carry) < size:
        block = handle.read(min(READ_BLOCK, size - position - len(carry)))
        if not block:
            break
        data = carry + block
        begin = 0
        while (newline := data.find(b"\n", begin)) >= 0:
            yield position + begin, data[begin:newline], True
            begin = newline + 1
        position += begin
        carry = data[begin:]
    if carry:
        yield position, carry, False


def file_head(handle: BinaryIO, indexed_size: int) -> str:
    """A digest of the file's first bytes (of those already indexed): what tells an appended
    file from a rewritten one."""
    handle.seek(0)
    return hashlib.sha1(handle.read(min(HEAD_BYTES, indexed_size))).hexdigest()


def file_head_of_nothing() -> str:
    return hashlib.sha1(b"").hexdigest()
