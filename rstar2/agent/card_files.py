"""The copies a model folder keeps of its own tools, so that its card rebuilds them anywhere.

A card (``rstar2.agent.card``) names a user's tool as ``module:factory`` with options such as
``{path: data/constants.json}``. As written in the recipe, both mean something only on the
machine and in the directory the model was trained in: a folder moved, copied to another machine
or published to the hub could not rebuild its tools. So writing a card copies them into the
folder's ``tools/``:

* the module of each ``module:factory`` tool: a single-file module as ``tools/<name>.py``, a
  module of a package as its whole top-level package ``tools/<package>/`` (the package's modules
  import one another);
* every option that names an existing file by a path (a value with a directory or an
  extension), as ``tools/files/<name>``; the option then reads ``tools/files/<name>``;

and ``ToolFiles`` (the card's ``tool_files``) records both, relative to the folder.
``resolved_tool_files`` turns them into paths of the folder a card is read from, and
``import_tool_modules`` loads the copied modules under their own names, so the tool registry's
``import`` finds the folder's copy, the code the model was trained with.

A module that is not a set of source files here (built in, compiled) or that belongs to an
installed package is not copied: the card names it as before, and a ``ToolFilesWarning`` says
what must be installed where the model is used. rstar2's own modules and the standard library
are there wherever rstar2 runs, and are never copied.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import shutil
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rstar2.agent.tools import ToolSpec
from rstar2.agent.tools.registry import ToolConfigError

TOOLS_DIR = "tools"
"""The folder, inside a model folder, of the copied tool modules."""
FILES_DIR = f"{TOOLS_DIR}/files"
"""The folder, inside a model folder, of the copied option files."""
ALWAYS_THERE = frozenset({"rstar2", *sys.stdlib_module_names})
"""Top-level modules every place that runs rstar2 has: never copied."""


class ToolFilesWarning(UserWarning):
    """A tool of a card that its model folder cannot carry: it must be installed where the model is used."""


class ToolFiles(BaseModel):
    """What a model folder carries for its card's tools (module docstring)."""

    model_config = ConfigDict(frozen=True)

    modules: dict[str, str] = Field({}, description="Each copied top-level module by name: its "
                                    "copy (a .py file or a package folder), relative to the model folder.")
    files: tuple[str, ...] = Field((), description="The option values that are copied files, "
                                   "relative to the model folder.")


def carry_tool_files(tools: Sequence[ToolSpec], carried: ToolFiles,
                     folder: Path) -> tuple[tuple[ToolSpec, ...], ToolFiles]:
    """Copy the modules and option files of ``tools`` into ``folder`` (module docstring); the
    tools with their options rewritten to the copies, and what was copied. ``carried``: the
    copies another folder already holds (a card read from it), used where the originals are."""
    copies = ToolCopies(folder, carried)
    carried_tools = tuple(copies.carry(spec) for spec in tools)
    return carried_tools, ToolFiles(modules=copies.modules, files=tuple(copies.files.values()))


def resolved_tool_files(tools: Sequence[ToolSpec], carried: ToolFiles,
                        folder: Path) -> tuple[tuple[ToolSpec, ...], ToolFiles]:
    """``tools`` and ``carried`` with the folder-relative paths of the copies made paths of
    ``folder``, where the card was read (absolute paths stay as they are)."""
    located = {relative: str(folder / relative) for relative in carried.files}
    resolved = tuple(spec.model_copy(update={"options": {
        key: located.get(value, value) if isinstance(value, str) else value
        for key, value in spec.options.items()}}) for spec in tools)
    return resolved, ToolFiles(modules={name: str(folder / copy) for name, copy in carried.modules.items()},
                               files=tuple(located.values()))


