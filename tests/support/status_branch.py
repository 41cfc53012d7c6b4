"""A status branch to read: a Git remote of the template, one cycle written to it, the CLI
run in-process, and a run of cycles whose results the writer tests encode."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from click.testing import CliRunner

from reconciler.adapters.clock import SystemClock
from reconciler.adapters.git import ConfigRepo, StatusBranch
from reconciler.adapters.kube import Kube, KubeError
from reconciler.adapters.repo import snapshot_worktree
from reconciler.cli.main import cli
from reconciler.core.compile import compile_repo
from reconciler.core.decision.schedule import with_ticks
from reconciler.core.plan import plan_repo
from reconciler.core.reporting.status import (
    render_status,
    status_changes,
    summarize_cycle,
)
from reconciler.core.types import ClusterSpec, RepoSnapshot
from reconciler.runtime.cycle import CycleResult, Reconciler
from support.builders import NOW
from support.paths import TEMPLATE


def write_cycle(repo: ConfigRepo, status: StatusBranch) -> str | None:
    compiled = compile_repo(repo.sync())
    assert compiled.valid, compiled.errors
    compiled = with_ticks(compiled, {}, NOW)  # as a cycle at NOW decides over it
    plan = plan_repo(compiled, [], NOW)
    before = status.read()
    after = render_status(compiled, plan, {})
    return status.write(status_changes(before, after), summarize_cycle(before, after))


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def unreachable(spec: ClusterSpec) -> Kube:
    raise KubeError(f"cluster {spec.name} is not there in a unit test")


def results(count: int) -> list[CycleResult]:
    """``count`` cycles, each with a config commit of its own (so each status differs)."""
    base = snapshot_worktree(TEMPLATE)
    feed = iter(replace(base, version=f"c{i}") for i in range(count))

    def source() -> RepoSnapshot:
        return next(feed)

    rec = Reconciler(source, unreachable, SystemClock(), watch=False)
    return [rec.run_once() for _ in range(count)]


class MemoryStatusBranch:
    """A status branch in memory (``StatusBranch``'s read and write): the files as written,
    and each commit's message."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.messages: list[str] = []
        self.last_tip: str | None = None  # StatusBranch's: the tip of the last fetch

    @property
    def commits(self) -> int:
        return len(self.messages)

    def read(self) -> dict[str, bytes]:
        return dict(self.files)

    def write(self, changes: Mapping[str, bytes | None], message: str) -> str:
        for path, content in changes.items():
            if content is None:
                self.files.pop(path, None)
            else:
                self.files[path] = content
        self.messages.append(message)
        return f"sha{len(self.messages)}"
