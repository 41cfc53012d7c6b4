"""Hypothesis properties of plan_dispatch over random worlds."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from decimal import Decimal

from builders import NOW, T0
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.plan import (
    REASON_TRAITS,
    BehindHeadBlock,
    MaxPodsBlock,
    PendingReason,
    Plan,
    QuotaBlock,
    plan_dispatch,
)
from reconciler.core.plan_render import plan_to_json
from reconciler.core.types import (
    ClusterSpec,
    CompiledOperation,
    Distributed,
    ObservedOperation,
    OrgSettings,
    Phase,
    QueueSpec,
    QueueStrategy,
    RunKind,
    WorkflowRef,
)

GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class Case:
    ops: tuple[CompiledOperation, ...]
    queues: dict[str, QueueSpec]
    clusters: dict[str, ClusterSpec]
    observed: tuple[ObservedOperation, ...]
    org: OrgSettings

    def plan(self) -> Plan:
        return plan_dispatch(self.ops, self.queues, self.clusters, self.observed, self.org, NOW)


@st.composite
def cases(draw: st.DrawFn, shared_cluster: bool = False) -> Case:
    nclusters = 1 if shared_cluster else draw(st.integers(1, 2))
    clusters = {
        f"c{i}": ClusterSpec(
            f"c{i}",
            concurrency=draw(st.integers(0, 6))
            if shared_cluster
            else draw(st.none() | st.integers(0, 6)),
        )
        for i in range(nclusters)
    }
    queues: dict[str, QueueSpec] = {}
    for i in range(draw(st.integers(1, 4))):
        quota = {}
        if draw(st.booleans()):
            quota[GPU] = Decimal(draw(st.integers(0, 6)))
        if draw(st.booleans()):
            quota["cpu"] = Decimal(draw(st.sampled_from(["0.5", "1", "2.5", "4"])))
        queues[f"q{i}"] = QueueSpec(
            name=f"q{i}",
            cluster=f"c{draw(st.integers(0, nclusters - 1))}",
            priority=draw(st.integers(0, 3)),
            concurrency=draw(st.none() | st.integers(0, 5)),
            quota=quota,
            strategy=draw(st.sampled_from(QueueStrategy)),
            paused=draw(st.booleans()) and draw(st.booleans()),
            max_pods=draw(st.none() | st.none() | st.integers(0, 10)),
        )
    names = sorted(queues)
    ops: list[CompiledOperation] = []
    observed: list[ObservedOperation] = []
    nops = draw(st.integers(0, 25))
    for i in range(nops):
        q = queues[draw(st.sampled_from(names))]
        requests = {}
        gpu = draw(st.integers(0, 3))
        if gpu:
            requests[GPU] = Decimal(gpu)
        if draw(st.booleans()):
            requests["cpu"] = Decimal(draw(st.sampled_from(["0.25", "0.5", "1", "3"])))
        # about one in four is distributed: 1 to 4 replicas, all or nothing
        replicas = draw(st.integers(1, 4)) if draw(st.integers(0, 3)) == 0 else 1
        gang = {}
        if replicas > 1 or draw(st.integers(0, 9)) == 0:
            gang = {
                "replicas": replicas,
                "distributed": Distributed(),
                "pod_requests": requests,
            }
            requests = {k: v * replicas for k, v in requests.items()}
        workflow = None
        deps: tuple[str, ...] = ()
        if i and draw(st.integers(0, 4)) == 0:
            workflow = WorkflowRef(
                "p/wf", "dag", i, concurrency=draw(st.none() | st.integers(1, 2))
            )
            if draw(st.booleans()):
                deps = (f"p/op{draw(st.integers(0, i - 1))}",)
        ops.append(
            CompiledOperation(
                project="p",
                name=f"op{i}",
                path=f"p/operations/op{i}.yaml",
                queue=q.name,
                cluster=q.cluster,
                namespace="p",
                kind=RunKind.JOB,
                spec={},
                requests=requests,
                is_approved=draw(st.integers(0, 9)) > 0,
                workflow=workflow,
                dependencies=deps,
                submitted_at=draw(
                    st.none() | st.just(T0 + timedelta(minutes=draw(st.integers(0, 5))))
                ),
                **gang,
            )
        )
        phase = draw(st.sampled_from(list(Phase)))
        if phase is not Phase.QUEUED or draw(st.booleans()):
            # the workload's own pods, when observation says (a Job's parallelism)
            pods = draw(st.none() | st.integers(1, 4)) if phase.active else None
            observed.append(ObservedOperation(f"p/op{i}", phase, pods=pods))
    # active operations that were removed from the repo
    for j in range(draw(st.integers(0, 3))):
        q = queues[draw(st.sampled_from(names))]
        observed.append(
            ObservedOperation(f"p/gone{j}", Phase.RUNNING, {GPU: Decimal(1)}, q.name, q.cluster)
        )
    org = OrgSettings(prune=draw(st.booleans()), allow_mass_prune=draw(st.booleans()))
    return Case(tuple(ops), queues, clusters, tuple(observed), org)


def phases(case: Case) -> dict[str, Phase]:
    return {o.operation: o.phase for o in case.observed}


@settings(max_examples=300, deadline=None)
@given(cases())
def test_dispatch_never_takes_a_queue_or_cluster_over_its_limits(case: Case) -> None:
    plan = case.plan()
    ops = {op.id: op for op in case.ops}
    seen = phases(case)
    reqs = {op.id: op.requests for op in case.ops}  # every replica's
    pods = {op.id: op.replicas for op in case.ops}
    for o in case.observed:
        if o.requests is not None:
            reqs[o.operation] = o.requests
        pods[o.operation] = o.pods if o.pods is not None else pods.get(o.operation, 1)
    for name, q in case.queues.items():
        active = [
            oid
            for oid, ph in seen.items()
            if ph.active
            and (
                ops[oid].queue
                if oid in ops
                else next(o.queue for o in case.observed if o.operation == oid)
            )
            == name
        ]
        new = [d.operation for d in plan.dispatch if d.queue == name]
        if new and q.concurrency is not None:  # one per operation, whatever its replicas
            assert len(active) + len(new) <= q.concurrency
        if new and q.max_pods is not None:  # every replica of every active operation
            held = sum(pods[oid] for oid in active)
            assert held + sum(ops[oid].replicas for oid in new) <= q.max_pods, name
        for resource, limit in q.quota.items():
            before = sum((reqs[oid].get(resource, Decimal(0)) for oid in active), Decimal(0))
            added = sum((reqs[oid].get(resource, Decimal(0)) for oid in new), Decimal(0))
            if added:
                assert before + added <= limit, (name, resource)
    for name, c in case.clusters.items():
        new = [d for d in plan.dispatch if d.cluster == name]
        if new and c.concurrency is not None:
            active = [
                o
                for o in case.observed
                if o.phase.active
                and (o.cluster or (ops[o.operation].cluster if o.operation in ops else None))
                == name
            ]
            assert len(active) + len(new) <= c.concurrency


@settings(max_examples=300, deadline=None)
@given(cases())
def test_every_queued_op_is_either_dispatched_or_pending(case: Case) -> None:
    plan = case.plan()
    seen = phases(case)
    queued = {op.id for op in case.ops if seen.get(op.id, Phase.QUEUED) is Phase.QUEUED}
    dispatched = [d.operation for d in plan.dispatch]
    pending = [p.operation for p in plan.pending]
    assert not set(dispatched) & set(pending)
    assert sorted(dispatched + pending) == sorted(queued)
    for q in plan.queues:
        positions = [p.position for p in plan.pending if p.queue == q.name]
        assert positions == list(range(1, len(positions) + 1))
        assert q.pending == len(positions)


@settings(max_examples=200, deadline=None)
@given(cases(), st.lists(st.integers(-5, 5), min_size=4, max_size=4))
def test_changing_priorities_never_produces_a_stop(case: Case, priorities: list[int]) -> None:
    base = case.plan()
    queues = {
        name: replace(q, priority=priorities[i]) for i, (name, q) in enumerate(case.queues.items())
    }
    changed = replace(case, queues=queues).plan()
    assert changed.stop == base.stop
    assert {s.operation for s in changed.stop} <= {
        o.operation for o in case.observed if o.phase.active
    } - {op.id for op in case.ops}


@settings(max_examples=300, deadline=None)
@given(cases(shared_cluster=True))
def test_cluster_slots_go_to_higher_priority_queues_first(case: Case) -> None:
    plan = case.plan()
    priority = {name: q.priority for name, q in case.queues.items()}
    blocked = [
        priority[p.queue]
        for p in plan.pending
        if p.reason is PendingReason.CLUSTER_CONCURRENCY_LIMIT
    ]
    if blocked:
        top = max(blocked)
        assert all(priority[d.queue] >= top for d in plan.dispatch)


@settings(max_examples=200, deadline=None)
@given(cases(), st.randoms(use_true_random=False))
def test_output_is_deterministic_and_independent_of_input_order(case: Case, rnd) -> None:  # type: ignore[no-untyped-def]
    first = plan_to_json(case.plan())
    assert plan_to_json(case.plan()) == first
    ops, observed = list(case.ops), list(case.observed)
    rnd.shuffle(ops)
    rnd.shuffle(observed)
    queues = dict(reversed(list(case.queues.items())))
    shuffled = Case(tuple(ops), queues, case.clusters, tuple(observed), case.org)
    assert plan_to_json(shuffled.plan()) == first


@settings(max_examples=300, deadline=None)
@given(cases())
def test_a_distributed_op_is_all_or_nothing_and_exceeds_quota_exactly_when_it_never_fits(
    case: Case,
) -> None:
    """Dispatched ops fit whole (checked above); a pending one is ExceedsQuota exactly when
    its whole request (every replica) is over a quota, or its replicas over maxPods, and
    every quota or maxPods entry names the whole request."""
    plan = case.plan()
    ops = {op.id: op for op in case.ops}

    def never_fits(op: CompiledOperation) -> bool:
        q = case.queues[op.queue]
        over_quota = any(op.requests.get(r, Decimal(0)) > v for r, v in q.quota.items())
        return over_quota or (q.max_pods is not None and op.replicas > q.max_pods)

    for d in plan.dispatch:
        assert not never_fits(ops[d.operation])
    for p in plan.pending:
        op = ops[p.operation]
        if p.reason is PendingReason.EXCEEDS_QUOTA:
            assert never_fits(op) and p.never_runs
        elif p.reason in (
            PendingReason.QUEUE_CONCURRENCY_LIMIT,
            PendingReason.MAX_PODS_REACHED,
            PendingReason.QUOTA_EXCEEDED,
            PendingReason.WAITING_BEHIND_HEAD,
            PendingReason.WORKFLOW_PARALLELISM,
            PendingReason.CLUSTER_CONCURRENCY_LIMIT,
        ):
            assert not never_fits(op)  # check 4 passed: it can fit some day
        if p.reason is PendingReason.QUOTA_EXCEEDED:
            block = p.blocked_by
            assert isinstance(block, QuotaBlock)
            assert block.request == op.requests[block.resource]  # the whole request
            assert block.replicas == op.replicas
            assert block.used + block.request > block.quota
        if p.reason is PendingReason.MAX_PODS_REACHED:
            block = p.blocked_by
            assert isinstance(block, MaxPodsBlock)
            assert block.request == op.replicas
            assert block.active + block.request > block.limit


@settings(max_examples=200, deadline=None)
@given(cases())
def test_best_effort_passes_a_waiting_gang_strict_fifo_never_does(case: Case) -> None:
    """Within a queue, in consideration order: after an op held back by concurrency,
    maxPods, quota or the cluster, a StrictFIFO queue dispatches nothing more; a
    BestEffortFIFO queue may."""
    plan = case.plan()
    holds = {r for r, traits in REASON_TRAITS.items() if traits.holds_head}
    for name, q in case.queues.items():
        if q.strategy is not QueueStrategy.STRICT_FIFO:
            continue
        entries = [p for p in plan.pending if p.queue == name]
        held = [p for p in entries if p.reason in holds]
        if held:
            after = entries[entries.index(held[0]) + 1 :]
            assert all(p.reason is not PendingReason.QUOTA_EXCEEDED for p in after)
            assert all(p.reason not in holds for p in after)
        for p in entries:  # the head a later one waits behind holds it by the table
            if p.reason is PendingReason.WAITING_BEHIND_HEAD:
                assert isinstance(p.blocked_by, BehindHeadBlock)
                assert REASON_TRAITS[p.blocked_by.head_reason].holds_head
