"""The packages of rstar2 import downwards only, and no two packages import each other.

Every import in every module under ``rstar2/`` (function-level ones too) is read with ``ast``
and mapped to the package it comes from and the package it reaches. The layers are
``LAYERS`` (top to bottom): cli (with ``launch``, the command's process) > demo, view > run >
cluster > rl, sft, eval > training, tasks > agent, data > fleet, serve > engines > models,
weights > sandbox, reward;
``rstar2/section.py`` (the base of every config section), the other top-level modules and the
package root sit below them all. An import into a higher layer fails, and so does a cycle
between packages (packages of one layer may import each other one way only).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "rstar2"
LAYERS = [
    {"cli", "__main__", "launch"},
    {"demo", "view"},
    {"run"},
    {"cluster"},
    {"rl", "sft", "eval"},
    {"training", "tasks"},
    {"agent", "data"},
    {"fleet", "serve"},
    {"engines"},
    {"models", "weights"},
    {"sandbox", "reward"},
    {"section", "recipe", "service", "moved", "errors", "__init__"},
]
RANK = {package: rank for rank, layer in enumerate(LAYERS) for package in layer}

Edge = tuple[str, str, str, str]  # (from package, to package, file, module imported)


def package_of_file(path: Path, root: Path = ROOT) -> str:
    return path.relative_to(root).with_suffix("").parts[0]


def package_of_module(module: str) -> str | None:
    """'rstar2.engines.hf' -> 'engines'; 'rstar2' -> '__init__'; not rstar2's -> None."""
    parts = module.split(".")
    if parts[0] != "rstar2":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def imported_modules(path: Path, root: Path = ROOT) -> Iterator[str]:
    """Every module ``path`` imports, relative imports resolved; ``from package import x`` as
    ``package.x`` when x is a module (else as ``package``, its ``__init__``)."""
    here = ["rstar2", *path.relative_to(root).with_suffix("").parts]
    for node in run_time_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            yield from (f"{module}.{alias.name}" if is_module(f"{module}.{alias.name}", root)
                        else module for alias in node.names)


def is_module(name: str, root: Path = ROOT) -> bool:
    """Whether ``name`` (rstar2.a.b) is a module or package of ``root``."""
    if not name.startswith("rstar2."):
        return False
    location = root.joinpath(*name.split(".")[1:])
    return location.with_suffix(".py").exists() or location.is_dir()


def run_time_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:``, which never run: an
    annotation may name a module above (a policy's ``Scheduler``) without importing it."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *run_time_nodes(child)])
            continue
        yield node
        yield from run_time_nodes(node)


def edges(root: Path = ROOT) -> list[Edge]:
    """Every import from one package of ``root`` into another."""
    found = []
    for path in sorted(root.rglob("*.py")):
        source = package_of_file(path, root)
        for module in imported_modules(path, root):
            target = package_of_module(module)
            if target is not None and target != source:
                found.append((source, target, str(path.relative_to(root.parent)), module))
    return found


def upward(found: list[Edge]) -> list[str]:
    return [f"{file}: {source} imports {module} (layer {target} is above {source})"
            for source, target, file, module in found if RANK[target] < RANK[source]]


def cycles(found: list[Edge]) -> list[list[str]]:
    """The package cycles of ``found``, each once, as [a, b, ..., a]."""
    graph: dict[str, set[str]] = {}
    for source, target, _, _ in found:
        graph.setdefault(source, set()).add(target)
    seen: set[frozenset[str]] = set()
    result = []

    def walk(path: list[str]) -> None:
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == path[0] and frozenset(path) not in seen:
                seen.add(frozenset(path))
                result.append(path + [nxt])
            elif nxt not in path and nxt > path[0]:  # each cycle from its smallest package
                walk(path + [nxt])

    for start in sorted(graph):
        walk([start])
    return result


def module_name(path: Path, root: Path = ROOT) -> str:
    return ".".join(["rstar2", *path.relative_to(root).with_suffix("").parts]).removesuffix(".__init__")


def module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of ``root`` it names in an import (a package's ``__init__`` as the
    package); the parents Python imports along the way are not edges."""
    paths = sorted(root.rglob("*.py"))
    names = {module_name(path, root) for path in paths}
    return {module_name(path, root): {m for m in imported_modules(path, root) if m in names}
            - {module_name(path, root)} for path in paths}


def module_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of two or more modules (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_every_package_has_a_layer():
    packages = {package_of_file(path) for path in ROOT.rglob("*.py")}
    assert packages <= RANK.keys(), f"place these in LAYERS (docs: architecture): {packages - RANK.keys()}"


def test_imports_point_down_and_packages_form_no_cycle():
    found = edges()
    assert upward(found) == []
    assert cycles(found) == []


def test_no_modules_import_each_other_round_a_circle():
    """Function-level imports count: a lazy import that closes a circle is still a circle."""
    assert module_cycles(module_graph()) == []


def test_the_walk_sees_an_upward_import_and_a_cycle(tmp_path):
    """The checks above on a made-up tree: a lazy import of the cluster from an engine, a
    relative import, and two packages of one layer importing each other."""
    root = tmp_path / "rstar2"
    files = {
        "engines/fleet/member.py": "def f():\n    from rstar2.cluster import weights\n",
        "engines/base.py": "from .fleet import member\n",
        "rl/trainer.py": "from rstar2 import eval\n",
        "eval/runner.py": "import rstar2.rl.trainer as trainer\n",
        "cluster/__init__.py": "",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    found = edges(root)
    assert upward(found) == [
        "rstar2/engines/fleet/member.py: engines imports rstar2.cluster "
        "(layer cluster is above engines)"]
    assert cycles(found) == [["eval", "rl", "eval"]]
    assert ("engines", "engines") not in {(s, t) for s, t, _, _ in found}  # within a package


def test_the_module_walk_sees_a_lazy_circle_and_skips_type_only_imports(tmp_path):
    """A made-up fleet: the books name the scheduler for annotations only (no circle), while
    a policy that imports the scheduler inside a function, which imports that policy, is one."""
    root = tmp_path / "rstar2"
    files = {
        "fleet/__init__.py": "",
        "fleet/books.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                          "    from rstar2.fleet.scheduler import Scheduler\n",
        "fleet/scheduler.py": "from rstar2.fleet.books import Policy\nfrom rstar2.fleet import adaptive\n",
        "fleet/adaptive.py": "def make():\n    from rstar2.fleet.scheduler import Scheduler\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    graph = module_graph(root)
    assert graph["rstar2.fleet.books"] == set()
    assert module_cycles(graph) == [["rstar2.fleet.adaptive", "rstar2.fleet.scheduler"]]
