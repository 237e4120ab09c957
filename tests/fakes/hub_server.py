"""A stand-in for the Hugging Face hub's write API: the endpoints ``huggingface_hub``'s
``create_repo``, ``create_branch`` and ``upload_folder`` call, answered as the hub answers
them, so that ``rstar2 publish`` meets the real client over real HTTP without the network.

    hub = StandInHub(tokens={"hf_writer": "your-name"})
    with serving(hub.app) as url:              # tests.engines.serving; the hub is url without /v1
        ...                                    # HF_ENDPOINT=<hub>, HF_TOKEN=hf_writer
    hub.repos["your-name/model"].branches["main"]   # {path: bytes} as committed

What it answers, from ``huggingface_hub``'s own source (``hf_api.py``, ``_commit_api.py``):

* ``POST /api/repos/create`` -- ``{name, organization, visibility}``; 409 when the repo exists
  (``exist_ok`` reads that as success), 403 outside the token's own namespace;
* ``GET /api/models/{owner}/{name}`` -- the repo's info (``create_repo`` asks after a 403);
* ``POST /api/models/{owner}/{name}/branch/{branch}`` -- a branch from main; 409 when it exists;
* ``POST /api/models/{owner}/{name}/preupload/{revision}`` -- every file "regular", so its
  content travels base64 in the commit and no LFS or Xet storage is involved;
* ``POST /api/models/{owner}/{name}/commit/{revision}`` -- the ndjson commit: a ``header`` line
  (summary, description), then one ``file`` line per file (``content``, base64).

Every request needs ``Authorization: Bearer <a token of tokens>`` (else 401, the hub's
message). ``refuse_commits`` makes every commit answer that status and message instead.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse


@dataclass
class HubRepo:
    private: bool
    branches: dict[str, dict[str, bytes]] = field(default_factory=lambda: {"main": {}})
    """Each branch's files after its last commit, by path."""
    commits: list[dict] = field(default_factory=list)
    """Every commit: its branch, summary and the paths it wrote."""


class StandInHub:
    """The stand-in's state and its FastAPI ``app`` (module docstring)."""

    def __init__(self, tokens: dict[str, str]):
        self.tokens = tokens
        """Accepted tokens and the user each belongs to."""
        self.repos: dict[str, HubRepo] = {}
        self.refuse_commits: tuple[int, str] | None = None
        self.app = self.build_app()

    def build_app(self) -> FastAPI:
        app = FastAPI()

        @app.middleware("http")
        async def authorised(request: Request, call_next):
            token = request.headers.get("authorization", "").removeprefix("Bearer ")
            if token not in self.tokens:
                return JSONResponse({"error": "Invalid credentials in Authorization header"}, status_code=401)
            request.state.user = self.tokens[token]
            return await call_next(request)

        @app.post("/api/repos/create")
        async def create(request: Request):
            body = await request.json()
            owner = body.get("organization") or request.state.user
            repo_id = f"{owner}/{body['name']}"
            url = f"{str(request.base_url).rstrip('/')}/{repo_id}"
            if owner != request.state.user:
                return JSONResponse({"error": f'You don\'t have the rights to create a model under the '
                                              f'namespace "{owner}"'}, status_code=403)
            if repo_id in self.repos:
                return JSONResponse({"error": "You already created this model repo", "url": url},
                                    status_code=409)
            private = body.get("visibility") == "private" or bool(body.get("private"))
            self.repos[repo_id] = HubRepo(private=private)
            return {"url": url, "name": repo_id}

        @app.get("/api/models/{owner}/{name}")
        async def info(owner: str, name: str):
            repo = self.repos.get(f"{owner}/{name}")
            if repo is None:
                return not_found()
            return {"id": f"{owner}/{name}", "private": repo.private, "sha": head(repo, "main")}

        @app.post("/api/models/{owner}/{name}/branch/{branch}")
        async def branch(owner: str, name: str, branch: str):
            repo = self.repos.get(f"{owner}/{name}")
            if repo is None:
                return not_found()
            if branch in repo.branches:
                return JSONResponse({"error": "Reference already exists"}, status_code=409)
            repo.branches[branch] = dict(repo.branches["main"])
            return {}

        @app.post("/api/models/{owner}/{name}/preupload/{revision}")
        async def preupload(owner: str, name: str, revision: str, request: Request):
            if f"{owner}/{name}" not in self.repos:
                return not_found()
            files = (await request.json())["files"]
            return {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                               "oid": None} for f in files]}

        @app.post("/api/models/{owner}/{name}/commit/{revision}")
        async def commit(owner: str, name: str, revision: str, request: Request):
            repo = self.repos.get(f"{owner}/{name}")
            if repo is None:
                return not_found()
            if revision not in repo.branches:
                return JSONResponse({"error": f"Invalid rev id: {revision}"}, status_code=404,
                                    headers={"X-Error-Code": "RevisionNotFound"})
            if self.refuse_commits is not None:
                status, message = self.refuse_commits
                return JSONResponse({"error": message}, status_code=status)
            lines = [json.loads(line) for line in (await request.body()).splitlines() if line.strip()]
            header = next(line["value"] for line in lines if line["key"] == "header")
            files = {line["value"]["path"]: base64.b64decode(line["value"]["content"])
                     for line in lines if line["key"] == "file"}
            repo.branches[revision].update(files)
            repo.commits.append({"branch": revision, "summary": header["summary"], "paths": sorted(files)})
            oid = head(repo, revision)
            return {"success": True, "commitOid": oid,
                    "commitUrl": f"{str(request.base_url).rstrip('/')}/{owner}/{name}/commit/{oid}"}

        return app


def head(repo: HubRepo, branch: str) -> str:
    """A commit id that changes with the branch's commits, shaped like git's."""
    return hashlib.sha1(f"{branch}:{len(repo.commits)}".encode()).hexdigest()


def not_found() -> JSONResponse:
    return JSONResponse({"error": "Repository not found"}, status_code=404,
                        headers={"X-Error-Code": "RepoNotFound"})
