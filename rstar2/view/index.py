"""A byte-offset index of one JSONL file, so the viewer reads any line without the whole file.

    index = LineIndex(path, cache_path, summarize)
    index.refresh()                 # picks up lines appended since the last call
    index.count, index.summaries    # one small dict per complete line
    index.row(i)                    # line i, parsed: one seek and one read

Contract:

* only complete lines (ending in a newline) are indexed; a last line without one is what a
  writer killed (or still writing) leaves, and is reported in ``partial_tail`` until it is
  finished, never parsed;
* a complete line that is not a JSON object is indexed with a summary ``{"error": ...}`` naming
  the file and line, so one bad line never hides the others;
* ``summarize(row)`` keeps what lists, filters and sorts need (no long text), and is stored
  with the offsets in ``cache_path`` (JSON), so a reopened viewer does not re-read the file;
* the cache is trusted only while the file still starts with the same bytes and is at least
  as long as what was indexed; a file rewritten in place (a resumed run trims its
  ``metrics.jsonl``) is indexed afresh. A cache that cannot be written safely is skipped and
  the index lives in memory only: a read-only run folder, or a cache path that resolves
  outside ``within`` (the run folder) through a symlink, which is neither read nor written.
  A cache file is written under a fresh name and renamed over the old one, so no symlink
  planted at either name is followed.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

HEAD_BYTES = 256
READ_BLOCK = 1 << 20
CACHE_VERSION = 1

Summarize = Callable[[dict], dict]


class LineIndex:
    """Offsets and summaries of the complete lines of one JSONL file; see the module docstring."""

    def __init__(self, path: Path, cache_path: Path | None, summarize: Summarize,
                 within: Path | None = None):
        self.path = path
        self.within = within
        self.cache_path = cache_path if self.safe(cache_path) else None
        self.summarize = summarize
        self.offsets: list[int] = []
        self.summaries: list[dict] = []
        self.indexed_size = 0
        self.head = file_head_of_nothing()
        self.partial_tail = False
        self.lock = threading.Lock()
        self.load_cache()

    @property
    def count(self) -> int:
        return len(self.offsets)

    def refresh(self) -> None:
        """Index the lines appended since the last call (all of them if the file was rewritten)."""
        with self.lock:
            size = self.path.stat().st_size
            if size < self.indexed_size or file_head(self.path, self.indexed_size) != self.head:
                self.offsets, self.summaries, self.indexed_size = [], [], 0
            if size > self.indexed_size:
                self.extend(size)
                self.head = file_head(self.path, self.indexed_size)
                self.save_cache()

    def extend(self, size: int) -> None:
        """Read from the indexed end to ``size``, indexing each complete line."""
        with self.path.open("rb") as handle:
            handle.seek(self.indexed_size)
            position, carry = self.indexed_size, b""
            while position + len(carry) < size:
                block = handle.read(min(READ_BLOCK, size - position - len(carry)))
                if not block:
                    break
                data = carry + block
                start = 0
                while (newline := data.find(b"\n", start)) >= 0:
                    self.add_line(position + start, data[start:newline])
                    start = newline + 1
                position += start
                carry = data[start:]
        self.indexed_size = position
        self.partial_tail = bool(carry.strip())

    def add_line(self, offset: int, line: bytes) -> None:
        if not line.strip():
            return
        self.offsets.append(offset)
        number = len(self.offsets)
        try:
            value = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
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
        with self.path.open("rb") as handle:
            handle.seek(start)
            line = handle.read(end - start)
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{self.path} record {i + 1}: not valid JSON ({error})") from error
        if not isinstance(value, dict):
            raise ValueError(f"{self.path} record {i + 1}: not a JSON object")
        return value

    def safe(self, cache_path: Path | None) -> bool:
        """Whether the cache's folder resolves inside ``within`` (always, without one)."""
        if cache_path is None:
            return False
        return self.within is None or cache_path.parent.resolve().is_relative_to(self.within)

    def load_cache(self) -> None:
        if self.cache_path is None or self.cache_path.is_symlink() or not self.cache_path.is_file():
            return
        try:
            cached = json.loads(self.cache_path.read_text(encoding="utf-8"))
            if cached.get("version") != CACHE_VERSION:
                return
            self.offsets, self.summaries = cached["offsets"], cached["summaries"]
            self.indexed_size, self.head = cached["indexed_size"], cached["head"]
        except (OSError, ValueError, KeyError):
            self.offsets, self.summaries, self.indexed_size = [], [], 0

    def save_cache(self) -> None:
        if self.cache_path is None:
            return
        document = {"version": CACHE_VERSION, "indexed_size": self.indexed_size, "head": self.head,
                    "offsets": self.offsets, "summaries": self.summaries}
        folder = self.cache_path.parent
        try:
            for _ in range(2):  # before making the folders, and after (one may have just become a symlink)
                if not self.safe(self.cache_path):
                    raise PermissionError(f"{folder} resolves outside {self.within}")
                folder.mkdir(parents=True, exist_ok=True)
            handle, tmp = tempfile.mkstemp(dir=folder, prefix=self.cache_path.name)
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as file:
                    file.write(json.dumps(document))
                os.replace(tmp, self.cache_path)
            except OSError:
                os.unlink(tmp)
                raise
        except OSError:
            self.cache_path = None  # cannot be written safely: keep the index in memory


def file_head(path: Path, indexed_size: int) -> str:
    """A digest of the file's first bytes (of those already indexed): what tells an appended
    file from a rewritten one."""
    with path.open("rb") as handle:
        return hashlib.sha1(handle.read(min(HEAD_BYTES, indexed_size))).hexdigest()


def file_head_of_nothing() -> str:
    return hashlib.sha1(b"").hexdigest()
