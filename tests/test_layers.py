"""The packages of rstar2 import downwards only, and no two packages import each other.

Every import in every module under ``rstar2/`` (function-level ones too) is read with ``ast``
and mapped to the package it comes from and the package it reaches. The layers are
docs' architecture (top to bottom): cli > demo, view > run > cluster > rl, sft, eval >
agent, data > engines > sandbox, reward; ``rstar2/section.py`` (the base of every config
section) and the package root sit below them all. An import into a higher layer fails, and so
does a cycle between packages (packages of one layer may import each other one way only).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "rstar2"
LAYERS = [
    {"cli", "__main__"},
    {"demo", "view"},
    {"run"},
    {"cluster"},
    {"rl", "sft", "eval"},
    {"agent", "data"},
    {"engines"},
    {"sandbox", "reward"},
    {"section", "recipe", "service", "__init__"},
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
    """Every module ``path`` imports, relative imports resolved, ``from rstar2 import x`` as
    ``rstar2.x`` when x is a module (else as ``rstar2``, the package's ``__init__``)."""
    here = ["rstar2", *path.relative_to(root).with_suffix("").parts]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            if module == "rstar2":  # a submodule, or a name of rstar2/__init__.py
                yield from (f"rstar2.{alias.name}" if (root / alias.name).exists()
                            or (root / f"{alias.name}.py").exists() else "rstar2"
                            for alias in node.names)
            else:
                yield module


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


def test_every_package_has_a_layer():
    packages = {package_of_file(path) for path in ROOT.rglob("*.py")}
    assert packages <= RANK.keys(), f"place these in LAYERS (docs: architecture): {packages - RANK.keys()}"


def test_imports_point_down_and_packages_form_no_cycle():
    found = edges()
    assert upward(found) == []
    assert cycles(found) == []


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
