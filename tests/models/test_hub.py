"""Models by hub id, resolved through huggingface_hub into a cache laid out here (never the hub),
and every bad model spec refused in one line before anything loads.

The hub's own answers to a missing and to a gated model come from a stand-in endpoint on
localhost (``HF_ENDPOINT``) that answers as the hub does: the status code and the
``X-Error-Code`` header from which huggingface_hub raises its errors."""

import http.server
import json
import shutil
import subprocess
import sys
import threading

import huggingface_hub
import pytest

from rstar2.models.hub import ModelNotFound
from rstar2.models.loading import load_model, load_tokenizer, loadable_model_dir, resolve_model_dir
from tests.families import FAKE_COMMIT, install_in_hf_cache

REPO_ID = "rstar2-test/tiny-qwen3"


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An empty HF cache in this test's folder, offline (as every test is)."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return cache


def test_a_hub_id_resolves_offline_to_its_cached_snapshot(hf_cache, tiny_models):
    snapshot = install_in_hf_cache(hf_cache, REPO_ID, tiny_models["qwen3"])
    assert resolve_model_dir(REPO_ID) == snapshot
    assert resolve_model_dir(f"{REPO_ID}@main") == snapshot
    assert resolve_model_dir(f"{REPO_ID}@{FAKE_COMMIT}") == snapshot  # pinned to a commit
    model = load_model(REPO_ID)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert load_tokenizer(REPO_ID).chat_template == load_tokenizer(tiny_models["qwen3"]).chat_template


def test_a_pinned_revision_is_that_revision(hf_cache, tiny_models):
    older = "fedcba9876543210fedcba9876543210fedcba98"
    install_in_hf_cache(hf_cache, REPO_ID, tiny_models["qwen2"], commit=older)
    newer = install_in_hf_cache(hf_cache, REPO_ID, tiny_models["qwen3"])  # refs/main -> newer
    assert resolve_model_dir(REPO_ID) == newer
    assert json.loads((resolve_model_dir(f"{REPO_ID}@{older}") / "config.json").read_text())["model_type"] == "qwen2"


def test_offline_with_an_empty_cache_is_one_line(hf_cache):
    with pytest.raises(ModelNotFound) as error:
        resolve_model_dir(REPO_ID)
    message = str(error.value)
    assert "\n" not in message and "HF_HUB_OFFLINE" in message and str(hf_cache) in message
    assert f"hf download {REPO_ID}" in message


def test_a_snapshot_with_only_the_tokenizer_has_no_weights_to_load(hf_cache, tiny_models):
    """A tokenizer-only fetch (what --engine openai needs) does not make the model loadable."""
    files = ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
    install_in_hf_cache(hf_cache, REPO_ID, tiny_models["qwen3"], files=files)
    assert load_tokenizer(REPO_ID).eos_token == "<|im_end|>"
    with pytest.raises(ModelNotFound, match=r"no weights \(\*\.safetensors\)"):
        resolve_model_dir(REPO_ID)


def test_a_local_folder_without_weights_is_refused(tmp_path, tiny_models):
    folder = tmp_path / "no-weights"
    shutil.copytree(tiny_models["qwen2"], folder, ignore=shutil.ignore_patterns("*.safetensors"))
    assert resolve_model_dir(folder, weights=False) == folder  # its tokenizer is usable
    with pytest.raises(ModelNotFound, match="no weights"):
        resolve_model_dir(folder)


def test_an_unsupported_architecture_is_refused_before_loading(tmp_path, tiny_models):
    folder = tmp_path / "gpt2"
    shutil.copytree(tiny_models["qwen2"], folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ModelNotFound) as error:
        loadable_model_dir(folder)
    message = str(error.value)
    assert "'gpt2' model (GPT2LMHeadModel)" in message and "Qwen3" in message and "\n" not in message
    assert resolve_model_dir(folder) == folder  # vLLM, which runs gpt2, is handed the folder


class FakeHub(http.server.BaseHTTPRequestHandler):
    """The hub's answers for two repositories: ``rstar2-test/gated`` exists but its files need
    accepted terms (403, GatedRepo); anything else does not exist (404, RepoNotFound)."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path.startswith("/api/models/rstar2-test/gated/revision/"):
            return self.reply(200, {"id": "rstar2-test/gated", "sha": FAKE_COMMIT, "private": False,
                                    "gated": "manual", "siblings": [{"rfilename": "config.json"}]})
        if self.path.startswith("/api/models/rstar2-test/gated/tree/"):
            return self.reply(200, [{"type": "file", "path": "config.json", "size": 2, "oid": "0" * 40}])
        if "/rstar2-test/gated/" in self.path:
            return self.reply(403, {"error": "Access to model rstar2-test/gated is restricted."}, "GatedRepo")
        return self.reply(404, {"error": "Repository not found"}, "RepoNotFound")

    do_HEAD = do_GET

    def reply(self, status: int, body, error_code: str | None = None):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if error_code:
            self.send_header("X-Error-Code", error_code)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def online_hub(hf_cache, monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    endpoint = f"http://127.0.0.1:{server.server_port}"
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(huggingface_hub.constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    yield
    server.shutdown()


def test_a_hub_id_that_does_not_exist_is_one_line(online_hub):
    with pytest.raises(ModelNotFound) as error:
        resolve_model_dir("rstar2-test/no-such-model")
    assert str(error.value).startswith("rstar2-test/no-such-model: no such model on the Hugging Face hub")
    assert "\n" not in str(error.value)


def test_a_gated_model_says_how_to_get_access(online_hub):
    with pytest.raises(ModelNotFound) as error:
        resolve_model_dir("rstar2-test/gated")
    message = str(error.value)
    assert "gated" in message and "https://huggingface.co/rstar2-test/gated" in message
    assert "HF_TOKEN" in message and "\n" not in message


def test_the_cli_takes_a_hub_id_and_refuses_a_missing_one_in_one_line(tmp_path, tiny_models):
    """Environment variables as a user sets them, in a fresh process: HF_HUB_CACHE names the
    cache, HF_HUB_OFFLINE=1 (set for every test) keeps it off the network."""
    cache = tmp_path / "hf-cache"
    install_in_hf_cache(cache, REPO_ID, tiny_models["qwen3"])
    env = {**__import__("os").environ, "HF_HUB_CACHE": str(cache)}
    command = [sys.executable, "-m", "rstar2", "chat", "--no-tools", "--device", "cpu",
               "--max-tokens", "16", "--temperature", "0", "--prompt", "What is 6 * 7?"]
    answered = subprocess.run([*command, "--model", REPO_ID], env=env, capture_output=True, text=True,
                              timeout=120)
    assert answered.returncode == 0, answered.stderr
    assert "model" in answered.stdout  # the model's panel
    missing = subprocess.run([*command, "--model", "rstar2-test/missing"], env=env, capture_output=True,
                             text=True, timeout=120)
    assert missing.returncode == 2
    errors = [line for line in missing.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "rstar2-test/missing is not in the Hugging Face cache" in errors[0]
    assert "Traceback" not in missing.stderr
