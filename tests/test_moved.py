"""Old import paths of moved modules keep working for one release, with a warning."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from rstar2.moved import MOVED, new_names


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_new_place_exists_and_the_old_one_does_not(old):
    for new in MOVED[old]:
        importlib.import_module(new)
    assert importlib.util.find_spec(old).loader.__class__.__name__ == "MovedModules"


def run(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (nothing imported yet, so every warning fires)."""
    return subprocess.run([sys.executable, "-W", "always::DeprecationWarning", "-c", code],
                          capture_output=True, text=True, timeout=120, check=True)


def test_an_old_path_is_the_same_module_and_warns_at_the_importing_line():
    result = run("import rstar2.models.loading as new\n"
                 "from rstar2.engines import loading\n"
                 "import rstar2.engines.fleet.members as members\n"
                 "import rstar2.fleet.members\n"
                 "print(loading is new, members is rstar2.fleet.members,\n"
                 "      loading.__spec__.name, members.__name__)\n")
    assert result.stdout.split() == ["True", "True", "rstar2.models.loading", "rstar2.fleet.members"]
    assert "<string>:2: DeprecationWarning: rstar2.engines.loading has moved to " \
           "rstar2.models.loading" in result.stderr
    assert "rstar2.engines.fleet.members has moved to rstar2.fleet.members" in result.stderr


def test_a_split_module_answers_from_both_halves():
    result = run("from rstar2.engines.factory import EngineSpec, MemberSpec\n"
                 "from rstar2.engines.fleet.policies import Scheduler, KVAware, TrajectoryBooks\n"
                 "import rstar2.engines.factory as factory\n"
                 "print(EngineSpec.__module__, MemberSpec.__module__, Scheduler.__module__)\n"
                 "try:\n    factory.nothing_here\nexcept AttributeError as error:\n    print('missing')\n")
    assert result.stdout.split() == ["rstar2.engines.registry", "rstar2.fleet.rollout_engine",
                                     "rstar2.fleet.scheduler", "missing"]


def test_names_that_did_not_move_are_left_alone():
    assert new_names("rstar2.engines.hf") == ()
    assert new_names("rstar2.engines.fleetwood") == ()
    assert new_names("rstar2.engines.fleet.engine") == ("rstar2.fleet.engine",)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("rstar2.engines.nothing_here")


def test_names_that_left_a_module_still_answer_from_it():
    result = run("from rstar2.rl.config import ModelConfig, RLConfig\n"
                 "from rstar2.rl.update import autocast\n"
                 "import rstar2.training.config as new\n"
                 "print(ModelConfig is new.ModelConfig, autocast.__module__)\n"
                 "import rstar2.rl.config as old\n"
                 "try:\n    old.Nothing\nexcept AttributeError as error:\n    print('missing')\n")
    assert result.stdout.split() == ["True", "rstar2.training.precision", "missing"]
    assert "<string>:1: DeprecationWarning: rstar2.rl.config.ModelConfig has moved to " \
           "rstar2.training.config.ModelConfig" in result.stderr
    assert "RLConfig" not in result.stderr  # it did not move
