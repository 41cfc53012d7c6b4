from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.adapters.repo import snapshot_worktree
from reconciler.core.types import RepoFile, RepoSnapshot

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "config-repo-template"


@pytest.fixture(scope="session")
def template() -> RepoSnapshot:
    return snapshot_worktree(TEMPLATE)


def overlay(snapshot: RepoSnapshot, files: dict[str, str | bytes | None]) -> RepoSnapshot:
    """``snapshot`` with files added, replaced, or (``None``) removed."""
    out = dict(snapshot.files)
    for path, content in files.items():
        if content is None:
            out.pop(path, None)
        else:
            data = content.encode() if isinstance(content, str) else content
            out[path] = RepoFile(path, data)
    return RepoSnapshot(out, snapshot.version)


def repo(files: dict[str, str | None]) -> RepoSnapshot:
    return overlay(RepoSnapshot({}), {k: v for k, v in files.items() if v is not None})
