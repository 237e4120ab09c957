"""The demo's held-out probes during RL: a fixed subset of the held-out set with both of its
levels, probed every few steps unless the recipe's ``validation:`` section says otherwise."""

from rstar2.demo.pipeline import (DEFAULT_RECIPE, PROBE_EVERY_STEPS, PROBE_PROBLEMS, PROBES_FILE, DemoSettings,
                                  load_pipeline_recipe, probe_subset)
from rstar2.sft.dataset import split_tasks


def demo_config(*overrides: str):
    """The RL run's config as ``rstar2 demo --name probed`` reads it."""
    return load_pipeline_recipe(DEFAULT_RECIPE, overrides, "probed", "demo", DemoSettings, probes=PROBES_FILE)[1]


def test_the_probes_are_a_fixed_subset_of_every_family_and_level_of_the_held_out_set():
    heldout = split_tasks(seed=0, sft=1, rl=1, heldout=DemoSettings().heldout_problems).heldout
    probes = probe_subset(heldout)
    assert len(probes) == PROBE_PROBLEMS and len({task.key for task in probes}) == PROBE_PROBLEMS
    assert {task.key for task in probes} <= {task.key for task in heldout}
    levels = [task.level for task in probes]
    assert levels.count("basic") == levels.count("hard") == PROBE_PROBLEMS // 2
    kinds = {(task.family, task.level) for task in heldout}
    assert {(task.family, task.level) for task in probes} == kinds  # every family at each level
    assert probe_subset(heldout[:4]) == heldout[:4]  # a smaller set: all of it


def test_the_rl_run_probes_them_unless_the_recipe_says_otherwise():
    validation = demo_config().validation
    assert validation.every_steps == PROBE_EVERY_STEPS and validation.limit is None
    assert validation.data == str(demo_config().run_dir / "data" / PROBES_FILE)
    assert demo_config("validation.every_steps=2", "validation.limit=3").validation.model_dump() == {
        **validation.model_dump(), "every_steps": 2, "limit": 3}
    assert demo_config("validation.every_steps=null").validation.every_steps is None  # off
    assert demo_config("validation.data=mine.jsonl").validation.data == "mine.jsonl"
