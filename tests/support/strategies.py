"""Hypothesis strategies shared by the property tests: planner cases, cohort simulations,
the camelCase fields of every kind of config file, and the worlds the start-time estimate
and the what-if state are checked on (``estimate_worlds``)."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any, Union

from hypothesis import strategies as st
from pydantic import BaseModel

from reconciler.core.compile.model import KINDS
from reconciler.core.observation.capacity import NodeCapacity
from reconciler.core.plan import Plan, plan_dispatch
from reconciler.core.plan.estimate import RunRecord
from reconciler.core.plan.ledger import LedgerEntry, run_cost
from reconciler.core.types import (
    BudgetPeriod,
    BudgetSpec,
    ClusterSpec,
    CohortSpec,
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
from support.builders import NOW, T0, World

GPU = "nvidia.com/gpu"


STEP = timedelta(minutes=5)


MAX_BORROW = 3600


@dataclass(frozen=True)
class Job:
    op: CompiledOperation
    arrives: int  # cycle
    runs: timedelta


@dataclass(frozen=True)
class Sim:
    queues: dict[str, QueueSpec]
    cohort: CohortSpec
    jobs: tuple[Job, ...]
    gpus: dict[str, int]  # fleet: each cluster's GPUs (empty: one cluster, local)


@st.composite
def sims(draw: st.DrawFn) -> Sim:
    queues: dict[str, QueueSpec] = {}
    fleet = draw(st.booleans())
    for i in range(draw(st.integers(2, 3))):
        quota = draw(st.integers(1, 4))
        lending = draw(st.none() | st.integers(0, quota))
        order: tuple[str, ...] = tuple(draw(st.permutations(["a", "b"]))) if fleet else ()
        caps = {c: {GPU: Decimal(draw(st.integers(1, 4)))} for c in order if draw(st.booleans())}
        queues[f"q{i}"] = QueueSpec(
            name=f"q{i}",
            cluster=order[0] if fleet else "local",
            priority=draw(st.integers(0, 2)),
            quota={GPU: Decimal(quota)},
            cohort="pool",
            borrowing_limit={GPU: Decimal(draw(st.integers(0, 4)))},
            lending_limit={} if lending is None else {GPU: Decimal(lending)},
            clusters=order,
            cluster_quota=caps,
            require_capacity=fleet and draw(st.booleans()),
        )
    cap = draw(st.none() | st.integers(2, 12))
    cohort = CohortSpec("pool", MAX_BORROW, {} if cap is None else {GPU: Decimal(cap)})
    jobs = []
    for n in range(draw(st.integers(1, 14))):
        queue = draw(st.sampled_from(sorted(queues)))
        timeout = draw(st.none() | st.sampled_from([600, 1800, 3600, 7200]))
        limit = timeout if timeout is not None else 4 * 3600
        runs = timedelta(seconds=draw(st.integers(60, limit)))
        spec: dict[str, object] = {"kind": "job", "name": f"j{n}"}
        if timeout is not None:
            spec["run"] = {"timeout": timeout}
        op = CompiledOperation(
            project="p",
            name=f"j{n}",
            path=f"p/operations/j{n}.yaml",
            queue=queue,
            cluster=queues[queue].cluster,
            namespace="p",
            kind=RunKind.JOB,
            spec=spec,
            requests={GPU: Decimal(draw(st.integers(1, 3)))},
            submitted_at=T0 + timedelta(seconds=n),
        )
        jobs.append(Job(op, draw(st.integers(0, 30)), runs))
    gpus = {c: draw(st.integers(0, 8)) for c in ("a", "b")} if fleet else {}
    return Sim(queues, cohort, tuple(jobs), gpus)


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


Step = tuple[str, bool]  # (YAML key, the value there is a list of models)


def models(annotation: Any) -> Iterator[tuple[type[BaseModel], bool]]:
    """The models inside an annotation, each with whether it sits in a list."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        yield from models(typing.get_args(annotation)[0])
    elif origin in (Union, types.UnionType):
        for arg in typing.get_args(annotation):
            yield from models(arg)
    elif origin is list:
        for model, _ in models(typing.get_args(annotation)[0]):
            yield model, True
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, False


def walk(
    model: type[BaseModel], path: tuple[Step, ...] = (), seen: frozenset[type] = frozenset()
) -> Iterator[tuple[tuple[Step, ...], type[BaseModel]]]:
    """Every model reachable from ``model`` (each once per path, no cycles), with its path."""
    yield path, model
    for name, info in model.model_fields.items():
        for sub, in_list in models(info.annotation):
            if sub not in seen:
                yield from walk(sub, (*path, (info.alias or name, in_list)), seen | {model})


