"""The dispatch planner: apply queue controls to the compiled operations.

Pure, in the style of Nomad's ``Compute()``: it takes the compiled config, the observed phase
of each operation and the clock, and returns a :class:`Plan` (what to dispatch now, what waits
and why, what to stop). It does no I/O; the runtime executes the plan. The steps and checks
match ``docs/dispatch.md``.

The package, one concern a module (each says what must live in it):

- ``model``: the plan and its parts, the reasons, the blocks and what would admit them;
- ``checks``: the table of checks 0..11, in order (the docs' Checks table);
- ``planner``: ``plan_dispatch`` and ``plan_repo``, in numbered steps, and the admission
  loop that applies the checks;
- ``groups``: the queues in groups the planner couples, and ``PlanCache``: a cycle
  replans only the groups whose inputs changed (the same plan); the one union-find;
- ``dependencies``: check 3's DAG walk (``UpstreamFailed``, transitively);
- ``flavors``: which of a queue's flavors an operation may use, and check 8's choice;
- ``cohorts``: check 8 for a cohort's member, step 4b (borrowing and fair sharing),
  borrowed and lent;
- ``fleet``: check 10, a fleet queue's choice of cluster (capacity, per-cluster caps);
- ``partitions``: the repo's independent groups of queues and clusters (one shard each),
  and the repo a shard decides over;
- ``explain``: pending entries and queue summaries against the final counters;
- ``state``: the counters the planner updates while it plans (private to the planner);
- ``units``: quantities as exact integers (requests round up, quotas down);
- ``ledger``: prices, budget windows and the ledger of finished runs (docs/budgets.md);
- ``whatif``: the planner's state kept between admissions, runs released from it, and its
  revert (the simulations' state);
- ``estimate``: when each pending operation will be dispatched, p50 and p90;
- ``history``: a recorded history replayed under a config (``plan --base --replay``), two
  replays compared per queue, and the budget burn forecast.

Only the names below are the package's interface.
"""

from reconciler.core.plan.flavors import held_flavor
from reconciler.core.plan.model import (
    BACKEND_APIS,
    MAX_LISTED,
    REASON_TRAITS,
    Admit,
    AdmitWhen,
    ApprovalBlock,
    BackendUnavailableBlock,
    BehindHeadBlock,
    BlockedBy,
    BorrowingNotAllowedBlock,
    BudgetBlock,
    BudgetSummary,
    ClusterUnreachableBlock,
    CohortLimitBlock,
    ConcurrencyBlock,
    DependenciesBlock,
    DependencyState,
    Dispatch,
    ExceedsQuotaBlock,
    FairShareBlock,
    FlavorsQuotaBlock,
    FlavorUsage,
    FleetBlock,
    FleetMember,
    FleetSlice,
    LedgerBlock,
    LentQuotaBlock,
    MaxPodsBlock,
    MemberState,
    NoEligibleFlavorBlock,
    Pending,
    PendingReason,
    Plan,
    PlanInputError,
    PruneRefusal,
    QueuePausedBlock,
    QueueSummary,
    QuotaBlock,
    ReasonTraits,
    Shortfall,
    Stop,
    StopReason,
    UpstreamFailedBlock,
    numbered,
)
from reconciler.core.plan.planner import (
    Admission,
    QueueAdmission,
    admit_dispatch,
    plan_dispatch,
    plan_repo,
)

__all__ = [
    "BACKEND_APIS",
    "MAX_LISTED",
    "REASON_TRAITS",
    "Admission",
    "Admit",
    "AdmitWhen",
    "ApprovalBlock",
    "BackendUnavailableBlock",
    "BehindHeadBlock",
    "BlockedBy",
    "BorrowingNotAllowedBlock",
    "BudgetBlock",
    "BudgetSummary",
    "ClusterUnreachableBlock",
    "CohortLimitBlock",
    "ConcurrencyBlock",
    "DependenciesBlock",
    "DependencyState",
    "Dispatch",
    "ExceedsQuotaBlock",
    "FairShareBlock",
    "FlavorUsage",
    "FlavorsQuotaBlock",
    "FleetBlock",
    "FleetMember",
    "FleetSlice",
    "LedgerBlock",
    "LentQuotaBlock",
    "MaxPodsBlock",
    "MemberState",
    "NoEligibleFlavorBlock",
    "Pending",
    "PendingReason",
    "Plan",
    "PlanInputError",
    "PruneRefusal",
    "QueueAdmission",
    "QueuePausedBlock",
    "QueueSummary",
    "QuotaBlock",
    "ReasonTraits",
    "Shortfall",
    "Stop",
    "StopReason",
    "UpstreamFailedBlock",
    "admit_dispatch",
    "held_flavor",
    "numbered",
    "plan_dispatch",
    "plan_repo",
]
