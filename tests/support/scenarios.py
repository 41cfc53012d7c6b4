"""Random worlds run through the fake-cluster cycle (queues, cohorts, fleets, budgets, gangs,
clusters down, creates refused), for the properties over whole cycles."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from hypothesis import strategies as st

from reconciler.core.decision.cycle import (
    Memory,
    memory_from_status,
)
from reconciler.core.observation.observe import WorkloadState, observe_workloads
from reconciler.core.plan import plan_repo
from reconciler.core.plan.ledger import Ledger, LedgerEntry
from reconciler.core.reporting.status import read_status, render_status
from reconciler.core.types import (
    BudgetPeriod,
    BudgetSpec,
    ClusterSpec,
    CompiledRepo,
    Distributed,
    DistributedBackend,
    Phase,
)
from support.builders import NOW, World
from support.fake_kube import FakeCluster, FakeKube
from support.harness import manifest as _manifest

FACTS = (
    "none",
    "PodPending",
    "Unschedulable",
    "Running",
    "Succeeded",
    "Failed",
    "Deleting",
    "superseded",  # the repo asks for generation 2; generation 1 still runs
    "deleted",  # recorded Running on the status branch, the Job is gone
)


def inline(work: Callable[[], None]) -> None:
    """Run the estimate worker on the caller's thread: these tests check what is shown."""
    work()


@dataclass
class Scenario:
    compiled: CompiledRepo
    clusters: dict[str, FakeCluster]
    memory: Memory

    def connect(self, spec: ClusterSpec) -> FakeKube:
        return FakeKube(self.clusters[spec.name])