def nest(path: tuple[Step, ...], leaf: dict[str, Any]) -> dict[str, Any]:
    value: Any = leaf
    for key, in_list in reversed(path):
        value = {key: [value] if in_list else value}
    return value


# (kind, path to the model, YAML name) for every camelCase field of every input model.
CAMEL_FIELDS = sorted(
    {
        (kind, path, alias)
        for kind, top in KINDS.items()
        for path, model in walk(top)
        for name, info in model.model_fields.items()
        if (alias := info.alias or name) != name
    }
)


GPU_HOURS = "nvidia.com/gpu-hours"
MIN = 60.0


@st.composite
def _queue_apart(
    draw: st.DrawFn,
    world: World,
    history: list[RunRecord],
    others: list[str],
    workflow_concurrency: int,
) -> list[str]:
    """A queue ``qa`` on c2 whose operations depend on one another and have a workflow of
    their own: it shares nothing with the other queues (the estimate dates it apart), but
    for what is drawn to make it only look so: an operation that depends on one of
    ``others`` or is a child of their workflow, or one of theirs that depends on it (and c2's
    limit, when its queues reach it). Returns its operations."""
    world.queue(
        "qa",
        cluster="c2",
        priority=draw(st.integers(0, 2)),
        concurrency=draw(st.none() | st.integers(1, 3)),
        quota=draw(st.sampled_from([None, {"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 3}])),
        strict=draw(st.booleans()),
        max_pods=draw(st.none() | st.integers(1, 4)),
    )
    concurrency = draw(st.integers(1, 2))
    ids: list[str] = []
    for i in range(draw(st.integers(1, 8))):
        oid = f"p/a{i}"
        b = world.op(oid, queue="qa", gpu=draw(st.sampled_from([None, 1, 2])))
        if draw(st.integers(0, 4)) == 0:
            b.requests(gpu=1).replicas(2)
        if draw(st.booleans()):
            b.timeout(draw(st.integers(10, 240)) * 60)
        if ids and draw(st.integers(0, 2)) == 0:
            b.after(draw(st.sampled_from(ids)))
        elif others and draw(st.integers(0, 9)) == 0:
            b.after(draw(st.sampled_from(others)))
        if draw(st.integers(0, 2)) == 0:
            b.child_of("p/wfa", i, concurrency=concurrency)
        elif draw(st.integers(0, 9)) == 0:
            b.child_of("p/wf", 100 + i, concurrency=workflow_concurrency)
        ids.append(oid)
        for minutes in draw(st.lists(st.integers(1, 120), min_size=1, max_size=3)):
            history.append(RunRecord(oid, "qa", minutes * MIN))
    if others and draw(st.integers(0, 4)) == 0:
        late = world.op("p/late", queue=world.default_queue).timeout(3600)  # it may be budgeted
        late.after(draw(st.sampled_from(ids)))
        history.append(RunRecord("p/late", world.default_queue, 30 * MIN))
    return ids


@st.composite
def estimate_worlds(
    draw: st.DrawFn, apart: bool = False
) -> tuple[World, list[RunRecord], list[LedgerEntry]]:
    """Clusters, queues (priorities, concurrency, quota, StrictFIFO, maxPods, a cohort
    that lends and borrows, budgets per day in cost or GPU-hours, a fleet queue over two
    of the three clusters with a ``clusterQuota`` and their nodes' free GPUs observed), operations
    (GPUs, gangs of 2 pods, timeouts, dependencies, a workflow), their history and a
    ledger of what the budgeted queues spent today. With ``apart``, most worlds have a
    queue that shares nothing with the others, or only looks so (``_queue_apart``)."""
    world = World()
    world.with_org(
        prices={"nvidia.com/gpu": Decimal("2.5")},
        timezone=draw(st.sampled_from(["UTC", "America/New_York", "Asia/Tokyo"])),
    )
    world.cluster("c0", concurrency=draw(st.none() | st.integers(1, 4)))
    world.cluster("c1", concurrency=draw(st.none() | st.integers(1, 4)))
    # no fleet queue lists c2: its queues may share nothing with another (dated apart),
    # or only look so (its limit reached, a dependency or the workflow in another queue)
    world.cluster("c2", concurrency=draw(st.none() | st.integers(1, 3 if apart else 8)))
    world.cohort("co", draw(st.sampled_from(["30m", "2h"])))
    queues = [f"q{i}" for i in range(draw(st.integers(1, 4)))]
    budgeted = set()
    for q in queues:
        quota = draw(st.sampled_from([None, {"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 3}]))
        cohort = quota is not None and draw(st.booleans())
        budget = None
        if draw(st.integers(0, 2)) == 0:
            budget = BudgetSpec(
                Decimal(draw(st.integers(1, 12))),
                BudgetPeriod.DAY,
                draw(st.sampled_from(["cost", GPU_HOURS])),
            )
            budgeted.add(q)
        world.queue(
            q,
            cluster=draw(st.sampled_from(["c0", "c1", "c2"])),
            priority=draw(st.integers(0, 2)),
            concurrency=draw(st.none() | st.integers(1, 3)),
            quota=quota,
            strict=draw(st.booleans()),
            max_pods=draw(st.none() | st.integers(1, 4)),
            cohort="co" if cohort else None,
            borrowing_limit={"nvidia.com/gpu": draw(st.integers(1, 2))} if cohort else None,
            lending_limit=(
                {"nvidia.com/gpu": draw(st.integers(0, 2))}
                if cohort and draw(st.booleans())
                else None
            ),
            budget=budget,
        )
    if draw(st.booleans()):
        # a fleet queue (never a cohort member: a cohort's queues are all fleet or none)
        order = draw(st.sampled_from([("c0", "c1"), ("c1", "c0")]))
        caps = {
            c: {"nvidia.com/gpu": draw(st.integers(1, 3))} for c in order if draw(st.booleans())
        }
        world.fleet(
            "qf",
            order,
            cluster_quota=caps,
            priority=draw(st.integers(0, 2)),
            concurrency=draw(st.none() | st.integers(1, 3)),
            strict=draw(st.booleans()),
        )
        for c in order:
            if draw(st.booleans()):
                free = Decimal(draw(st.integers(0, 4)))
                world.nodes(c, NodeCapacity(f"{c}-n", allocatable={"nvidia.com/gpu": free}))
        queues.append("qf")
    n = draw(st.integers(1, 14))
    # one workflow: its children share its concurrency, as the compiler gives them
    workflow_concurrency = draw(st.integers(1, 2))
    history: list[RunRecord] = []
    ids = []
    for i in range(n):
        oid = f"p/o{i}"
        queue = draw(st.sampled_from(queues))
        b = world.op(oid, queue=queue, gpu=draw(st.sampled_from([None, 1, 2])))
        if draw(st.integers(0, 4)) == 0:
            b.requests(gpu=1).replicas(2)
        if queue in budgeted or draw(st.booleans()):
            b.timeout(draw(st.integers(10, 240)) * 60)
        if ids and draw(st.integers(0, 4)) == 0:
            b.after(draw(st.sampled_from(ids)))
        if draw(st.integers(0, 4)) == 0:
            b.child_of("p/wf", i, concurrency=workflow_concurrency)
        ids.append(oid)
        for minutes in draw(st.lists(st.integers(1, 120), min_size=1, max_size=3)):
            history.append(RunRecord(oid, queue, minutes * MIN))
    if apart and draw(st.integers(0, 3)) > 0:
        ids += draw(_queue_apart(world, history, ids, workflow_concurrency))
        if draw(st.booleans()):
            # a second queue of c2 with operations of its own: with c2's limit reached, the
            # two share its slots alone (dated apart together), or only look so
            world.queue(
                "qb",
                cluster="c2",
                priority=draw(st.integers(0, 2)),
                concurrency=draw(st.none() | st.integers(1, 3)),
                strict=draw(st.booleans()),
                paused=draw(st.integers(0, 5)) == 0,
            )
            for i in range(draw(st.integers(1, 6))):
                b = world.op(f"p/b{i}", queue="qb", gpu=draw(st.sampled_from([None, 1])))
                if i and draw(st.integers(0, 3)) == 0:
                    b.after(f"p/b{i - 1}")
                ids.append(f"p/b{i}")
                history.append(RunRecord(f"p/b{i}", "qb", draw(st.integers(1, 90)) * MIN))
    for oid in draw(st.lists(st.sampled_from(ids), max_size=3, unique=True)):
        # observed on its queue's cluster, or on another (its end frees a slot there)
        cluster = draw(st.none() | st.sampled_from(["c0", "c1", "c2"]))
        world.observe(oid, Phase.RUNNING, cluster=cluster)
    ledger = []
    for q in sorted(budgeted):
        for k in range(draw(st.integers(0, 2))):
            hours_ago = draw(st.integers(1, 11))
            end = NOW - timedelta(minutes=draw(st.integers(0, 59)))
            start = end - timedelta(hours=hours_ago)
            requests = {"nvidia.com/gpu": Decimal(1)}
            ledger.append(
                LedgerEntry(
                    operation=f"p/old-{q}-{k}",
                    generation=1,
                    workload=f"old-{q}-{k}",
                    queue=q,
                    cluster=world.queues[q].cluster,
                    phase="Succeeded",
                    requests=requests,
                    start=start,
                    end=end,
                    cost=run_cost(requests, world.org.prices, start, end),
                )
            )
    return world, history, ledger
