"""Run config: the shipped recipes, clear errors naming the bad field, dotted overrides."""

from pathlib import Path

import pytest
import yaml

from rstar2.demo.gsm8k import load_recipe
from rstar2.run.config import RunConfig
from rstar2.recipe import field_paths, section_type
from rstar2.run.recipe import ConfigError, load_config, read_recipe
from rstar2.section import Section
from rstar2.sft.config import load_sft_config

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
STAGES = [RECIPES / f"qwen3-14b-stage{n}.yaml" for n in (1, 2, 3)]


@pytest.fixture
def demo_recipe() -> Path:
    return RECIPES / "cpu-demo.yaml"


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_recipe_validates_and_opens_with_a_comment(path):
    tree = read_recipe(path)
    if "gsm8k" in tree:  # a pipeline recipe: its own section, then the RL run's
        config = load_recipe(path)[1]
    elif "rl" not in tree:  # an `rstar2 sft` recipe
        config = load_sft_config(path)
    else:
        config = load_config(path)
    assert config.name == path.stem
    assert path.read_text().startswith("# ")


def test_paper_hyperparameters_in_every_stage():
    for path in STAGES:
        config = load_config(path)
        assert config.rl.prompts_per_step == 512
        assert (config.rl.rollouts_per_prompt, config.rl.group_size) == (32, 16)
        assert config.rl.roc.mode == "paper"
        assert config.rl.optimizer.lr == 1e-6 and config.rl.optimizer.warmup_steps == 20
        assert (config.rl.loss.clip_low, config.rl.loss.clip_high) == (0.2, 0.28)
        assert config.rl.loss.kl_coef == 0 and config.rl.loss.entropy_coef == 0
        assert config.rollout.temperature == 1.0


def test_stages_differ_as_in_the_paper():
    one, two, three = (load_config(path) for path in STAGES)
    assert [c.rollout.max_response_tokens for c in (one, two, three)] == [8192, 12288, 12288]
    assert [c.rollout.max_turns for c in (one, two, three)] == [10, 10, 15]
    assert [c.rl.steps for c in (one, two, three)] == [300, 85, 125]
    assert one.rl.init.checkpoint is None and one.data.keep_ids is None
    assert two.rl.init.checkpoint == "runs/qwen3-14b-stage1/checkpoints"
    assert not two.rl.init.reset_optimizer and not two.rl.init.reset_reference
    assert three.rl.init.checkpoint == "runs/qwen3-14b-stage2/checkpoints"
    assert three.rl.init.reset_optimizer and three.rl.init.reset_reference
    assert three.data.keep_ids is not None and three.data.train == one.data.train


def test_every_field_is_documented():
    def sections(model):
        yield model
        for field in model.model_fields.values():
            inner = section_type(field.annotation)
            if inner is not None:
                yield from sections(inner)

    for model in sections(RunConfig):
        assert issubclass(model, Section)
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no docstring"


def test_overrides_apply_in_order_and_parse_values(demo_recipe):
    config = load_config(
        demo_recipe,
        ["rl.optimizer.lr=2e-6", "rl.roc.mode=off", "sandbox.urls=[http://a:1, http://b:2]",
         "model.lora.rank=8", "engine.dtype=null", "logging.wandb_project=null", "rl.optimizer.lr=3e-6",
         "rl.roc.drop_zero_variance=false", "rl.roc.error_signal=text"],
    )
    assert config.rl.optimizer.lr == 3e-6
    # YAML 1.1 would read `off` as False; recipes use YAML 1.2 booleans (true/false only)
    assert config.rl.roc.mode == "off" and config.rl.rollouts_per_prompt == config.rl.group_size
    assert config.rl.roc.drop_zero_variance is False and config.rl.roc.error_signal == "text"
    assert config.sandbox.urls == ("http://a:1", "http://b:2")
    assert config.model.lora is not None and config.model.lora.rank == 8
    assert config.model.lora.alpha == 32.0  # the rest of a section created by --set keeps defaults


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("rl.roc.mode=sort", "rl.roc.mode: must be one of 'paper', 'release', 'off' (got 'sort')"),
        ("rl.roc.error_signal=regex", "rl.roc.error_signal: must be one of 'outcome', 'text' (got 'regex')"),
        ("rl.lr=1e-6", "rl.lr: unknown field (did you mean rl.optimizer.lr?)"),
        ("rl.optimizer.warmup=3",
         "rl.optimizer.warmup: unknown field (did you mean rl.optimizer.warmup_steps?)"),
        ("rollout.temperature=0", "rollout: temperature must be above 0 to train (got 0)"),
        ("rollout.tool_timeout_s=null", "rollout: tool_timeout_s must be set to train"),
        ("rollout.tool_response_cut=left",
         "rollout.tool_response_cut: must be one of 'middle', 'end', 'start' (got 'left')"),
        ("rollout.prompt.variant=long", "rollout.prompt.variant: must be one of 'rstar2', 'short', "
         "'no_tools' (got 'long')"),
        ("rollout.max_tool_calls=2",
         "rollout.max_tool_calls: unknown field (did you mean rollout.max_tool_calls_per_turn?)"),
        ("rl.group_size=1", "rl.group_size: input should be greater than or equal to 2 (got 1)"),
        ("rl.loss.clip_low=1.5", "rl.loss.clip_low: input should be less than 1 (got 1.5)"),
        ("name=a b", "name: string should match pattern"),
        ("rl.steps.x=1", "rl.steps is not a section"),
        ("novalue", "expected KEY=VALUE"),
    ],
)
def test_errors_name_the_bad_field(demo_recipe, override, message):
    with pytest.raises(ConfigError) as error:
        load_config(demo_recipe, [override])
    assert message in str(error.value)


