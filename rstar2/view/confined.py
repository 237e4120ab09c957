"""Files under a run folder, opened so that nothing outside it is ever read or written.

    folder = ConfinedFolder(Path("runs/cpu-demo"))   # the folder is opened once, here
    with folder.open("rollouts/step_3.jsonl", "a rollout file") as handle:
        handle.read()                                # only through this descriptor
    folder.kind("rollouts")                          # "file", "dir", "link", "other" or None
    folder.entries("eval")                           # {name: kind} of a folder's children
    folder.write(".view-index/metrics.json", data)   # atomically, making the folders

Why: a check of a path by name followed by an open of the same name is a race. A step file
swapped for a link to a file outside between the two (or between two reads of an index) is
served. So every open here starts from a descriptor of the run folder taken once, at startup,
and opens one component at a time relative to the previous one with ``O_NOFOLLOW``: a link at
any component is refused, never followed, and what is read is read through the descriptor that
open returned. The run folder itself may be named through a link (it is resolved once, when
opened); below it the rule is simply *links are refused*, even links that point inside, since
following them safely would mean re-implementing path resolution. Where a refused link points
is worked out afterwards, for the message only; nothing is opened through it.

A refusal is a ``ViewError`` (one line for the page): 403 for a link or for something that is
not a regular file (a FIFO, a device), 404 for a directory where a file is expected, and
``Missing`` (404) for nothing there at all.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import weakref
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from rstar2.service import ServiceError

FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO is refused, not waited on
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class ViewError(ServiceError):
    """Something the page should say in one line (unknown step, missing file, bad line, a link)."""

    def __init__(self, message: str, status: int = 404):
        super().__init__(message, status)


class Missing(ViewError):
    """Nothing at the path asked for (404); callers that expect this say what it means."""


def kind_of(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


def kind_of_entry(entry: os.DirEntry) -> str:
    """``kind_of`` from the listing itself (no second look, which a swap could race)."""
    if entry.is_symlink():
        return "link"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    return "file" if entry.is_file(follow_symlinks=False) else "other"


class ConfinedFolder:
    """A folder opened once, under which files are opened without following any link; see the
    module docstring. Paths are relative, ``/``-separated, without ``..``."""

    def __init__(self, path: Path):
        self.path = path.resolve()
        try:
            self.fd: int | None = os.open(self.path, FOLDER_FLAGS)
        except OSError:
            self.fd = None  # no such folder (or not a folder): everything under it is Missing
        else:
            weakref.finalize(self, os.close, self.fd)

    @property
    def exists(self) -> bool:
        return self.fd is not None

    def open(self, relative: str | PurePosixPath, what: str = "a file") -> BinaryIO:
        """The regular file at ``relative``, open for reading."""
        relative = parts_of(relative)
        folder = self.folder_fd(relative, relative.parent.parts)
        try:
            fd = self.open_at(folder, relative, FILE_FLAGS, relative)
        finally:
            os.close(folder)
        kind = kind_of(os.fstat(fd).st_mode)
        if kind != "file":
            os.close(fd)
            raise self.refusal(relative, kind, what)
        return os.fdopen(fd, "rb")

    def kind(self, relative: str | PurePosixPath) -> str | None:
        """What is at ``relative``, links not followed; None when nothing is (or the way there is
        not a plain folder)."""
        relative = parts_of(relative)
        try:
            folder = self.folder_fd(relative, relative.parent.parts)
        except ViewError:
            return None
        try:
            return kind_of(os.stat(relative.name, dir_fd=folder, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            return None
        finally:
            os.close(folder)

    def entries(self, relative: str | PurePosixPath) -> dict[str, str]:
        """The children of the folder at ``relative`` and their kinds (empty when there is no
        such folder; a ``ViewError`` when the way there is a link)."""
        relative = parts_of(relative)
        try:
            folder = self.folder_fd(relative, relative.parts)
        except Missing:
            return {}
        try:
            with os.scandir(folder) as listing:
                return {entry.name: kind_of_entry(entry) for entry in listing}
        finally:
            os.close(folder)

    def write(self, relative: str | PurePosixPath, data: bytes) -> None:
        """Write ``data`` to ``relative``, making its folders: under a fresh name, renamed over
        the old one, so that a link planted at either name is replaced, never followed."""
        relative = parts_of(relative)
        folder = self.folder_fd(relative, relative.parent.parts, create=True)
        try:
            temporary = f"{relative.name}.{secrets.token_hex(8)}.tmp"
            try:
                with os.fdopen(os.open(temporary, NEW_FILE_FLAGS, 0o666, dir_fd=folder), "wb") as handle:
                    handle.write(data)
                os.replace(temporary, relative.name, src_dir_fd=folder, dst_dir_fd=folder)
            except OSError:
                try:
                    os.unlink(temporary, dir_fd=folder)
                except FileNotFoundError:
                    pass
                raise
        finally:
            os.close(folder)

    def folder_fd(self, relative: PurePosixPath, parts: tuple[str, ...], create: bool = False) -> int:
        """A descriptor of the folder ``parts`` (a prefix of ``relative``, the path asked for),
        opened one component at a time from the run folder's; the caller closes it."""
        if self.fd is None:
            raise Missing(f"{self.path / relative}: no such file")
        fd = os.dup(self.fd)
        try:
            for depth, part in enumerate(parts, start=1):
                if create:
                    try:
                        os.mkdir(part, dir_fd=fd)
                    except FileExistsError:
                        pass
                child = self.open_at(fd, PurePosixPath(*parts[:depth]), FOLDER_FLAGS, relative)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_at(self, folder: int, component: PurePosixPath, flags: int, relative: PurePosixPath) -> int:
        """Open ``component`` (``relative``, the path asked for, or one of its folders) by its
        last name in ``folder``; a failure for a link or for nothing there says so."""
        try:
            return os.open(component.name, flags, dir_fd=folder)
        except FileNotFoundError:
            raise Missing(f"{self.path / relative}: no such file") from None
        except OSError as error:
            if error.errno == errno.ELOOP or (isinstance(error, NotADirectoryError) and self.is_link(folder, component)):
                raise self.refusal(component, "link") from None  # ELOOP: O_NOFOLLOW met a link
            if isinstance(error, NotADirectoryError):
                raise Missing(f"{self.path / relative}: no such file") from None
            raise

    @staticmethod
    def is_link(folder: int, component: PurePosixPath) -> bool:
        """Whether ``component`` is a link: what tells why a folder would not open (``O_DIRECTORY``
        with ``O_NOFOLLOW`` says "not a directory" for a link too)."""
        try:
            return stat.S_ISLNK(os.stat(component.name, dir_fd=folder, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            return False

    def refusal(self, relative: PurePosixPath | str, kind: str, what: str = "a file") -> ViewError:
        """Why ``relative``, found to be of ``kind``, is not served, in one line."""
        if kind == "dir":
            return ViewError(f"{relative} is a directory, not {what}")
        if kind != "link":
            return ViewError(f"{relative} is not a regular file (a FIFO, socket or device); not served", 403)
        try:
            real = Path(os.path.realpath(self.path / relative))  # for the message only
        except OSError:  # the link was swapped for something else meanwhile
            return ViewError(f"{relative} was a link when it was opened; not served", 403)
        if real.is_relative_to(self.path):
            return ViewError(f"{relative} is a link (to {real}); links are not followed, even inside the "
                             f"run folder; not served", 403)
        return ViewError(f"{relative} points outside the run folder (to {real}); not served", 403)


def parts_of(relative: str | PurePosixPath) -> PurePosixPath:
    """``relative`` as a path below the folder; names come from the viewer, never from a request,
    and ``..`` or an absolute path is a bug, not a request to serve."""
    relative = PurePosixPath(relative)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise ValueError(f"{relative}: not a path below the run folder")
    return relative
