"""Offline model resolution: the embedded default, GGUF conversion cache, local directories
(hub ids: test_hub.py)."""

import copy
import shutil
import subprocess
import sys

import pytest
from safetensors.torch import load_file

from rstar2.models.loading import (
    ModelNotFound,
    converted_gguf_dir,
    default_gguf_path,
    load_tokenizer,
    resolve_model_dir,
)


def test_default_resolves_to_a_cached_safetensors_copy(hf_engine):
    path = resolve_model_dir("default")
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    assert (path / "tokenizer.json").is_file()
    assert path.name.startswith("SmolLM2-135M-Instruct.Q4_1-")
    assert "quantization_config" not in (path / "config.json").read_text()


def test_a_local_model_directory_is_used_as_is(tiny_models):
    path = tiny_models["llama"]
    assert resolve_model_dir(path) == path
    assert resolve_model_dir(str(path)) == path


def test_unknown_models_fail_with_a_clear_message(tmp_path):
    with pytest.raises(ModelNotFound, match="hub id"):
        resolve_model_dir("no/such/folder")
    with pytest.raises(ModelNotFound, match="no config.json"):
        resolve_model_dir(tmp_path)


@pytest.mark.slow
def test_conversion_into_a_fresh_cache_matches_the_shared_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("RSTAR2_CACHE", str(tmp_path))
    fresh = converted_gguf_dir(default_gguf_path())
    assert fresh.parent == tmp_path / "models"
    assert [p.name for p in fresh.parent.iterdir()] == [fresh.name]  # no staging left behind
    monkeypatch.delenv("RSTAR2_CACHE")
    shared = resolve_model_dir("default")
    a, b = load_file(fresh / "model.safetensors"), load_file(shared / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


def test_a_tokenizer_without_a_pad_token_pads_with_its_end_of_sequence_token(tmp_path, tokenizer):
    """Whether a GGUF's tokenizer comes with a pad token depends on the transformers version;
    batches need one either way."""
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.pad_token = None
    tokenizer.save_pretrained(tmp_path)
    shutil.copy(resolve_model_dir("default") / "config.json", tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert loaded.pad_token == loaded.eos_token and loaded.pad_token_id == tokenizer.eos_token_id


def test_a_mistyped_local_path_is_named_as_one_not_looked_up_on_the_hub(tmp_path, monkeypatch):
    # runs/finall has a hub id's shape (org/name); beside a runs/ folder it is a typo of runs/final
    (tmp_path / "runs" / "final").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotFound) as refused:
        resolve_model_dir("runs/finall")
    message = str(refused.value)
    assert message.startswith("model 'runs/finall' not found: runs/ holds no 'finall'; did you mean runs/final?")
    assert "read as a local path" in message and "hf download" not in message
    result = subprocess.run([sys.executable, "-m", "rstar2", "chat", "--model", "runs/finall", "--prompt", "hi"],
                            capture_output=True, text=True, timeout=120)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1 and "did you mean runs/final?" in errors[0]
    with pytest.raises(ModelNotFound, match="not in the Hugging Face cache"):  # no local org: a hub id
        resolve_model_dir("elsewhere/final")
