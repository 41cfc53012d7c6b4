"""Publish each cycle's status to the status branch: only when something changed, and at
most one commit per ``min_interval`` seconds.

Cycles run on events, up to five a second (``runtime/loop.py``); a commit for each would
flood the branch's history and every tool that follows it (an Argo CD or Flux source, a
webhook, a mirror). So a cycle within ``min_interval`` of the last write attempt writes
nothing and says when the next write is due (``due``): the loop runs a cycle then, whose
status has everything the skipped ones had (status is a snapshot, not a log)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from reconciler.adapters.git import GitSyncError, StatusBranch
from reconciler.core.cycle import Memory, memory_from_status
from reconciler.core.plan import Plan
from reconciler.core.status import (
    ClusterStatus,
    PhaseMemo,
    RenderMemo,
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
    def __init__(
        self,
        branch: StatusBranch,
        *,
        min_interval: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.branch = branch
        self.min_interval = min_interval
        self.clock = clock
        self._files: dict[str, bytes] | None = None  # what the branch holds, as we wrote it
        self._last_attempt: float | None = None  # of a write (a commit, or a failed one)
        self.due: float | None = None  # when a write put off by the cadence is due
        self.commits = 0
        self.put_off = 0  # cycles whose status was left to a later one
        self.last_error = ""
        self._rendered: RenderMemo = {}  # each operation's last record and its bytes
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
        now = self.clock()
        last = self._last_attempt
        if last is not None and now < last + self.min_interval:
            self.due = last + self.min_interval
            self.put_off += 1
            return None  # not even rendered: a later cycle's status supersedes this one
        self.due = None
        try:
            before = self._current()
            files = render_cycle_status(result, compiled, plan, self._rendered)
            changes = status_changes(before, files)
            if not changes:
                return None
            self._last_attempt = now  # a failing remote is retried at the cadence too
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
    result: CycleResult, compiled: CompiledRepo, plan: Plan, memo: RenderMemo | None = None
) -> dict[str, bytes]:
    """Every status file one cycle writes: ``result`` with its config in force and plan
    (``memo``: see ``render_status``)."""
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
            ClusterStatus(
                name=h.name,
                reachable=h.reachable,
                error=h.error,
                backends=tuple(sorted(h.backends)),
            )
            for h in result.clusters
        ),
        superseded=result.decision.superseded if result.decision else None,
        gang_timeouts=result.decision.memory.gang_timeouts if result.decision else None,
        ledger=result.decision.memory.ledger if result.decision is not None else None,
        memo=memo,
    )
