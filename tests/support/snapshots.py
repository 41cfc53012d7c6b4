"""Config repos as the core sees them (``RepoSnapshot``), built in memory."""

from __future__ import annotations

from reconciler.core.types import RepoFile, RepoSnapshot


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
