"""Fluent builders for planner inputs: readable tests without the compiler.

world = World().cluster("local").queue("team-a", quota={"nvidia.com/gpu": 2})
world.ops("vision/train-{}", 5, queue="team-a", gpu=1)
plan = world.plan()
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from reconciler.core.observation.capacity import ClusterCapacity, NodeCapacity, Taint
from reconciler.core.plan import Plan, plan_dispatch
from reconciler.core.plan.ledger import LedgerEntry
from reconciler.core.quantity import duration_seconds, parse_quantity
from reconciler.core.types import (
    BudgetSpec,
    ClusterSpec,
    CohortSpec,
    CompiledOperation,
    CompiledRepo,
    Distributed,
    FlavorSpec,
    ObservedOperation,
    OrgSettings,
    Phase,
    Provenance,
    QueueFlavor,
    QueueSpec,
    QueueStrategy,
    RejectedOperation,
    RejectReason,
    RunKind,
    WorkflowRef,
)

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
T0 = datetime(2025, 6, 1, tzinfo=UTC)


def quantities(values: dict[str, Any] | None) -> dict[str, Decimal]:
    return {k: parse_quantity(v) for k, v in (values or {}).items()}


def _named(values: dict[str, Any]) -> dict[str, Any]:
    return {("nvidia.com/gpu" if k == "gpu" else k): v for k, v in values.items()}


def node(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    taints: tuple[tuple[str, str, str], ...] = (),
    requested: dict[str, Any] | None = None,
    **allocatable: Any,
) -> NodeCapacity:
    """``node("gpu-1", gpu=8, requested={"gpu": 2}, taints=(("k", "v", "NoSchedule"),))``."""
    return NodeCapacity(
        name,
        dict(labels or {}),
        tuple(sorted(Taint(k, v, e) for k, v, e in taints)),
        quantities(_named(allocatable)),
        quantities(_named(requested or {})),
    )


def run_op(
    name: str,
    run: Mapping[str, Any],
    *,
    project: str = "vision",
    namespace: str | None = None,
    queue: str = "team-a",
    kind: RunKind = RunKind.JOB,
    requests: Mapping[str, Any] | None = None,
    **fields: Any,
) -> CompiledOperation:
    """One compiled operation as ``compile`` leaves it, built from its ``run`` section
    alone: for the render, adapter and watch tests that need a workload and not a world.
    ``requests`` take quantities (``{"nvidia.com/gpu": 1}``); other ``fields`` are
    ``CompiledOperation``'s own."""
    return CompiledOperation(
        project=project,
        name=name,
        path=f"projects/{project}/operations/{name}.yaml",
        queue=queue,
        cluster="local",
        namespace=namespace or project,
        kind=kind,
        spec={"name": name, "run": {"kind": kind.value, **run}},
        requests=quantities(dict(requests or {})),
        **fields,
    )


class OpBuilder:
    def __init__(self, world: World, op_id: str, seq: int) -> None:
        self._world = world
        project, name = op_id.split("/", 1)
        self._fields: dict[str, Any] = {
            "project": project,
            "name": name,
            "path": f"{project}/operations/{name}.yaml",
            "queue": world.default_queue,
            "cluster": "",
            "namespace": project,
            "kind": RunKind.JOB,
            "spec": {"kind": "job", "name": name},
            "requests": {},
            "submitted_at": T0 + timedelta(seconds=seq),
        }
        self._replicas = 1
        self._distributed: Distributed | None = None

    def queue(self, name: str) -> OpBuilder:
        self._fields["queue"] = name
        return self

    def requests(self, **values: Any) -> OpBuilder:
        """``requests(gpu=1, cpu="500m")``; ``gpu`` means ``nvidia.com/gpu``."""
        self._fields["requests"] = quantities(_named(values))
        return self

    def environment(self, **env: Any) -> OpBuilder:
        """``run.environment`` of the spec: ``environment(nodeSelector={...})``."""
        spec = dict(self._fields["spec"])
        spec["run"] = {**(spec.get("run") or {}), "environment": env}
        self._fields["spec"] = spec
        return self

    def container(self, image: str = "img", **limits: Any) -> OpBuilder:
        """``run.container`` of a job's spec, as compile leaves it, with these ``limits``
        (``gpu`` means ``nvidia.com/gpu``): what the rendered workload's pods request."""
        spec = dict(self._fields["spec"])
        resources = {"limits": {k: str(v) for k, v in _named(limits).items()}}
        run = {**(spec.get("run") or {}), "kind": spec.get("kind", "job")}
        spec["run"] = {**run, "container": {"image": image, "resources": resources}}
        self._fields["spec"] = spec
        return self

    def replicas(self, n: int, distributed: Distributed | None = None) -> OpBuilder:
        """A distributed operation of ``n`` pods; ``requests`` are then each pod's."""
        self._replicas = n
        self._distributed = distributed or Distributed()
        return self

    def timeout(self, value: str | int | None) -> OpBuilder:
        """``run.timeout`` (``"1h"`` or seconds), as compile sets it: in the spec and, in
        seconds, as the op's ``timeout`` (its Job's deadline: what a budget reserves for and
        what lets an operation borrow in a cohort). None: no timeout."""
        spec = dict(self._fields["spec"])
        run = dict(spec.get("run") or {})
        if value is None:
            run.pop("timeout", None)
        else:
            run["timeout"] = value
        if run:
            spec["run"] = run
        else:
            spec.pop("run", None)
        self._fields["spec"] = spec
        self._fields["timeout"] = None if value is None else duration_seconds(value)
        return self

    def unapproved(self) -> OpBuilder:
        self._fields["is_approved"] = False
        return self

    def priority(self, value: int) -> OpBuilder:
        self._fields["priority"] = value
        return self

    def stopped(self) -> OpBuilder:
        self._fields["stopped"] = True
        return self

    def submitted(self, at: datetime | None) -> OpBuilder:
        self._fields["submitted_at"] = at
        return self

    def path(self, path: str) -> OpBuilder:
        self._fields["path"] = path
        return self

    def child_of(
        self, parent: str, index: int, *, kind: str = "matrix", concurrency: int | None = None
    ) -> OpBuilder:
        self._fields["workflow"] = WorkflowRef(parent, kind, index, concurrency)
        return self

    def after(self, *deps: str) -> OpBuilder:
        self._fields["dependencies"] = tuple(deps)
        return self

    def spec(self, spec: dict[str, Any]) -> OpBuilder:
        self._fields["spec"] = spec
        return self

    def provenance(self, path: str, file: str, line: int, step: str = "operation") -> OpBuilder:
        self._fields.setdefault("provenance", {})[path] = Provenance(file, line, step)
        return self

    def build(self) -> CompiledOperation:
        fields = dict(self._fields)
        if not fields["cluster"]:
            q = self._world.queues.get(fields["queue"])
            fields["cluster"] = q.cluster if q else "local"
        if self._distributed is not None:
            pod = fields["requests"]
            fields["pod_requests"] = pod
            fields["requests"] = {k: v * self._replicas for k, v in pod.items()}
            fields["replicas"] = self._replicas
            fields["distributed"] = self._distributed
        return CompiledOperation(**fields)


