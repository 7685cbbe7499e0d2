"""Pushing an exported directory to the Hugging Face Hub through `huggingface_hub`: the repo is created if missing,
the folder uploaded in one commit whose message names the run and the version. `HF_ENDPOINT` and `HF_TOKEN` are
read as huggingface_hub reads them. Every failure (no network, no token, a rejected repo) is a `PushError` with
one line."""

from __future__ import annotations

import os
from pathlib import Path

from swarmnode.errors import ExitCode, SwarmnodeError


class PushError(SwarmnodeError):
    """A push to the Hub failed; the message says why in one line."""

    exit_code = ExitCode.NETWORK


def commit_message(run_id: str, version: int) -> str:
    return f"swarmnode: run {run_id} version {version}"


def push_dir(directory: Path, repo: str, run_id: str, version: int, *, private: bool | None = None) -> str:
    """Upload `directory` to the model repo `repo`; the commit's URL. `PushError` on any failure."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None)
    try:
        api.create_repo(repo, repo_type="model", private=private, exist_ok=True)
        info = api.upload_folder(
            repo_id=repo,
            folder_path=str(directory),
            repo_type="model",
            commit_message=commit_message(run_id, version),
            ignore_patterns=[".*"],
        )
    except Exception as exc:  # connection refused, 401 without a token, 403/404 for a repo not ours...
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PushError(
            f"pushing version {version} to the Hub repo {repo} failed: {type(exc).__name__}: {first}"
        ) from None
    return str(getattr(info, "commit_url", info))
