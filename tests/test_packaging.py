"""The install lines the docs print work: a wheel built from the clone (`python -m build`) carries
the package data the commands read at run time (packaged data sets, recipes, the viewer's
page), installs into a fresh venv with --no-deps, and finds them there, outside the clone; the
editable install's recipes are the clone's own."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import rstar2

REPO = Path(__file__).resolve().parents[1]


def clone_files() -> list[str]:
    """What a clone holds: the tracked files and the new ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [name for name in listed.split("\0") if name and (REPO / name).exists()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("build", reason="needs the build package (pip install -e '.[dev]')")
    source = tmp_path_factory.mktemp("clone")
    for name in clone_files():
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target, follow_symlinks=False)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out)],
                   cwd=source, check=True, capture_output=True, timeout=300)
    [built] = out.glob("rstar2-*.whl")
    return built


def test_the_wheel_carries_what_the_commands_read(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    data = REPO / "rstar2" / "data" / "benchmarks"
    expected = {f"rstar2/data/benchmarks/{p.name}" for p in data.iterdir() if p.suffix in {".jsonl", ".md"}}
    expected |= {f"rstar2/recipes/{p.name}" for p in (REPO / "recipes").glob("*.yaml")}
    expected |= {f"rstar2/view/static/{p.name}" for p in (REPO / "rstar2" / "view" / "static").iterdir()}
    assert "rstar2/data/benchmarks/gsm8k_train.jsonl" in expected and len(expected) > 20
    assert expected <= names, sorted(expected - names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "rstar2 = rstar2.launch:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_the_wheel_installs_with_no_deps_and_finds_its_data(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                    "--no-index", str(wheel)], check=True, capture_output=True, timeout=300)
    probe = ("import rstar2, pathlib; r = rstar2.RECIPES; "
             "print(r.is_relative_to(pathlib.Path(rstar2.__file__).parent), (r / 'cpu-demo.yaml').is_file(), "
             "(r.parent / 'data' / 'benchmarks' / 'gsm8k_train.jsonl').is_file())")
    shown = subprocess.run([str(python), "-I", "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                           check=True)
    assert shown.stdout.split() == ["True", "True", "True"]


def test_the_clone_reads_its_own_recipes():
    assert rstar2.RECIPES.resolve() == (REPO / "recipes").resolve()


def test_nothing_shipped_or_tested_refers_to_the_projects_shared_data():
    """What a clone runs, and the tests it runs, read their data from the package and from
    tests/samples, never from a folder beside the clone, which nobody who clones the project has."""
    shipped = [p for tree in (REPO / "rstar2", REPO / "recipes", REPO / "tests", REPO / "scripts") for p in tree.rglob("*")
               if p.is_file() and p.suffix in {".py", ".yaml", ".md", ".sh"} and p != Path(__file__)]
    assert [str(p.relative_to(REPO)) for p in shipped
            if "../shared" in p.read_text() or "RSTAR2_SHARED_DATA" in p.read_text()] == []
