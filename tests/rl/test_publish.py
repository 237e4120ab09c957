"""`rstar2 publish`: a trained model folder reaches the hub byte for byte through the real
huggingface_hub client, against a stand-in hub on this machine (tests/fakes/hub_server.py); what
cannot be published, and every refusal of the hub, is one line and a non-zero exit."""

import shutil

import pytest
from huggingface_hub import constants
from typer.testing import CliRunner

from rstar2.agent.card import CARD_FILE, new_card, write_card
from rstar2.agent.prompt import PromptConfig
from rstar2.cli import app
from rstar2.sandbox.local import free_port
from tests.engines.serving import serving
from tests.fakes.hub_server import StandInHub

runner = CliRunner()
TOKEN = "hf_writer_token"


@pytest.fixture
def final(tiny_models, tmp_path):
    """A run's final/ folder: a tiny Qwen3's weights, config and tokenizer, and its card."""
    folder = shutil.copytree(tiny_models["qwen3"], tmp_path / "runs" / "tiny" / "final")
    write_card(folder, new_card(PromptConfig(variant="short"), 256, 3, "rstar2 train (tiny)"))
    return folder


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """The stand-in hub as HF_ENDPOINT, with a token of user your-name as HF_TOKEN and no
    token saved by a login on this machine."""
    stand_in = StandInHub(tokens={TOKEN: "your-name"})
    with serving(stand_in.app) as url:
        monkeypatch.setenv("HF_ENDPOINT", url.removesuffix("/v1"))
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        monkeypatch.delenv("HF_OIDC_RESOURCE", raising=False)
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-login" / "token"))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # tests/conftest.py sets it
        yield stand_in


def publish(*args):
    return runner.invoke(app, ["publish", *map(str, args)])


def one_error_line(result, code: int) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    return errors[0]


def test_the_folder_arrives_as_it_is_on_disk(final, hub):
    result = publish(final, "--repo", "your-name/tiny-rstar2", "--private")
    assert result.exit_code == 0, result.output
    local = {p.relative_to(final).as_posix(): p.read_bytes() for p in final.rglob("*") if p.is_file()}
    assert {"config.json", "model.safetensors", CARD_FILE, "tokenizer.json"} <= set(local)
    repo = hub.repos["your-name/tiny-rstar2"]
    assert repo.private and repo.branches["main"] == local
    assert repo.commits == [{"branch": "main", "summary": "Upload final with rstar2", "paths": sorted(local)}]
    assert f"publishing {len(local)} files" in result.output and "to http://127.0.0.1:" in result.output
    assert "published: http://127.0.0.1:" in result.output and "/your-name/tiny-rstar2" in result.output


def test_publishing_again_to_a_new_branch_keeps_the_repo_and_creates_the_branch(final, hub):
    assert publish(final, "--repo", "your-name/tiny-rstar2").exit_code == 0
    (final / CARD_FILE).write_text((final / CARD_FILE).read_text().replace("tiny", "tiny, again"))
    result = publish(final, "--repo", "your-name/tiny-rstar2", "--revision", "second-try",
                     "--message", "after more steps")
    assert result.exit_code == 0, result.output
    repo = hub.repos["your-name/tiny-rstar2"]
    assert not repo.private and set(repo.branches) == {"main", "second-try"}
    assert repo.branches["second-try"][CARD_FILE] == (final / CARD_FILE).read_bytes()
    assert repo.branches["main"][CARD_FILE] != (final / CARD_FILE).read_bytes()
    assert [c["summary"] for c in repo.commits] == ["Upload final with rstar2", "after more steps"]


def test_a_rejected_token_is_one_line(final, hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_expired")
    line = one_error_line(publish(final, "--repo", "your-name/tiny-rstar2"), 1)
    assert "answered 401: Invalid credentials in Authorization header" in line
    assert "HF_TOKEN" in line and "hf auth login" in line
    assert hub.repos == {}


def test_a_namespace_the_token_cannot_write_is_one_line(final, hub):
    line = one_error_line(publish(final, "--repo", "someone-else/tiny-rstar2"), 1)
    assert "answered 403" in line and "write access to someone-else" in line
    assert hub.repos == {}


def test_a_refused_commit_is_one_line(final, hub):
    hub.refuse_commits = (409, "A commit has happened since. Please refresh and try again.")
    line = one_error_line(publish(final, "--repo", "your-name/tiny-rstar2"), 1)
    assert "answered 409: A commit has happened since" in line and "conflict" in line


def test_an_unreachable_hub_is_one_line(final, hub, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    line = one_error_line(publish(final, "--repo", "your-name/tiny-rstar2"), 1)
    assert "cannot reach the hub at http://127.0.0.1:" in line


def test_what_is_not_a_model_rstar2_wrote_is_refused_before_the_hub_is_asked(final, tiny_models, hub,
                                                                             tmp_path):
    checkpoint = tmp_path / "runs" / "tiny" / "checkpoints" / "step_00000001"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.pt").write_bytes(b"weights")
    (checkpoint / "state.json").write_text("{}")
    cases = {
        tmp_path / "runs" / "tinny" / "final": "no such folder",
        checkpoint: "is not a model folder rstar2 wrote (no config.json, weights (*.safetensors), "
                    f"{CARD_FILE} card)",
        tiny_models["qwen3"]: f"is not a model folder rstar2 wrote (no {CARD_FILE} card)",
    }
    for folder, problem in cases.items():
        line = one_error_line(publish(folder, "--repo", "your-name/tiny-rstar2"), 2)
        assert problem in line and "runs/NAME/final" in line
    (final / CARD_FILE).write_text("{}")
    assert "not a model card" in one_error_line(publish(final, "--repo", "your-name/tiny-rstar2"), 2)
    assert hub.repos == {}


def test_what_stands_in_the_way_on_this_side_is_one_line(final, hub, monkeypatch):
    assert "not a hub repo id" in one_error_line(publish(final, "--repo", "tiny-rstar2"), 2)
    assert "--revision" in one_error_line(publish(final, "--repo", "your-name/tiny@dev"), 2)
    monkeypatch.delenv("HF_TOKEN")
    assert "no Hugging Face token: set HF_TOKEN or run `hf auth login`" in one_error_line(
        publish(final, "--repo", "your-name/tiny-rstar2"), 2)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert "HF_HUB_OFFLINE is set" in one_error_line(publish(final, "--repo", "your-name/tiny-rstar2"), 2)
    assert hub.repos == {}