class World:
    """Queues, clusters, operations and observed phases, then ``plan()``."""

    def __init__(self) -> None:
        self.clusters: dict[str, ClusterSpec] = {}
        self.queues: dict[str, QueueSpec] = {}
        self.builders: list[OpBuilder] = []
        self.observed: dict[str, ObservedOperation] = {}
        self.org = OrgSettings()
        self.rejected: list[RejectedOperation] = []
        self.cohorts: dict[str, CohortSpec] = {}
        self.default_queue = "default"
        self.capacity: dict[str, ClusterCapacity] = {}
        self.unreachable: set[str] = set()
        self.flavors: dict[str, FlavorSpec] = {}
        self._seq = 0

    def cluster(self, name: str = "local", *, concurrency: int | None = None) -> World:
        self.clusters[name] = ClusterSpec(name, concurrency=concurrency)
        return self

    def queue(
        self,
        name: str,
        *,
        cluster: str = "local",
        priority: int = 0,
        concurrency: int | None = None,
        quota: dict[str, Any] | None = None,
        strict: bool = False,
        paused: bool = False,
        max_pods: int | None = None,
        cohort: str | None = None,
        borrowing_limit: dict[str, Any] | None = None,
        lending_limit: dict[str, Any] | None = None,
        budget: BudgetSpec | None = None,
        default_timeout: int | None = None,
    ) -> World:
        if cluster not in self.clusters:
            self.cluster(cluster)
        self.queues[name] = QueueSpec(
            name=name,
            cluster=cluster,
            priority=priority,
            concurrency=concurrency,
            quota=quantities(quota),
            strategy=QueueStrategy.STRICT_FIFO if strict else QueueStrategy.BEST_EFFORT_FIFO,
            paused=paused,
            max_pods=max_pods,
            cohort=cohort,
            borrowing_limit=quantities(borrowing_limit),
            lending_limit=quantities(lending_limit),
            budget=budget,
            default_timeout=default_timeout,
        )
        self.default_queue = next(iter(self.queues))
        return self

    def fleet(
        self,
        name: str,
        clusters: tuple[str, ...],
        *,
        cluster_quota: dict[str, dict[str, Any]] | None = None,
        require_capacity: bool = False,
        **queue: Any,
    ) -> World:
        """A fleet queue over ``clusters`` (in choice order)."""
        for c in clusters:
            if c not in self.clusters:
                self.cluster(c)
        self.queue(name, cluster=clusters[0], **queue)
        caps = {c: quantities(_named(v)) for c, v in (cluster_quota or {}).items()}
        return self.set_queue(
            name, clusters=tuple(clusters), cluster_quota=caps, require_capacity=require_capacity
        )

    def nodes(
        self, cluster: str, *nodes: NodeCapacity, reserved: dict[str, Any] | None = None
    ) -> World:
        """The observed capacity of ``cluster``: its usable nodes."""
        if cluster not in self.clusters:
            self.cluster(cluster)
        self.capacity[cluster] = ClusterCapacity(
            tuple(sorted(nodes, key=lambda n: n.name)), quantities(_named(reserved or {}))
        )
        return self

    def cohort(
        self, name: str, max_borrow: str | int = "2h", *, quota: dict[str, Any] | None = None
    ) -> World:
        self.cohorts[name] = CohortSpec(name, duration_seconds(max_borrow), quantities(quota))
        return self

    def flavor(self, name: str, product: str | None = None, **labels: str) -> World:
        """A flavor whose nodes carry ``nvidia.com/gpu.product: <product>`` (the name by
        default) and ``labels``."""
        node_labels = {"nvidia.com/gpu.product": product or name, **labels}
        self.flavors[name] = FlavorSpec(name, node_labels)
        return self

    def flavored(self, name: str, *flavors: tuple[str, dict[str, Any]], **limits: Any) -> World:
        """Give queue ``name`` quota per flavor: ``("h100", {"gpu": 2}), ...`` in fallback
        order (each flavor is defined if it is not yet); ``borrowing_limit`` and
        ``lending_limit`` map a flavor to its limits, ``cluster_quota`` a flavor to its
        caps per cluster."""
        entries = []
        for fname, quota in flavors:
            if fname not in self.flavors:
                self.flavor(fname)
            entries.append(
                QueueFlavor(
                    fname,
                    quantities(_named(quota)),
                    quantities(_named(limits.get("borrowing_limit", {}).get(fname) or {})),
                    quantities(_named(limits.get("lending_limit", {}).get(fname) or {})),
                    {
                        c: quantities(_named(v))
                        for c, v in (limits.get("cluster_quota", {}).get(fname) or {}).items()
                    },
                )
            )
        return self.set_queue(
            name, quota={}, borrowing_limit={}, lending_limit={}, flavors=tuple(entries)
        )

    def set_queue(self, name: str, **changes: Any) -> World:
        self.queues[name] = replace(self.queues[name], **changes)
        return self

    def op(self, op_id: str, *, queue: str | None = None, gpu: Any = None) -> OpBuilder:
        self._seq += 1
        b = OpBuilder(self, op_id, self._seq)
        if queue is not None:
            b.queue(queue)
        if gpu is not None:
            b.requests(gpu=gpu)
        self.builders.append(b)
        return b

    def ops(self, pattern: str, count: int, *, queue: str | None = None, gpu: Any = None) -> World:
        """``ops("vision/train-{}", 5)`` adds vision/train-1 .. vision/train-5."""
        for i in range(1, count + 1):
            self.op(pattern.format(i), queue=queue, gpu=gpu)
        return self

    def observe(
        self,
        op_id: str,
        phase: Phase,
        *,
        queue: str | None = None,
        cluster: str | None = None,
        requests: dict[str, Any] | None = None,
        pods: int | None = None,
        dispatched_at: datetime | None = None,
        started_at: datetime | None = None,
        flavor: str | None = None,
    ) -> World:
        self.observed[op_id] = ObservedOperation(
            op_id,
            phase,
            quantities(requests) if requests is not None else None,
            queue,
            cluster,
            pods=pods,
            flavor=flavor,
            dispatched_at=dispatched_at,
            started_at=started_at,
        )
        return self

    def running(self, *op_ids: str) -> World:
        for op_id in op_ids:
            self.observe(op_id, Phase.RUNNING)
        return self

    def remove(self, *op_ids: str) -> World:
        """Delete operations from the repo (their observed phase stays)."""
        self.builders = [b for b in self.builders if b.build().id not in op_ids]
        return self

    def with_org(self, **settings: Any) -> World:
        self.org = replace(self.org, **settings)
        return self

    def reject(self, op_id: str, message: str) -> World:
        """Record a PolicyViolation for an operation (and drop it from the runnable ones)."""
        path = f"{op_id.split('/')[0]}/operations/{op_id.split('/')[1]}.yaml"
        self.builders = [b for b in self.builders if b.build().id != op_id]
        self.rejected.append(RejectedOperation(op_id, path, RejectReason.POLICY_VIOLATION, message))
        return self

    def repo(self, version: str = "worktree") -> CompiledRepo:
        return CompiledRepo(
            version=version,
            org=self.org,
            clusters=dict(self.clusters),
            queues=dict(self.queues),
            operations=tuple(self.operations()),
            rejected=tuple(self.rejected),
            cohorts=dict(self.cohorts),
            flavors=dict(self.flavors),
        )

    def operations(self) -> list[CompiledOperation]:
        return [b.build() for b in self.builders]

    def plan(
        self,
        now: datetime = NOW,
        ledger: Iterable[LedgerEntry] = (),
        backends: Mapping[str, frozenset[str]] | None = None,
    ) -> Plan:
        return plan_dispatch(
            self.operations(),
            self.queues,
            self.clusters,
            list(self.observed.values()),
            self.org,
            now,
            unreachable=frozenset(self.unreachable),
            capacity=self.capacity,
            backends=backends,
            cohorts=self.cohorts,
            ledger=ledger,
            flavors=self.flavors,
        )
