"""Git for tests: commands with a fixed identity and, when given, a fixed date."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

IDENTITY = {
    "GIT_AUTHOR_NAME": "human",
    "GIT_AUTHOR_EMAIL": "human@example.com",
    "GIT_COMMITTER_NAME": "human",
    "GIT_COMMITTER_EMAIL": "human@example.com",
}
ENV = {**os.environ, **IDENTITY}  # for a subprocess of git of its own


def git(cwd: Path, *args: str, when: int | None = None) -> str:
    """``git ARGS`` in ``cwd``, as a fixed identity (at ``when``, epoch seconds, if given);
    its output, stripped. A failure raises ``CalledProcessError``."""
    env = {**os.environ, **IDENTITY}
    if when is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"{when} +0000"
    out = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)
    return out.stdout.decode().strip()


def commit_and_push(work: Path, message: str, when: int | None = None) -> str:
    """Commit everything in ``work`` and push it to ``origin``'s main; the new commit."""
    git(work, "add", "-A")
    git(work, "commit", "-qm", message, when=when)
    git(work, "push", "-q", "origin", "HEAD:main")
    return git(work, "rev-parse", "HEAD")
