"""The checks, in order: for each candidate, the first check that fails gives its pending
reason (docs/dispatch.md, "Checks").

What must live here: the table of checks 0..11 (number, what must hold, the reasons given
when it fails; whether a failure holds a StrictFIFO queue is its reasons' trait,
``model.REASON_TRAITS``), in the order the planner applies them. It is the one list the
planner, ``PendingReason`` and docs/dispatch.md's Checks table follow;
``tests/core/test_plan_package.py`` keeps the three equal.

The checks are data, not functions: ``planner.admit`` applies them inline, one commented
block per check (``# 2: ...``), because a function call per check per candidate made that
loop 15-20% slower at 100k queued operations (docs/benchmarks.md). Change a check there and
here together.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.core.plan.model import REASON_TRAITS, PendingReason

_R = PendingReason


@dataclass(frozen=True, slots=True)
class Check:
    number: int
    holds: str  # what must hold for the candidate to go on (Markdown, as in the docs)
    reasons: tuple[PendingReason, ...]  # given when it fails (``fails``: how, in the docs)
    fails: str  # the docs' "reason when it fails" cell

    @property
    def holds_head(self) -> bool:
        """StrictFIFO: later candidates of the queue wait behind it (its reasons' trait)."""
        return all(REASON_TRAITS[r].holds_head for r in self.reasons)


CHECKS: tuple[Check, ...] = (
    Check(
        0,
        "the queue's cluster could be read this cycle, and serves the op's "
        "`run.distributed.backend` (the PyTorchJob CRD for `pytorchjob`); a fleet queue: one "
        "of its clusters",
        (_R.CLUSTER_UNREACHABLE, _R.BACKEND_UNAVAILABLE),
        "`ClusterUnreachable`, or `BackendUnavailable` when the backend's API is not served",
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
        "the op's whole request (every replica), alone, fits within every quota and the "
        "`maxPods` of its queue; a queue with flavors: within those of one flavor whose "
        "`nodeLabels` the op's own nodeSelector and required node affinity do not contradict",
        (_R.EXCEEDS_QUOTA, _R.NO_ELIGIBLE_FLAVOR),
        "`ExceedsQuota`, or `NoEligibleFlavor` when the op may use none of its queue's flavors",
    ),
    Check(
        5,
        "StrictFIFO queue: no earlier op of this queue was held back by 6, 7, 8, 10 or 11 "
        "this cycle",
        (_R.WAITING_BEHIND_HEAD,),
        "`WaitingBehindHead`",
    ),
    Check(
        6,
        "queue active count (including dispatches earlier in this plan) < `concurrency`",
        (_R.QUEUE_CONCURRENCY_LIMIT,),
        "`QueueConcurrencyLimit`",
    ),
    Check(
        7,
        "queue active pods (every replica, including dispatches earlier in this plan) + the "
        "op's replicas ≤ `maxPods` (when set)",
        (_R.MAX_PODS_REACHED,),
        "`MaxPodsReached`",
    ),
    Check(
        8,
        "for each resource in the quota: used + the op's whole request (every replica) ≤ quota "
        "(in a cohort: see Cohorts); a queue with flavors: the first eligible flavor, in order, "
        "for which this holds is assigned (see Flavors)",
        (
            _R.QUOTA_EXCEEDED,
            _R.WAITING_FOR_LENT_QUOTA,
            _R.BORROWING_NOT_ALLOWED,
            _R.COHORT_LIMIT,
            _R.WAITING_FOR_FAIR_SHARE,
        ),
        "`QuotaExceeded`, naming the resource (and each flavor tried); in a cohort "
        "`WaitingForLentQuota`, `BorrowingNotAllowed`, `CohortLimit` or `WaitingForFairShare`",
    ),
    Check(
        9,
        "active children of its workflow < workflow `concurrency`",
        (_R.WORKFLOW_PARALLELISM,),
        "`WorkflowParallelism`",
    ),
    Check(
        10,
        "single-cluster queue: cluster active count < cluster `concurrency` (when set). Fleet "
        "queue: a listed cluster is readable, serves the op's backend, is under its "
        "`concurrency` and the queue's `clusterQuota`; the first whose free capacity fits the "
        "whole request (every replica) is chosen, else the first under quota (with "
        "`requireCapacity`: it waits)",
        (_R.CLUSTER_CONCURRENCY_LIMIT, _R.NO_CLUSTER_UNDER_QUOTA, _R.NO_CLUSTER_HAS_CAPACITY),
        "`ClusterConcurrencyLimit`; a fleet queue: `NoClusterUnderQuota`, or "
        "`NoClusterHasCapacity` when it requires capacity",
    ),
    Check(
        11,
        "queue `budget`: spent + committed + the op's reservation (at the prices of the cluster "
        "it goes to) ≤ limit in the window, and its ledger can be read",
        (_R.BUDGET_EXCEEDED, _R.LEDGER_UNREADABLE),
        "`BudgetExceeded`; `LedgerUnreadable` when the ledger cannot be read",
    ),
)
