"""The reconciler's Prometheus metrics, in a registry of their own (no process-global
state, so two reconcilers in one test process do not collide)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from reconciler.core.plan import Plan
from reconciler.core.reporting.report import Report

# A queue's quota pool: flavor ("" without flavors), quota, then used, borrowed and lent
# with the plan's dispatches, per resource.
QuotaPool = tuple[
    str,
    Mapping[str, Decimal],
    Mapping[str, Decimal],
    Mapping[str, Decimal],
    Mapping[str, Decimal],
]

CYCLE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.queue_active = Gauge(
            "reconciler_queue_active_operations",
            "Operations dispatched and not finished, per queue (this cycle's dispatches included).",
            ("queue", "cluster"),
            registry=r,
        )
        self.queue_pending = Gauge(
            "reconciler_queue_pending_operations",
            "Operations waiting in the queue after this plan.",
            ("queue", "cluster"),
            registry=r,
        )
        self.queue_pods = Gauge(
            "reconciler_queue_active_pods",
            "Pods of the queue's active operations, every replica counted, with this plan's "
            "dispatches (what maxPods limits).",
            ("queue", "cluster"),
            registry=r,
        )
        self.quota_used = Gauge(
            "reconciler_queue_quota_used",
            "Quota in use per queue and resource, with this plan's dispatches; per flavor for "
            'a queue with flavors (flavor "" without).',
            ("queue", "resource", "flavor"),
            registry=r,
        )
        self.quota_limit = Gauge(
            "reconciler_queue_quota_limit",
            "Quota limit per queue and resource (its own, nominal quota); per flavor for a "
            'queue with flavors (flavor "" without).',
            ("queue", "resource", "flavor"),
            registry=r,
        )
        self.quota_borrowed = Gauge(
            "reconciler_queue_quota_borrowed",
            "Quota a queue uses above its own, borrowed from its cohort, with this plan's "
            "dispatches.",
            ("queue", "resource", "flavor"),
            registry=r,
        )
        self.quota_lent = Gauge(
            "reconciler_queue_quota_lent",
            "A queue's own quota in use by other queues of its cohort, with this plan's "
            "dispatches.",
            ("queue", "resource", "flavor"),
            registry=r,
        )
        self.budget_limit = Gauge(
            "reconciler_queue_budget_limit",
            "A budgeted queue's limit per window, in its unit (a currency or resource-hours).",
            ("queue", "unit"),
            registry=r,
        )
        self.budget_spent = Gauge(
            "reconciler_queue_budget_spent",
            "What the queue's finished runs spent in the current window (the ledger).",
            ("queue", "unit"),
            registry=r,
        )
        self.budget_committed = Gauge(
            "reconciler_queue_budget_committed",
            "What the queue's active runs committed in the current window (cost so far and "
            "to their timeout), with this plan's dispatches.",
            ("queue", "unit"),
            registry=r,
        )
        self.dispatched = Counter(
            "reconciler_dispatched",
            "Workloads created (dispatched), per queue and cluster.",
            ("queue", "cluster"),
            registry=r,
        )
        self.git_sync_errors = Counter(
            "reconciler_git_sync_errors",
            "Failed fetches or status pushes of the config repo.",
            registry=r,
        )
        self.internal_errors = Counter(
            "reconciler_internal_errors",
            "Cycles whose config could not be compiled because of a bug in the reconciler "
            "(not a config error); the last good config stayed in force.",
            registry=r,
        )
        self.cycle_duration = Histogram(
            "reconciler_cycle_duration_seconds",
            "Duration of one reconcile cycle (compile, observe, plan, converge, status).",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.cycle_triggers = Counter(
            "reconciler_cycle_triggers",
            "Requests for a cycle before its interval, by trigger (a Job finished, failed or "
            "was deleted; a watch relisted; a new config; leadership gained; a status write "
            "due). Requests within the debounce share one cycle.",
            ("trigger",),
            registry=r,
        )
        self.webhook_requests = Counter(
            "reconciler_webhook_requests",
            "Git webhook requests on /api/webhook, by sender (github, gitlab, generic, "
            "unknown) and result (triggered: a push to the branch followed; ignored: another "
            "branch, a ping; unauthorized; invalid).",
            ("provider", "result"),
            registry=r,
        )
        self.config_commit = Gauge(
            "reconciler_config_commit_info",
            "The config commit in force (value 1).",
            ("commit",),
            registry=r,
        )
        self.cluster_up = Gauge(
            "reconciler_cluster_up",
            "1 when the last cycle could read the cluster, 0 when it could not.",
            ("cluster",),
            registry=r,
        )
        self.cluster_errors = Counter(
            "reconciler_cluster_errors",
            "Cycles in which the cluster could not be read.",
            ("cluster",),
            registry=r,
        )
        self.notifications_sent = Counter(
            "reconciler_notifications_sent",
            "Notifications and commit statuses delivered (a 2xx answer), by kind "
            "(notification, commit_status).",
            ("kind",),
            registry=r,
        )
        self.notifications_dropped = Counter(
            "reconciler_notifications_dropped",
            "Notifications and commit statuses never delivered, by kind and reason (queue_full: "
            "the queue was full; gave_up: every attempt failed, or its secret could not be "
            "read; refused: a 4xx answer, or a URL at a cluster's API server; shutdown: "
            "still queued at the stop).",
            ("kind", "reason"),
            registry=r,
        )
        self.leader = Gauge(
            "reconciler_leader", "1 while this replica holds the leader Lease.", registry=r
        )
        self._queues: set[tuple[str, str]] = set()
        self._quotas: set[tuple[str, ...]] = set()
        self._budgets: set[tuple[str, str]] = set()

    def observe_report(self, shown: Report) -> None:
        """Set the queue gauges from a cycle's report: what its states hold (a failed
        create holds nothing; a follower's plan is not carried out)."""
        self.observe_plan(shown.plan)

    def observe_plan(self, plan: Plan) -> None:
        """Set the queue gauges from a plan, its dispatches carried out (a report's plan:
        what its states hold); queues and resources no longer in the plan are removed, not
        left at their last value."""
        queues: set[tuple[str, str]] = set()
        quotas: set[tuple[str, ...]] = set()
        budgets: set[tuple[str, str]] = set()
        for q in plan.queues:
            if q.budget is not None:
                key = (q.name, q.budget.unit)
                budgets.add(key)
                self.budget_limit.labels(*key).set(float(q.budget.limit))
                self.budget_spent.labels(*key).set(float(q.budget.spent))
                self.budget_committed.labels(*key).set(float(q.budget.committed_after))
            queues.add((q.name, q.cluster))
            self.queue_active.labels(q.name, q.cluster).set(q.active + q.dispatching)
            self.queue_pending.labels(q.name, q.cluster).set(q.pending)
            self.queue_pods.labels(q.name, q.cluster).set(q.pods_after)
            # one series per resource, or (a queue with flavors) per flavor and resource
            pools: tuple[QuotaPool, ...] = tuple(
                (f.name, f.quota, f.used_after, f.borrowed_after, f.lent_after) for f in q.flavors
            ) or (("", q.quota, q.used_after, q.borrowed_after, q.lent_after),)
            for flavor, quota, used, borrowed, lent in pools:
                for resource, limit in quota.items():
                    pool = (q.name, resource, flavor)
                    quotas.add(pool)
                    self.quota_used.labels(*pool).set(float(used.get(resource, 0)))
                    self.quota_limit.labels(*pool).set(float(limit))
                    self.quota_borrowed.labels(*pool).set(float(borrowed.get(resource, 0)))
                    self.quota_lent.labels(*pool).set(float(lent.get(resource, 0)))
        _remove(self.queue_active, self._queues - queues)
        _remove(self.queue_pending, self._queues - queues)
        _remove(self.queue_pods, self._queues - queues)
        _remove(self.quota_used, self._quotas - quotas)
        _remove(self.quota_limit, self._quotas - quotas)
        _remove(self.quota_borrowed, self._quotas - quotas)
        _remove(self.quota_lent, self._quotas - quotas)
        for gauge in (self.budget_limit, self.budget_spent, self.budget_committed):
            _remove(gauge, self._budgets - budgets)
        self._queues, self._quotas, self._budgets = queues, quotas, budgets

    def count_dispatched(self, queue: str, cluster: str, count: int = 1) -> None:
        self.dispatched.labels(queue, cluster).inc(count)

    def set_config_commit(self, commit: str) -> None:
        """Exactly one ``reconciler_config_commit_info`` series: the commit in force."""
        self.config_commit.clear()
        self.config_commit.labels(commit).set(1)

    def observe_clusters(self, health: Iterable[tuple[str, bool]]) -> None:
        """``(cluster, reachable)`` per cluster of this cycle."""
        for name, reachable in health:
            self.cluster_up.labels(name).set(1 if reachable else 0)
            if not reachable:
                self.cluster_errors.labels(name).inc()

    def set_leader(self, leading: bool) -> None:
        self.leader.set(1 if leading else 0)


def _remove(gauge: Gauge, keys: Iterable[tuple[str, ...]]) -> None:
    for key in keys:
        gauge.remove(*key)
