"""One engine vocabulary (``rstar2.engines.registry.ENGINE_KINDS``) accepted by recipes, eval,
chat and the factory, a bad name refused with a clear one-line error everywhere; the real
engines meet the contracts they declare."""

import inspect
import typing
import warnings

import pytest
from typer.testing import CliRunner

from rstar2.cli.app import app
from rstar2.engines.base import Engine, TrainableEngine
from rstar2.engines.registry import ENGINE_KINDS, TRAINABLE_ENGINE_KINDS, EngineSpec, check_engine_kind, open_engine, open_trainable_engine
from rstar2.engines.openai import OpenAIEngine
from rstar2.engines.vllm import VLLMEngine
from rstar2.eval.runner import EvalSettings
from rstar2.run.recipe import ConfigError, validate_config


def recipe(engine):
    return {"name": "x", "data": {"train": "t.jsonl"}, "rl": {"steps": 1}, "engine": {"kind": engine}}


def test_the_vocabulary_is_one_set_of_names_used_everywhere():
    assert ENGINE_KINDS == ("hf", "openai", "vllm") and set(TRAINABLE_ENGINE_KINDS) < set(ENGINE_KINDS)
    for kind in ENGINE_KINDS:
        assert check_engine_kind(kind) == kind
        assert EngineSpec(kind=kind).kind == kind
        assert EvalSettings(benchmarks=["gsm8k"], engine=kind).engine == kind
    for kind in TRAINABLE_ENGINE_KINDS:
        assert validate_config(recipe(kind)).engine.kind == kind


def test_recipes_refuse_a_server_and_read_the_old_name_with_a_warning():
    with pytest.raises(ConfigError, match=r"^config: engine.kind: engine 'openai' cannot be trained"):
        validate_config(recipe("openai"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert validate_config(recipe("embedded")).engine.kind == "hf"
    assert any("'embedded' is now called 'hf'" in str(w.message) for w in caught)


def test_a_bad_engine_name_is_refused_with_the_names_everywhere():
    with pytest.raises(ValueError, match="unknown engine 'tgi': choose one of hf, openai, vllm"):
        check_engine_kind("tgi")
    with pytest.raises(ConfigError, match=r"engine.kind: must be one of 'hf', 'openai', 'vllm' \(got 'tgi'\)"):
        validate_config(recipe("tgi"))
    with pytest.raises(ValueError, match="cannot be trained"):
        open_trainable_engine(EngineSpec(kind="openai", base_url="http://127.0.0.1:9/v1"))
    runner = CliRunner()
    for command in (["eval", "--bench", "gsm8k", "--engine", "tgi"], ["chat", "--engine", "tgi", "-p", "hi"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2
        assert "tgi" in result.output and "hf, openai, vllm" in result.output
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def protocol_members(protocol) -> dict[str, bool]:
    """Each method a protocol declares (own and inherited), and whether it is a coroutine."""
    names = set().union(*(vars(base).keys() for base in protocol.__mro__ if base not in (object, typing.Protocol,
                                                                                           typing.Generic)))
    return {name: inspect.iscoroutinefunction(getattr(protocol, name)) for name in names
            if not name.startswith("_") and callable(getattr(protocol, name))}


@pytest.mark.parametrize(("engine_class", "trainable"), [(VLLMEngine, True), (OpenAIEngine, False)])
def test_engine_classes_declare_the_contract_they_meet(engine_class, trainable):
    """Checked on the class, since building these needs a GPU or a server."""
    for protocol in (Engine, TrainableEngine) if trainable else (Engine,):
        for name, is_coroutine in protocol_members(protocol).items():
            assert inspect.iscoroutinefunction(getattr(engine_class, name)) == is_coroutine, name
    if not trainable:
        assert not all(hasattr(engine_class, name) for name in protocol_members(TrainableEngine))


def test_the_embedded_engine_is_trainable_and_colocated_only_with_its_own_model(hf_engine):
    assert isinstance(hf_engine, TrainableEngine)
    assert protocol_members(TrainableEngine).keys() >= {"generate", "close", "samples_from", "reseed",
                                                        "update_weights"}
    engine, tokenizer = open_engine(EngineSpec(kind="hf", max_batch_size=2), model=hf_engine.model,
                                    tokenizer=hf_engine.tokenizer)
    try:
        assert tokenizer is hf_engine.tokenizer and engine.samples_from(hf_engine.model)
        assert not engine.samples_from(object())
        engine.reseed(5)
        assert engine.generator.initial_seed() == 5
    finally:
        engine.shutdown()
