"""Publish each cycle's status to the status branch: at most one commit per cycle, and
only when something changed."""

from __future__ import annotations

import logging

from reconciler.adapters.git import GitSyncError, StatusBranch
from reconciler.core.cycle import Memory, memory_from_status
from reconciler.core.plan import Plan
from reconciler.core.status import (
    ClusterStatus,
    PhaseMemo,
    StatusReason,
    read_status,
    render_status,
    status_changes,
    summarize_cycle,
)
from reconciler.core.types import CompiledRepo
from reconciler.runtime.cycle import CycleResult

log = logging.getLogger("reconciler.status")


class StatusPublisher:
    def __init__(self, branch: StatusBranch) -> None:
        self.branch = branch
        self._files: dict[str, bytes] | None = None  # what the branch holds, as we wrote it
        self.commits = 0
        self.last_error = ""
        self._phases: PhaseMemo = {}  # each status file's run, by content: parsed once

    def _current(self) -> dict[str, bytes]:
        if self._files is None:
            self._files = self.branch.read()
        return self._files

    def recorded(self) -> Memory:
        """What a previous process recorded, so a workload deleted by hand while we were
        down is ``Stopped`` rather than dispatched again, and a cluster that cannot be read
        keeps its last known phases."""
        return memory_from_status(read_status(self._current()))

    def publish(self, result: CycleResult) -> str | None:
        """Commit the cycle's status if it differs from the branch; the new commit's SHA."""
        compiled, plan = result.compiled, result.plan
        if compiled is None or plan is None:
            return None  # no valid config was ever loaded: nothing to describe yet
        try:
            before = self._current()
            files = render_cycle_status(result, compiled, plan)
            changes = status_changes(before, files)
            if not changes:
                return None
            sha = self.branch.write(changes, summarize_cycle(before, files, self._phases))
        except GitSyncError as exc:
            self.last_error = str(exc)
            self._files = None  # re-read the branch next time
            log.error("status write failed: %s", exc)
            return None
        merged = dict(before)
        for path, content in changes.items():
            if content is None:
                merged.pop(path, None)
            else:
                merged[path] = content
        self._files = merged
        self.last_error = ""
        if sha:
            self.commits += 1
        return sha


def render_cycle_status(
    result: CycleResult, compiled: CompiledRepo, plan: Plan
) -> dict[str, bytes]:
    """Every status file one cycle writes: ``result`` with its config in force and plan."""
    return render_status(
        compiled,
        plan,
        result.states,
        config_error=result.config_errors,
        config_version=result.attempted_version,
        internal_error=result.internal_error,
        failed={
            op: (result.failure_reasons.get(op, StatusReason.DISPATCH_FAILED), error)
            for op, error in result.failed.items()
        },
        clusters=result.decision.cluster_records()
        if result.decision is not None
        else tuple(
            ClusterStatus(name=h.name, reachable=h.reachable, error=h.error)
            for h in result.clusters
        ),
        superseded=result.decision.superseded if result.decision else None,
    )
