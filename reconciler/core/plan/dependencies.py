"""Check 3's DAG walk: the state of each dependency, and which queued operations will never
run because something upstream failed.

What must live here: how a dependency's phase is read (observed, else ``Queued`` when it is
in the repo, else ``Missing``), the transitive ``UpstreamFailed`` rule of docs/dispatch.md
(check 3), and its memo. It reads the indexed inputs and never changes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconciler.core.plan.model import DependencyState, PendingReason
from reconciler.core.types import CompiledOperation, ObservedOperation, Phase


class Dependencies:
    """The dependency states of the operations of one plan."""

    __slots__ = ("doomed", "ops", "seen")

    def __init__(
        self, seen: Mapping[str, ObservedOperation], ops: Mapping[str, CompiledOperation]
    ) -> None:
        self.seen = seen
        self.ops = ops
        self.doomed: dict[str, bool] = {}

    def phase_of(self, dep: str) -> str:
        o = self.seen.get(dep)
        if o is not None:
            return o.phase.value
        return Phase.QUEUED.value if dep in self.ops else "Missing"

    def never_runs(self, oid: str, trail: frozenset[str] = frozenset()) -> bool:
        """A queued op whose upstream failed, was stopped, or itself never runs."""
        known = self.doomed.get(oid)
        if known is not None:
            return known
        op = self.ops.get(oid)
        o = self.seen.get(oid)
        result = False
        if op is not None and (o is None or o.phase is Phase.QUEUED) and oid not in trail:
            inner = trail | {oid}
            for dep in op.dependencies:
                p = self.phase_of(dep)
                if p in (Phase.FAILED, Phase.STOPPED) or (
                    p == Phase.QUEUED and self.never_runs(dep, inner)
                ):
                    result = True
                    break
        if not trail:
            self.doomed[oid] = result
        return result

    def block(self, op: CompiledOperation) -> tuple[PendingReason, Any] | None:
        """Check 3: ``None`` when every dependency has succeeded, else the reason and the
        ``DependencyState`` tuple that explains it."""
        states = [DependencyState(d, self.phase_of(d)) for d in op.dependencies]
        failed = tuple(
            s if s.phase != Phase.QUEUED else DependencyState(s.operation, "UpstreamFailed")
            for s in states
            if s.phase in (Phase.FAILED, Phase.STOPPED)
            or (s.phase == Phase.QUEUED and self.never_runs(s.operation))
        )
        if failed:
            return PendingReason.UPSTREAM_FAILED, failed
        waiting = tuple(s for s in states if s.phase != Phase.SUCCEEDED)
        if waiting:
            return PendingReason.WAITING_FOR_DEPENDENCIES, waiting
        return None