def test_section_checks_name_their_fields(demo_recipe):
    with pytest.raises(ConfigError, match=r"rl: group_size 3 .* roc.min_per_side=2 .* group_size >= 4"):
        load_config(demo_recipe, ["rl.roc.mode=release", "rl.group_size=3"])
    with pytest.raises(ConfigError, match="prompts_per_step 5 must split evenly into updates_per_step 2"):
        load_config(demo_recipe, ["rl.prompts_per_step=5", "rl.updates_per_step=2"])


def test_all_problems_are_reported_at_once(demo_recipe):
    with pytest.raises(ConfigError) as error:
        load_config(demo_recipe, ["rl.steps=0", "rollout.top_p=2"])
    text = str(error.value)
    assert text.startswith(f"{demo_recipe}: 2 problems:")
    assert "rl.steps:" in text and "rollout.top_p:" in text


def test_missing_required_sections_and_unreadable_files(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: x\n")
    with pytest.raises(ConfigError) as error:
        load_config(recipe)
    assert "data: required field is missing" in str(error.value)
    assert "rl: required field is missing" in str(error.value)
    recipe.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="a recipe is a mapping"):
        load_config(recipe)
    with pytest.raises(ConfigError, match="cannot read recipe"):
        load_config(tmp_path / "absent.yaml")


def test_field_paths_cover_nested_and_optional_sections():
    paths = set(field_paths(RunConfig))
    assert {"rl.optimizer.lr", "rl.roc.penalty_epsilon", "model.lora.rank", "checkpoint.keep_last"} <= paths


def test_configs_are_immutable(demo_recipe):
    config = load_config(demo_recipe)
    with pytest.raises(Exception):
        config.rl.optimizer.lr = 1.0
    assert config.run_dir == Path("runs/cpu-demo")


def test_every_paper_knob_of_the_rollout_is_a_recipe_field(demo_recipe):
    config = load_config(demo_recipe, [
        "rollout.max_tool_response_tokens=64", "rollout.tool_response_cut=end",
        "rollout.max_tool_calls_per_turn=1", "rollout.max_turns=5",
        "rollout.max_response_tokens=300", "rollout.tool_timeout_s=2.5",
        "rollout.prompt={variant: rstar2, tool_name: python_code_with_standard_io}"])
    rollout = config.rollout
    assert (rollout.max_tool_response_tokens, rollout.tool_response_cut) == (64, "end")
    assert (rollout.max_tool_calls_per_turn, rollout.max_turns) == (1, 5)
    assert (rollout.max_response_tokens, rollout.tool_timeout_s) == (300, 2.5)
    assert rollout.prompt.tool_name == "python_code_with_standard_io"
    assert load_config(demo_recipe, ["rollout.prompt=no_tools"]).rollout.prompt.variant == "no_tools"


def test_old_rollout_fields_are_read_at_their_new_places_with_a_warning(tmp_path, demo_recipe):
    """A recipe or a saved run config.yaml from before the engine and sandbox sections."""
    tree = yaml.safe_load(demo_recipe.read_text())
    del tree["engine"], tree["sandbox"]
    tree["rollout"].update(engine="hf", engine_dtype="bfloat16", sandbox_workers=3, scheduler="static")
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(tree))
    with pytest.warns(FutureWarning, match=r"rollout.engine_dtype -> engine.dtype.*rollout.sandbox_workers -> sandbox.workers"):
        config = load_config(old, ["rollout.sandbox_urls=[http://a:1]"])
    assert (config.engine.kind, config.engine.dtype, config.engine.scheduler) == ("hf", "bfloat16", "static")
    assert (config.sandbox.workers, config.sandbox.urls) == (3, ("http://a:1",))
    with pytest.raises(ConfigError, match="rollout.engine_dtype and engine.dtype are the same setting"):
        load_config(demo_recipe, ["rollout.engine_dtype=float32"])


def test_lora_is_refused_with_an_engine_that_holds_its_own_copy(demo_recipe):
    with pytest.raises(ConfigError, match="engine.dtype needs full fine-tuning"):
        load_config(demo_recipe, ["model.lora.rank=8"])
    with pytest.raises(ConfigError, match="engine.members needs full fine-tuning"):
        load_config(demo_recipe, ["model.lora.rank=8", "engine.dtype=null", "engine.members=[{}]"])
