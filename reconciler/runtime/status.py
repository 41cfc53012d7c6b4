"""Publish each cycle's status to the status branch: at most one commit per cycle, and
only when something changed."""

from __future__ import annotations

import logging

from reconciler.adapters.git import GitSyncError, StatusBranch
from reconciler.core.observe import WorkloadState
from reconciler.core.status import (
    ClusterStatus,
    StatusReason,
    read_status,
    render_status,
    status_changes,
    summarize_cycle,
)
from reconciler.core.types import Phase
from reconciler.runtime.cycle import CycleResult

log = logging.getLogger("reconciler.status")


class StatusPublisher:
    def __init__(self, branch: StatusBranch) -> None:
        self.branch = branch
        self._files: dict[str, bytes] | None = None  # what the branch holds, as we wrote it
        self.commits = 0
        self.last_error = ""

    def _current(self) -> dict[str, bytes]:
        if self._files is None:
            self._files = self.branch.read()
        return self._files

    def recorded_workloads(self) -> dict[str, WorkloadState]:
        """Workloads a previous process recorded, so one deleted by hand while we were down
        is ``Stopped`` rather than dispatched again."""
        out: dict[str, WorkloadState] = {}
        view = read_status(self._current())
        for op_id, rec in view.operations.items():
            if not isinstance(rec.phase, Phase) or rec.phase is Phase.QUEUED:
                continue  # no workload was ever created for it
            if not (rec.workload and rec.cluster and rec.namespace):
                continue
            out[op_id] = WorkloadState(
                operation=op_id,
                generation=rec.generation or 1,
                cluster=rec.cluster,
                namespace=rec.namespace,
                name=rec.workload,
                uid="",
                phase=rec.phase,
                message=rec.message,
                queue=rec.queue,
                spec_hash=rec.spec_hash,
                config_commit=rec.config_commit,
                dispatched_at=rec.dispatched_at,
                started_at=rec.started_at,
                finished_at=rec.finished_at,
                outputs=rec.outputs,
            )
        return out

    def publish(self, result: CycleResult) -> str | None:
        """Commit the cycle's status if it differs from the branch; the new commit's SHA."""
        if result.compiled is None or result.plan is None:
            return None  # no valid config was ever loaded: nothing to describe yet
        try:
            before = self._current()
            files = render_status(
                result.compiled,
                result.plan,
                result.states,
                config_error=result.config_errors,
                config_version=result.attempted_version,
                failed={
                    op: (result.failure_reasons.get(op, StatusReason.DISPATCH_FAILED), error)
                    for op, error in result.failed.items()
                },
                clusters=tuple(
                    ClusterStatus(name=h.name, reachable=h.reachable, error=h.error)
                    for h in result.clusters
                ),
            )
            changes = status_changes(before, files)
            if not changes:
                return None
            sha = self.branch.write(changes, summarize_cycle(before, files))
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
