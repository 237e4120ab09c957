"""Reading a recipe (a run's or an SFT run's) and importing the agent cost no torch import
(seconds, and hundreds of MB, for a command that only checks a config or runs the agent loop
against a server)."""

from __future__ import annotations

import subprocess
import sys

from rstar2 import RECIPES

CHECK = """
import sys
from pathlib import Path
from rstar2.recipe import read_recipe, validate_tree
from rstar2.run.recipe import validate_config
from rstar2.sft.config import SFTConfig
import rstar2.agent, rstar2.agent.rollout, rstar2.agent.card
read = {"run": 0, "sft": 0}
for recipe in sorted(Path(sys.argv[1]).glob("*.yaml")):
    tree = read_recipe(recipe)
    if "rl" in tree:  # a run recipe (the GSM8K pipeline's own section aside)
        tree.pop("gsm8k", None)
        validate_config(tree, source=str(recipe))
        read["run"] += 1
    elif "train" in tree:  # an SFT recipe
        validate_tree(SFTConfig, tree, source=str(recipe))
        read["sft"] += 1
assert all(read.values()), read
print(sorted(name for name in sys.modules if name == "torch" or name.startswith("torch.")))
"""


def loaded_torch_modules(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code, str(RECIPES)], capture_output=True,
                          text=True, timeout=300, check=True).stdout.strip()


def test_reading_every_recipe_and_importing_the_agent_imports_no_torch():
    assert loaded_torch_modules(CHECK) == "[]"


def test_the_check_sees_torch_when_something_imports_it():
    assert "'torch'" in loaded_torch_modules(CHECK.replace("import sys\n", "import sys, torch\n", 1))
