"""The checks, in order: for each candidate, the first check that fails gives its pending
reason (docs/dispatch.md, "Checks").

What must live here: the table of checks 0..10 (number, what must hold, the reasons given
when it fails, whether a failure holds a StrictFIFO queue), in the order the planner applies
them. It is the one list the planner, ``PendingReason`` and docs/dispatch.md's Checks table
follow; ``tests/test_plan_package.py`` keeps the three equal.

The checks are data, not functions: ``planner.admit`` applies them inline, one commented
block per check (``# 2: ...``), because a function call per check per candidate made that
loop 15-20% slower at 100k queued operations (docs/benchmarks.md). Change a check there and
here together.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.core.plan.model import PendingReason

_R = PendingReason


@dataclass(frozen=True, slots=True)
class Check:
    number: int
    holds: str  # what must hold for the candidate to go on (Markdown, as in the docs)
    reasons: tuple[PendingReason, ...]  # given when it fails (``fails``: how, in the docs)
    fails: str  # the docs' "reason when it fails" cell
    holds_head: bool = False  # StrictFIFO: later candidates of the queue wait behind it


CHECKS: tuple[Check, ...] = (
    Check(
        0,
        "the queue's cluster could be read this cycle (a fleet queue: one of its clusters)",
        (_R.CLUSTER_UNREACHABLE,),
        "`ClusterUnreachable`",
    ),
    Check(1, "queue not `paused`", (_R.QUEUE_PAUSED,), "`QueuePaused`"),
    Check(2, "`isApproved`", (_R.AWAITING_APPROVAL,), "`AwaitingApproval`"),
    Check(
        3,
        "DAG dependencies all `Succeeded`",
        (_R.WAITING_FOR_DEPENDENCIES, _R.UPSTREAM_FAILED),
        "`WaitingForDependencies`, or `UpstreamFailed` when one failed",
    ),
    Check(
        4,
        "the op's request, alone, fits within every quota of its queue",
        (_R.EXCEEDS_QUOTA,),
        "`ExceedsQuota`",
    ),
    Check(
        5,
        "StrictFIFO queue: no earlier op of this queue was held back by 6, 7, 9 or 10 this cycle",
        (_R.WAITING_BEHIND_HEAD,),
        "`WaitingBehindHead`",
    ),
    Check(
        6,
        "queue active count (including dispatches earlier in this plan) < `concurrency`",
        (_R.QUEUE_CONCURRENCY_LIMIT,),
        "`QueueConcurrencyLimit`",
        holds_head=True,
    ),
    Check(
        7,
        "for each resource in the quota: used + request ≤ quota",
        (_R.QUOTA_EXCEEDED,),
        "`QuotaExceeded`, naming the resource",
        holds_head=True,
    ),
    Check(
        8,
        "active children of its workflow < workflow `concurrency`",
        (_R.WORKFLOW_PARALLELISM,),
        "`WorkflowParallelism`",
    ),
    Check(
        9,
        "cluster active count < cluster `concurrency` (when set; a fleet queue weighs it in 10)",
        (_R.CLUSTER_CONCURRENCY_LIMIT,),
        "`ClusterConcurrencyLimit`",
        holds_head=True,
    ),
    Check(
        10,
        "fleet queue: a listed cluster is readable, under its `concurrency` and "
        "`clusterQuota`; the first whose free capacity fits the request is chosen, else the "
        "first under quota (with `requireCapacity`: it waits)",
        (_R.NO_CLUSTER_UNDER_QUOTA, _R.NO_CLUSTER_HAS_CAPACITY),
        "`NoClusterUnderQuota`, or `NoClusterHasCapacity` when it requires capacity",
        holds_head=True,
    ),
)
