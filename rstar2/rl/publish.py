"""A trained model folder onto the Hugging Face hub, where others download it by its repo id.

    folder = model_folder("runs/qwen3-1.7b-stage2/final")   # NotPublishable unless rstar2 wrote it
    api = hub_client("your-name/qwen3-1.7b-rstar2")          # NotPublishable: offline, no token
    published = publish_model(api, folder, "your-name/qwen3-1.7b-rstar2", private=True)
    published.commit_url                                    # HubRefused: the hub said no

The folder must be one ``save_policy`` wrote (a run's ``final/``, the demo's ``sft/final``): a
transformers ``config.json``, the weights and the ``rstar2.json`` card that says how the model
was trained to be prompted. That is checked before anything is sent, so a checkpoint directory
or a mistyped path fails at once instead of leaving a half-filled repo behind.

The hub is ``huggingface_hub``'s own client, configured as everywhere else: ``HF_ENDPOINT``
(a mirror or a private hub; read when publishing starts, since ``huggingface_hub`` reads it
only when first imported), the token of ``HF_TOKEN`` or ``hf auth login``. The repo is created
when missing (``private`` applies then; an existing repo keeps its visibility), a branch other
than main likewise, from main; ``upload_folder`` then sends the folder as one commit (a very
large folder as several) with its own progress display.

Every failure is one line: ``NotPublishable`` for what is wrong before the hub is asked (the
folder, the repo id, no token, offline mode), ``HubRefused`` for the hub's answer (a rejected
token, no write access, a conflict) or for a hub that cannot be reached.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import HfApi, constants, get_token
from huggingface_hub.errors import HfHubHTTPError

from rstar2.agent.card import CARD_FILE, CardError, read_card
from rstar2.errors import Rstar2Error
from rstar2.models.hub import split_hub_id

WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
"""The weight files transformers writes (``save_pretrained``: safetensors, or the older
pickled format), sharded or not."""
HTTP_LIBRARIES = ("httpx2", "httpx", "requests", "urllib3")
"""The HTTP libraries ``huggingface_hub`` has been built on, by version: an error of theirs (a
refused connection, a timeout, a broken TLS handshake) means the hub could not be reached."""
REFUSALS = {
    401: "the token was not accepted: set HF_TOKEN to a valid token or run `hf auth login`",
    403: "the token may not write there: use a token with write access to {owner}",
    404: "{repo} was not found: check the repo id",
    409: "the hub refused the change as a conflict with what {repo} holds",
}
"""What the hub's refusals mean for someone publishing, by HTTP status."""


class NotPublishable(Rstar2Error, ValueError):
    """Publishing cannot start: the folder is not a model rstar2 wrote, the repo id is not
    one, there is no token or the hub is switched off (offline mode)."""


class HubRefused(Rstar2Error, RuntimeError):
    """The hub answered with an error, or could not be reached."""

    exit_code = 1  # publishing started, and failed


@dataclass(frozen=True)
class ModelFolder:
    """A model folder checked for publishing, and the files it holds."""

    path: Path
    files: tuple[Path, ...]

    @property
    def size(self) -> int:
        """Bytes of all its files."""
        return sum(file.stat().st_size for file in self.files)


@dataclass(frozen=True)
class Published:
    """Where a publication landed."""

    repo_url: str
    """The repo's page on the hub."""
    commit_url: str
    """The commit that holds the folder (the last one, when it took several)."""


def model_folder(path: str | Path) -> ModelFolder:
    """``path`` as a ``ModelFolder``, or ``NotPublishable`` saying what is missing."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise NotPublishable(f"{path}: no such folder (publish a run's final/ folder, e.g. runs/NAME/final)")
    missing = [what for what, present in (
        ("config.json", (path / "config.json").is_file()),
        ("weights (*.safetensors)", any(any(path.glob(pattern)) for pattern in WEIGHT_PATTERNS)),
        (f"{CARD_FILE} card", (path / CARD_FILE).is_file()),
    ) if not present]
    if missing:
        raise NotPublishable(f"{path} is not a model folder rstar2 wrote (no {', '.join(missing)}): "
                             "publish a run's final/ folder, e.g. runs/NAME/final")
    try:
        read_card(str(path))
    except CardError as error:
        raise NotPublishable(str(error)) from None
    return ModelFolder(path, tuple(sorted(file for file in path.rglob("*") if file.is_file())))


def hub_client(repo: str) -> HfApi:
    """The client to publish ``repo`` with, once nothing on this side stands in the way:
    ``NotPublishable`` for a repo id that is not ``owner/name``, offline mode, or no token."""
    check_repo_id(repo)
    if constants.HF_HUB_OFFLINE:
        raise NotPublishable("HF_HUB_OFFLINE is set: publishing needs the hub; unset it for this command")
    if get_token() is None:
        raise NotPublishable("no Hugging Face token: set HF_TOKEN or run `hf auth login` "
                             "(the token needs write access)")
    return HfApi(endpoint=hub_endpoint())


def publish_model(api: HfApi, folder: ModelFolder, repo: str, *, private: bool = False,
                  revision: str = "main", message: str | None = None) -> Published:
    """Upload ``folder`` with ``api`` (``hub_client``) to the hub repo ``repo`` on branch
    ``revision``, creating the repo and the branch when missing (module docstring)."""
    try:
        repo_url = api.create_repo(repo, private=private, exist_ok=True)
        if revision != constants.DEFAULT_REVISION:
            api.create_branch(repo, branch=revision, exist_ok=True)
        commit = api.upload_folder(repo_id=repo, folder_path=folder.path, revision=revision,
                                   commit_message=message or f"Upload {folder.path.name} with rstar2")
    except HfHubHTTPError as refusal:
        raise HubRefused(refusal_line(refusal.response.status_code, refusal.server_message,
                                      repo, api.endpoint)) from None
    except Exception as failure:
        if not unreachable(failure):
            raise
        raise HubRefused(f"cannot reach the hub at {api.endpoint}: {first_line(failure)}") from None
    return Published(repo_url=str(repo_url), commit_url=commit.commit_url)


def check_repo_id(repo: str) -> None:
    """``NotPublishable`` unless ``repo`` is ``owner/name`` (a revision goes in ``revision``)."""
    parts = split_hub_id(repo)
    if parts is None:
        raise NotPublishable(f"{repo!r} is not a hub repo id: give owner/name, e.g. your-name/my-model")
    if parts[1] is not None:
        raise NotPublishable(f"{repo!r}: a repo id is owner/name; the branch is given on its own "
                             "(--revision)")


def hub_endpoint() -> str | None:
    """``HF_ENDPOINT`` as it is now; None leaves ``huggingface_hub``'s (huggingface.co)."""
    return os.environ.get("HF_ENDPOINT") or None


def refusal_line(status: int, server_message: str | None, repo: str, endpoint: str) -> str:
    """One line for the hub's refusal: its status, what the hub said, what it means."""
    said = f": {first_line(server_message).rstrip('.')}" if server_message else ""
    meaning = REFUSALS.get(status, "")
    return (f"{endpoint} answered {status}{said}"
            + (f"; {meaning.format(repo=repo, owner=repo.split('/')[0])}" if meaning else ""))


def unreachable(failure: BaseException) -> bool:
    """Whether ``failure`` is the hub client failing to reach the hub (``HTTP_LIBRARIES``)."""
    return type(failure).__module__.split(".")[0] in HTTP_LIBRARIES


def first_line(text: object) -> str:
    """The first non-empty line of ``text``: the hub's messages run over several."""
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")