def import_tool_modules(carried: ToolFiles) -> None:
    """Load the copied modules of ``carried`` (resolved paths) under their own names, so that
    building the tools imports the folder's copy. A module this process has already imported is
    kept (replacing it would split its users), and a copy that is missing leaves the module to
    be imported as installed; both say so in a ``ToolFilesWarning``. A copy that fails to
    import is a ``ToolConfigError`` naming it."""
    for name, location in carried.modules.items():
        copy = Path(location)
        loaded = sys.modules.get(name)
        if loaded is not None:
            origin = getattr(loaded, "__file__", None)
            if origin is None or not Path(origin).absolute().is_relative_to(copy.absolute()):
                warnings.warn(f"tool module {name}: using the one already imported ({origin or 'built in'}), "
                              f"not the model folder's copy {copy}", ToolFilesWarning, stacklevel=2)
            continue
        spec = importlib.machinery.PathFinder.find_spec(name, [str(copy.parent)]) if copy.exists() else None
        if spec is None:
            warnings.warn(f"tool module {name}: the model folder's copy {copy} is missing; "
                          f"importing {name} as installed", ToolFilesWarning, stacklevel=2)
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as error:  # noqa: BLE001 -- the user's module, reported in one line
            del sys.modules[name]
            raise ToolConfigError(f"tool module {name} ({copy}): {type(error).__name__}: {error}") from None


class ToolCopies:
    """The copies of one card's tools made in one folder: each module and each file copied once."""

    def __init__(self, folder: Path, carried: ToolFiles):
        self.folder = folder
        self.carried = carried
        self.modules: dict[str, str] = {}
        self.files: dict[Path, str] = {}  # the original's resolved path -> its copy, folder-relative

    def carry(self, spec: ToolSpec) -> ToolSpec:
        module, sep, _ = spec.use.partition(":")
        if sep:
            self.carry_module(spec.use, module)
        options = {key: self.carry_file(value) if names_a_file(value) else value
                   for key, value in spec.options.items()}
        return spec.model_copy(update={"options": options})

    def carry_module(self, use: str, module: str) -> None:
        name = module.partition(".")[0]
        if name in self.modules or name in ALWAYS_THERE:
            return
        source, why_not = self.module_source(module)
        if source is None:
            warnings.warn(f"tool {use!r}: {why_not}, so the model folder cannot carry it; the card names it "
                          "as it is, and it must be installed wherever the model is used", ToolFilesWarning,
                          stacklevel=4)
            return
        target = self.folder / TOOLS_DIR / source.name
        if source.resolve() != target.resolve():
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, target, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(source, target)
        self.modules[name] = f"{TOOLS_DIR}/{source.name}"

    def module_source(self, module: str) -> tuple[Path | None, str]:
        """The file or package folder of the top-level module of ``module``, or None and why
        not (naming what is missing). A module of a package is looked for first (its packages are imported for that, as
        building the tool did), so that a name that is not there copies nothing."""
        name = module.partition(".")[0]
        if name in self.carried.modules and Path(self.carried.modules[name]).exists():
            return Path(self.carried.modules[name]), ""
        try:
            spec = importlib.util.find_spec(module) and importlib.util.find_spec(name)
        except Exception:  # noqa: BLE001 -- a package that fails to import: not there to copy
            spec = None
        if spec is None:
            return None, f"{module} cannot be found here"
        if spec.submodule_search_locations is not None:  # a package, maybe without __init__.py
            locations = list(spec.submodule_search_locations)
            source = Path(spec.origin).parent if spec.has_location else (
                Path(locations[0]) if len(locations) == 1 else None)
            if source is None:
                return None, f"{name} is a package spread over several folders"
        elif spec.has_location and spec.origin.endswith(".py"):
            source = Path(spec.origin)
        else:
            return None, f"{name} is built in or compiled, not a source file"
        if {"site-packages", "dist-packages"} & set(source.parts):
            return None, f"{name} is an installed package"
        return source, ""

    def carry_file(self, value: str) -> str:
        original = Path(value).expanduser().resolve()
        if original not in self.files:
            taken = set(self.files.values())
            copy, number = f"{FILES_DIR}/{original.name}", 1
            while copy in taken:
                number += 1
                copy = f"{FILES_DIR}/{original.stem}-{number}{original.suffix}"
            target = self.folder / copy
            if original != target.resolve():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(original, target)
            self.files[original] = copy
        return self.files[original]


def names_a_file(value) -> bool:
    """Whether an option value is a path (with a directory or an extension) of an existing file;
    a bare word such as a tool's name is never taken for one."""
    if not isinstance(value, str) or not value:
        return False
    path = Path(value).expanduser()
    return ("/" in value or bool(path.suffix)) and path.is_file()