def pytorchjob_fact(fake: FakeCluster, namespace: str, name: str, fact: str) -> None:
    """A PyTorchJob as the operator leaves it in the state ``fact`` names."""
    specs = fake.pytorchjobs[(namespace, name)]["spec"]["pytorchReplicaSpecs"]
    pods = sum(int(s["replicas"]) for s in specs.values())
    if fact == "Unschedulable":
        fake.set_operator_pods(namespace, name, placed=pods - 1, running=pods - 1)
    elif fact in ("Running", "superseded"):
        fake.set_operator_pods(namespace, name, placed=pods, running=pods)
        fake.set_pytorchjob_condition(namespace, name, "Running")
    elif fact in ("Succeeded", "Failed"):
        fake.set_pytorchjob_condition(namespace, name, fact)
    elif fact == "Deleting":
        obj = fake.pytorchjobs[(namespace, name)]
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:00Z"


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    world = World()
    names = ["c0", "c1"][: draw(st.integers(1, 2))]
    for name in names:
        world.cluster(name, concurrency=draw(st.none() | st.integers(1, 4)))
    queues = [f"q{i}" for i in range(draw(st.integers(1, 3)))]
    # sometimes all the queues are one cohort (on one cluster), borrowing and lending
    cohort = draw(st.sampled_from([None, None, "pool"]))
    if cohort is not None:
        world.cohort(cohort, "2h", quota=draw(st.sampled_from([None, {"nvidia.com/gpu": 5}])))
    budgets: dict[str, BudgetSpec | None] = {}
    for q in queues:
        budgets[q] = draw(
            st.sampled_from(
                [
                    None,
                    None,
                    BudgetSpec(
                        Decimal(draw(st.sampled_from(["1", "2.5", "4"]))),
                        BudgetPeriod.DAY,
                        "nvidia.com/gpu-hours",
                    ),
                    BudgetSpec(Decimal(6), BudgetPeriod.WEEK),
                ]
            )
        )
        world.queue(
            q,
            cluster=names[0] if cohort else draw(st.sampled_from(names)),
            priority=draw(st.integers(0, 2)),
            concurrency=draw(st.none() | st.integers(1, 3)),
            quota=draw(st.sampled_from([None, {"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 3}])),
            strict=draw(st.booleans()),
            paused=draw(st.sampled_from([False, False, False, True])),
            max_pods=draw(st.sampled_from([None, None, 3, 5])),
            cohort=cohort,
            budget=budgets[q],
        )
        quota = world.queues[q].quota
        if cohort is not None and quota:
            world.set_queue(
                q,
                borrowing_limit={r: Decimal(draw(st.integers(0, 2))) for r in quota},
                lending_limit=draw(st.sampled_from([{}, {r: Decimal(1) for r in quota}])),
            )
    if len(names) == 2 and cohort is None and draw(st.booleans()):  # q0: a fleet over both
        order = tuple(draw(st.permutations(names)))
        caps = {c: {"gpu": draw(st.integers(1, 3))} for c in order if draw(st.booleans())}
        q0 = world.queues["q0"]
        world.fleet(
            "q0",
            order,
            cluster_quota=caps,
            require_capacity=draw(st.booleans()),
            priority=q0.priority,
            concurrency=q0.concurrency,
            quota={"nvidia.com/gpu": 4},
            max_pods=q0.max_pods,
            budget=q0.budget,
        )
    elif cohort is not None and len(names) == 2 and draw(st.booleans()):
        # the cohort's queues are all fleet queues over both clusters, each in its own
        # order: they borrow fleet-wide, and check 10 chooses the borrower's cluster
        for q in queues:
            order = tuple(draw(st.permutations(names)))
            caps = {
                c: {"nvidia.com/gpu": Decimal(draw(st.integers(1, 3)))}
                for c in order
                if draw(st.booleans())
            }
            world.set_queue(
                q,
                cluster=order[0],
                clusters=order,
                cluster_quota=caps,
                require_capacity=draw(st.booleans()),
            )
    count = draw(st.integers(1, 8))
    facts: dict[str, str] = {}
    weighted = [*queues, "q0", "q0"] if world.queues["q0"].fleet else queues
    for i in range(count):
        op_id = f"p/o{i}"
        b = world.op(
            op_id,
            queue=draw(st.sampled_from(weighted)),
            gpu=draw(st.sampled_from([None, 1, 2, 3])),
        )
        b.timeout(draw(st.sampled_from([1800, 3600, 7200])))
        if draw(st.integers(0, 5)) == 0:
            b.submitted(None)
        if draw(st.integers(0, 3)) == 0:
            b.replicas(draw(st.integers(2, 3)))
        if draw(st.booleans()):
            b.timeout(draw(st.sampled_from(["1h", "3h"])))
        facts[op_id] = draw(st.sampled_from(FACTS))
        if facts[op_id] == "superseded":
            b._fields["generation"] = 2
        if draw(st.integers(0, 3)) == 0:
            # a PyTorchJob op: dispatched only where the cluster serves the CRD (an input
            # read with the workloads), listed only there
            b._fields["distributed"] = Distributed(backend=DistributedBackend.PYTORCHJOB)
    removed = [f"p/gone{i}" for i in range(draw(st.integers(0, 2)))]
    for op_id in removed:  # in the repo while they were dispatched; removed since
        world.op(op_id, queue=draw(st.sampled_from(queues)), gpu=1).timeout(3600)
    world.with_org(
        prune=draw(st.booleans()),
        prices={"nvidia.com/gpu": Decimal("2.5")},
        timezone=draw(st.sampled_from(["UTC", "Asia/Tokyo"])),
    )
    full = world.repo("c0")
    world.remove(*removed)
    if len(queues) > 1 and draw(st.integers(0, 3)) == 0:
        # an operation moved to another queue since it was dispatched: it holds the quota
        # of the queue that admitted it (its Job's label) until it ends
        moved = draw(st.sampled_from([b for b in world.builders if b.build().id in facts]))
        moved.queue(draw(st.sampled_from([q for q in queues if q != moved.build().queue])))
    compiled = world.repo("c1")

    clusters = {name: FakeCluster(name) for name in names}
    for fake in clusters.values():
        for i in range(draw(st.integers(0, 2))):
            fake.add_node(
                f"gpu-node-{i}",  # the fake's running pods are bound to gpu-node-0
                ready=draw(st.sampled_from([True, True, False])),
                taints=draw(st.sampled_from([[], [{"key": "x", "effect": "NoSchedule"}]])),
                gpu=str(draw(st.integers(0, 6))),
            )
        if draw(st.booleans()):
            fake.add_pod("other", "hog", "gpu-node-0", gpu=str(draw(st.integers(1, 2))))
    recorded: list[WorkloadState] = []
    for op_id, fact in [*facts.items(), *((r, "Running") for r in removed)]:
        op = next(o for o in full.operations if o.id == op_id)
        members = full.queues[op.queue].members
        on = draw(st.sampled_from(members)) if len(members) > 1 else op.cluster
        fake = clusters[on]
        if fact == "none":
            continue
        generation = 1 if fact == "superseded" else op.generation
        manifest = _manifest(full, op_id, generation)
        meta = manifest["metadata"]
        if fact == "deleted":
            recorded.append(
                WorkloadState(
                    op_id,
                    generation,
                    on,
                    meta["namespace"],
                    meta["name"],
                    "",
                    Phase.RUNNING,
                    queue=op.queue,
                )
            )
            continue
        if manifest["kind"] == "PyTorchJob":
            fake.add_pytorchjob(manifest)
            pytorchjob_fact(fake, meta["namespace"], meta["name"], fact)
            continue
        fake.add_job(manifest)
        fake.set_phase(meta["namespace"], meta["name"], "Running" if fact == "superseded" else fact)
    for name, fake in clusters.items():
        jobs = [j for _, j in sorted(fake.jobs.items())]
        pods = [p for _, p in sorted(fake.pods.items())]
        pytorchjobs = [p for _, p in sorted(fake.pytorchjobs.items())]
        for state in observe_workloads(name, jobs, pods, pytorchjobs):
            if draw(st.integers(0, 3)) > 0:  # most of what runs is on the status branch
                recorded.append(state)
    # the status branch as the last leader wrote it, with runs it entered in the ledger
    states = {s.operation: s for s in recorded}
    past = Ledger.of(
        LedgerEntry(
            operation=f"p/past{i}",
            generation=1,
            workload=f"p-past{i}-g1",
            queue=draw(st.sampled_from(queues)),
            cluster=names[0],
            phase="Succeeded",
            requests={"nvidia.com/gpu": Decimal(1)},
            start=NOW - timedelta(minutes=draw(st.integers(30, 48 * 60))),
            end=NOW - timedelta(minutes=draw(st.integers(0, 29))),
            cost=Decimal("1.25"),
        )
        for i in range(draw(st.integers(0, 3)))
    )
    earlier = plan_repo(full, [s.to_observed() for s in states.values()], NOW, ledger=past)
    memory = memory_from_status(read_status(render_status(full, earlier, states, ledger=past)))
    for name in names:
        clusters[name].reachable = draw(st.sampled_from([True, True, True, False]))
        if draw(st.booleans()):
            clusters[name].backends.add("pytorchjob")
    return Scenario(compiled, clusters, memory)
