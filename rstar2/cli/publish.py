"""`rstar2 publish FOLDER --repo OWNER/NAME`: a trained model folder onto the Hugging Face hub."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rstar2.cli.app import app


@app.command()
def publish(
    folder: Path = typer.Argument(..., metavar="FOLDER", help="A model folder rstar2 wrote: a "
                                  "run's final/ (runs/NAME/final) or the demo's sft/final."),
    repo: str = typer.Option(..., "--repo", metavar="OWNER/NAME", help="The hub repository, "
                             "created when missing, e.g. your-name/qwen3-1.7b-rstar2."),
    private: bool = typer.Option(False, "--private", help="Create the repository private (an "
                                 "existing one keeps its visibility)."),
    revision: str = typer.Option("main", "--revision", metavar="BRANCH", help="The branch to "
                                 "commit to; created from main when missing."),
    message: Optional[str] = typer.Option(None, "--message", metavar="TEXT", help="The commit "
                                          "message. Default: Upload FOLDER with rstar2."),
) -> None:
    """Publish a trained model to the Hugging Face hub: weights, tokenizer and its rstar2.json
    card, in one commit.

    The hub is HF_ENDPOINT's (default https://huggingface.co; a mirror or a private hub works
    the same way); the token is HF_TOKEN's or the one `hf auth login` saved, and needs write
    access.
    """
    from rstar2.rl.publish import hub_client, model_folder, publish_model

    checked = model_folder(folder)
    api = hub_client(repo)
    typer.echo(f"publishing {len(checked.files)} files ({checked.size / 2**20:.1f} MiB) of "
               f"{checked.path} to {api.endpoint}/{repo} (branch {revision})")
    published = publish_model(api, checked, repo, private=private, revision=revision, message=message)
    typer.echo(f"published: {published.repo_url} (commit {published.commit_url})")
