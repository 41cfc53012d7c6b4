"""The planner's working state: the counters it updates while it plans.

What must live here: the mutable, planner-private state of one ``plan_dispatch`` call (a
queue's candidates, usage and pending entries; the cluster and workflow counters) and the
pending tuples the admission loop (step 4) hands to ``explain.py`` (step 6). Nothing here
leaves the planner: the plan is made of ``model.py``'s frozen values.

A pending tuple is ``(operation id, operation, reason, detail)``; ``detail`` by reason:

- ``ClusterUnreachable``, ``QueuePaused``, ``AwaitingApproval``, ``QueueConcurrencyLimit``:
  ``None`` (the queue says it all);
- ``WaitingForDependencies``, ``UpstreamFailed``: the ``DependencyState`` tuple;
- ``ExceedsQuota``: the indexes of the quota resources the request alone is over;
- ``WaitingBehindHead``: ``(head id, head reason)``;
- ``QuotaExceeded``: ``(resource index, request in units)``;
- ``WorkflowParallelism``, ``ClusterConcurrencyLimit``: the full ``Counter``.
- ``NoClusterUnderQuota``, ``NoClusterHasCapacity``: the ``FleetMember`` tuple (check 10;
  step 6 recomputes it with the whole plan applied).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from reconciler.core.plan.model import PendingReason
from reconciler.core.plan.units import quota_units, request_units, to_decimal
from reconciler.core.types import ClusterSpec, CompiledOperation, QueueSpec

PendingTuple = tuple[str, CompiledOperation, PendingReason, Any]


class QueueState:
    """One queue while planning: its quota in units, its usage (observed, then with this
    plan's dispatches), its candidates and its pending tuples."""

    __slots__ = (
        "active",
        "active0",
        "active_ids",
        "candidates",
        "dispatched",
        "holders",
        "limits",
        "pending",
        "quota",
        "resources",
        "spec",
        "used",
        "used0",
    )

    def __init__(self, spec: QueueSpec) -> None:
        self.spec = spec
        self.resources: tuple[str, ...] = tuple(sorted(spec.quota))
        self.quota: tuple[int, ...] = tuple(quota_units(spec.quota[r]) for r in self.resources)
        self.limits: tuple[tuple[str, Decimal], ...] = tuple(
            (r, to_decimal(u)) for r, u in zip(self.resources, self.quota, strict=True)
        )
        self.used: list[int] = [0] * len(self.resources)
        self.used0: tuple[int, ...] = ()
        self.active = 0
        self.active0 = 0
        self.active_ids: list[str] = []
        # per quota resource: (units, id) of active operations that hold some of it
        self.holders: list[list[tuple[int, str]]] = [[] for _ in self.resources]
        self.candidates: list[tuple[Any, ...]] = []
        self.dispatched = 0
        self.pending: list[PendingTuple] = []

    def request(self, requests: Mapping[str, Decimal]) -> tuple[int, ...]:
        get = requests.get
        out = []
        for r in self.resources:
            v = get(r)
            out.append(0 if v is None else request_units(v))
        return tuple(out)

    def hold(self, op_id: str, req: tuple[int, ...]) -> None:
        self.active += 1
        self.active_ids.append(op_id)
        used = self.used
        for i, amount in enumerate(req):
            if amount:
                used[i] += amount
                self.holders[i].append((amount, op_id))


class Counter:
    """The active operations of a cluster or a workflow, against its limit (if any)."""

    __slots__ = ("active", "ids", "limit")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.active = 0
        self.ids: list[str] = []

    def hold(self, op_id: str) -> None:
        self.active += 1
        self.ids.append(op_id)


class Counters:
    """The cluster counters (one per Cluster, more as operations name others) and the
    workflow counters (one per parent, made when first needed)."""

    __slots__ = ("clusters", "workflows")

    def __init__(self, clusters: Mapping[str, ClusterSpec]) -> None:
        self.clusters: dict[str, Counter] = {
            name: Counter(spec.concurrency) for name, spec in clusters.items()
        }
        self.workflows: dict[str, Counter] = {}

    def cluster(self, name: str) -> Counter:
        c = self.clusters.get(name)
        if c is None:
            c = self.clusters[name] = Counter(None)
        return c

    def workflow(self, parent: str, limit: int | None) -> Counter:
        w = self.workflows.get(parent)
        if w is None:
            w = self.workflows[parent] = Counter(limit)
        return w
