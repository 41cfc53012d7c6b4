"""Fleet queues: one queue over several clusters (docs/dispatch.md, "Fleet queues").

Pure tests of the capacity observation (``core/observation/capacity.py``), the choice of cluster
(check 10, ``core/plan/fleet.py``) and the config; then the cycle over fake clusters: the
Job goes to the chosen cluster, and the status branch records the capacity so that
``plan`` without ``--live`` chooses the same. The same is shown on two real clusters in
tests/cluster/test_fleet_cluster.py."""

from __future__ import annotations

from decimal import Decimal
from typing import Any
from unittest import mock

from support.builders import NOW, World, node
from support.clocks import SteppedClock
from support.fake_kube import FakeCluster, FakeKube
from support.snapshots import repo

from reconciler.core.compile import compile_repo
from reconciler.core.decision.cycle import (
    ClusterListing,
    Memory,
    capacity_from_status,
    decide,
    listing_from_memory,
    memory_from_status,
)
from reconciler.core.observation.capacity import (
    ClusterCapacity,
    Placement,
    Requirement,
    Taint,
    Term,
    Toleration,
    observe_capacity,
    placement_of,
)
from reconciler.core.plan import AdmitWhen, FleetBlock, MemberState, PendingReason
from reconciler.core.reporting.status import read_status, render_status
from reconciler.core.types import (
    BudgetPeriod,
    BudgetSpec,
    ClusterSpec,
    CompiledRepo,
    Distributed,
    DistributedBackend,
    Phase,
    RepoSnapshot,
)
from reconciler.runtime.cycle import CycleResult, Reconciler

DAY = BudgetPeriod.DAY

GPU = "nvidia.com/gpu"


def gpus(n: Any) -> dict[str, Decimal]:
    return {GPU: Decimal(n)}


# --- observing capacity ----------------------------------------------------------------


def _node(name: str, *, ready: bool = True, cordoned: bool = False, **alloc: str) -> Any:
    return {
        "metadata": {"name": name, "labels": {"pool": name.split("-")[0]}},
        "spec": {"unschedulable": cordoned, "taints": []},
        "status": {
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def _pod(node: str, phase: str = "Running", ours: bool = False, **requests: str) -> Any:
    labels = {"app.kubernetes.io/managed-by": "dispatch-reconciler"} if ours else {}
    return {
        "metadata": {"name": f"p-{node}-{phase}", "labels": labels},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": requests}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "8"}}}],
            "overhead": {"cpu": "250m"},
        },
        "status": {"phase": phase},
    }


def test_capacity_counts_ready_schedulable_nodes_minus_every_live_bound_pod() -> None:
    nodes = [
        _node("gpu-1", **{GPU: "8", "cpu": "32"}),
        _node("gpu-2", ready=False, **{GPU: "8"}),
        _node("gpu-3", cordoned=True, **{GPU: "8"}),
    ]
    pods = [
        _pod("gpu-1", **{GPU: "2", "cpu": "1"}),  # someone else's: counts
        _pod("gpu-1", phase="Succeeded", **{GPU: "4"}),  # terminated: does not
        _pod("gpu-2", **{GPU: "1"}),  # on a node that does not count
        _pod("", ours=True, **{GPU: "1"}),  # ours, not bound yet: reserved
        _pod("", **{GPU: "3"}),  # not ours, not bound: not counted
    ]
    cap = observe_capacity(nodes, pods)
    assert [n.name for n in cap.nodes] == ["gpu-1"]
    assert (cap.not_ready, cap.cordoned) == (1, 1)
    # the init container (8 CPUs) outweighs the container (1), plus the pod overhead
    assert cap.nodes[0].requested == {GPU: Decimal(2), "cpu": Decimal("8.25"), "pods": 1}
    assert cap.reserved == {GPU: Decimal(1), "cpu": Decimal("8.25")}
    # the reserved pod is taken too: 32 - 8.25 - 8.25 CPUs
    assert cap.free() == {GPU: Decimal(5), "cpu": Decimal("15.5")}


def test_placement_follows_the_schedulers_node_filters() -> None:
    gpu = node("a-1", gpu=8, labels={"pool": "a100", "zone": "z1", "gen": "4"})
    tainted = node(
        "a-2", gpu=8, labels={"pool": "a100"}, taints=(("nvidia.com/gpu", "", "NoSchedule"),)
    )
    soft = node("a-3", gpu=8, labels={"pool": "l4"}, taints=(("spot", "yes", "PreferNoSchedule"),))
    anyone = Placement()
    assert [anyone.admits(n) for n in (gpu, tainted, soft)] == [True, False, True]
    tolerant = Placement(tolerations=(Toleration("nvidia.com/gpu", "Exists"),))
    assert tolerant.admits(tainted)
    wrong_effect = Placement(tolerations=(Toleration("nvidia.com/gpu", "Exists", "", "NoExecute"),))
    assert not wrong_effect.admits(tainted)
    assert Placement(tolerations=(Toleration(operator="Exists"),)).admits(tainted)
    selector = Placement(node_selector=(("pool", "a100"),))
    assert [selector.admits(n) for n in (gpu, soft)] == [True, False]
    newer = Placement(required=(Term((Requirement("gen", "Gt", ("3",)),)),))
    assert newer.admits(gpu) and not newer.admits(soft)
    either = Placement(
        required=(
            Term((Requirement("zone", "In", ("z9",)),)),
            Term(fields=(Requirement("metadata.name", "In", ("a-3",)),)),
        )
    )
    assert [either.admits(n) for n in (gpu, soft)] == [False, True]
    assert not Placement(required=(Term(),)).admits(gpu)  # an empty term matches nothing
    absent = Placement(required=(Term((Requirement("zone", "DoesNotExist"),)),))
    assert [absent.admits(n) for n in (gpu, soft)] == [False, True]


def test_placement_is_read_from_the_compiled_environment() -> None:
    spec = {
        "run": {
            "environment": {
                "nodeSelector": {"pool": "a100"},
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "z", "operator": "In", "values": ["1"]}
                                    ]
                                }
                            ]
                        }
                    }
                },
            }
        }
    }
    p = placement_of(spec)
    assert p.node_selector == (("pool", "a100"),)
    assert p.tolerations == (Toleration("k", "Exists", "", "NoSchedule"),)
    assert p.required == (Term((Requirement("z", "In", ("1",)),)),)
    assert placement_of({}) == Placement()


# --- choosing the cluster (check 10) ---------------------------------------------------


def two_clusters(**queue: Any) -> World:
    """A fleet queue over a (2 small GPU nodes) then b (one 8-GPU node)."""
    world = World().fleet("fleet", ("a", "b"), quota={GPU: 32}, **queue)
    world.nodes("a", node("a-1", gpu=2), node("a-2", gpu=2))
    return world.nodes("b", node("b-1", gpu=8))


def test_the_first_listed_cluster_with_room_is_chosen_and_counted_before_the_next() -> None:
    world = two_clusters()
    world.op("p/big", queue="fleet", gpu=6)  # only b has 6 free
    world.op("p/small", queue="fleet", gpu=2)  # a is listed first and has room
    world.op("p/more", queue="fleet", gpu=2)
    world.op("p/last", queue="fleet", gpu=2)  # b has 2 left (8 - 6), a none
    plan = world.plan()
    assert [(d.operation, d.cluster) for d in plan.dispatch] == [
        ("p/big", "b"),
        ("p/small", "a"),
        ("p/more", "a"),
        ("p/last", "b"),
    ]
    slices = {s.cluster: s for s in plan.queues[0].members}
    assert slices["a"].free == gpus(0) and slices["b"].free == gpus(0)
    assert (slices["a"].active, slices["b"].dispatching) == (2, 2)


def test_without_room_it_goes_to_the_first_cluster_under_quota() -> None:
    world = two_clusters(cluster_quota={"a": {"gpu": 1}})
    world.op("p/huge", queue="fleet", gpu=16)
    plan = world.plan()
    # a's clusterQuota (1 GPU) is too small; b is under quota but has no room: still b
    assert [(d.operation, d.cluster) for d in plan.dispatch] == [("p/huge", "b")]


def test_require_capacity_holds_it_with_each_clusters_free_amount() -> None:
    world = two_clusters(require_capacity=True)
    world.op("p/huge", queue="fleet", gpu=16)
    world.op("p/fits", queue="fleet", gpu=1)
    plan = world.plan()
    assert [d.operation for d in plan.dispatch] == ["p/fits"]
    (entry,) = plan.pending
    assert entry.reason is PendingReason.NO_CLUSTER_HAS_CAPACITY
    block = entry.blocked_by
    assert isinstance(block, FleetBlock)
    assert [(m.cluster, m.state, dict(m.free)) for m in block.members] == [
        ("a", MemberState.NO_CAPACITY, gpus(3)),
        ("b", MemberState.NO_CAPACITY, gpus(8)),
    ]
    assert entry.admit.when is AdmitWhen.CLUSTER_HAS_ROOM
    assert entry.message == (
        "needs nvidia.com/gpu 16: a has nvidia.com/gpu 3 free; b has nvidia.com/gpu 8 free; "
        "admitted when one of its clusters has the free capacity for it"
    )
    assert block.to_json()["clusters"][0] == {
        "cluster": "a",
        "state": "NoCapacity",
        "free": {GPU: "3"},
        "short": GPU,
        "scattered": False,
    }


def test_per_cluster_caps_count_the_queues_active_operations_there() -> None:
    world = two_clusters(cluster_quota={"a": {"gpu": 2}, "b": {"gpu": 2}})
    world.op("p/run", queue="fleet", gpu=2)
    world.observe("p/run", Phase.RUNNING, queue="fleet", cluster="a", requests={GPU: 2})
    world.op("p/next", queue="fleet", gpu=2)
    world.op("p/third", queue="fleet", gpu=1)
    plan = world.plan()
    # a's cap is used by p/run; b takes p/next and is then at its cap too
    assert [(d.operation, d.cluster) for d in plan.dispatch] == [("p/next", "b")]
    (entry,) = plan.pending
    assert entry.reason is PendingReason.NO_CLUSTER_UNDER_QUOTA
    assert isinstance(entry.blocked_by, FleetBlock)
    assert [(m.state, m.short) for m in entry.blocked_by.members] == [
        (MemberState.OVER_CLUSTER_QUOTA, GPU),
        (MemberState.OVER_CLUSTER_QUOTA, GPU),
    ]
    slices = {s.cluster: s for s in plan.queues[0].members}
    assert slices["a"].used == gpus(2) and slices["a"].quota == gpus(2)


def test_the_fleet_quota_and_concurrency_are_fleet_wide() -> None:
    world = two_clusters()
    world.set_queue("fleet", quota={GPU: Decimal(3)}, concurrency=2)
    world.ops("p/op-{}", 3, queue="fleet", gpu=1)
    plan = world.plan()
    assert len(plan.dispatch) == 2
    assert plan.pending[0].reason is PendingReason.QUEUE_CONCURRENCY_LIMIT


def test_selectors_and_taints_decide_which_clusters_nodes_count() -> None:
    world = World().fleet("fleet", ("a", "b"), require_capacity=True)
    world.nodes(
        "a",
        node("a-1", gpu=8, labels={"pool": "l4"}),
        node("a-2", gpu=8, labels={"pool": "a100"}, taints=(("dedicated", "x", "NoExecute"),)),
    )
    world.nodes("b", node("b-1", gpu=2, labels={"pool": "a100"}))
    world.op("p/a100", queue="fleet", gpu=4).environment(nodeSelector={"pool": "a100"})
    world.op("p/tolerant", queue="fleet", gpu=4).environment(
        nodeSelector={"pool": "a100"},
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "x"}],
    )
    world.op("p/any", queue="fleet", gpu=8)
    plan = world.plan()
    # p/a100 cannot use a's tainted A100 node, and b's has only 2; the tolerant op can
    assert [(d.operation, d.cluster) for d in plan.dispatch] == [
        ("p/tolerant", "a"),
        ("p/any", "a"),
    ]
    (entry,) = plan.pending
    assert entry.operation == "p/a100"
    assert isinstance(entry.blocked_by, FleetBlock)
    assert [dict(m.free) for m in entry.blocked_by.members] == [gpus(0), gpus(2)]


def test_unreadable_clusters_are_skipped_and_all_unreadable_is_cluster_unreachable() -> None:
    world = two_clusters()
    world.op("p/x", queue="fleet", gpu=1)
    world.unreachable = {"a"}
    assert [d.cluster for d in world.plan().dispatch] == ["b"]
    world.unreachable = {"a", "b"}
    (entry,) = world.plan().pending
    assert entry.reason is PendingReason.CLUSTER_UNREACHABLE
    assert entry.message.startswith("cluster a, b cannot be read")


def test_cluster_concurrency_and_unobserved_capacity_in_the_choice() -> None:
    world = World().cluster("a", concurrency=1).fleet("fleet", ("a", "b"))
    world.nodes("a", node("a-1", gpu=8))
    world.op("p/run", queue="fleet", gpu=1)
    world.observe("p/run", Phase.RUNNING, queue="fleet", cluster="a")
    world.op("p/x", queue="fleet", gpu=1)
    # a is at its concurrency; b's capacity was never observed: it is under quota, so it
    # is chosen (the prediction cannot say), unless capacity is required
    assert [(d.operation, d.cluster) for d in world.plan().dispatch] == [("p/x", "b")]
    world.set_queue("fleet", require_capacity=True)
    (entry,) = world.plan().pending
    assert isinstance(entry.blocked_by, FleetBlock)
    assert [m.state for m in entry.blocked_by.members] == [
        MemberState.CONCURRENCY_LIMIT,
        MemberState.NOT_OBSERVED,
    ]
    assert "a is at its concurrency; b's capacity is not observed" in entry.message


def test_strict_fifo_waits_behind_an_operation_no_cluster_has_room_for() -> None:
    world = two_clusters(require_capacity=True, strict=True)
    world.op("p/huge", queue="fleet", gpu=16)
    world.op("p/small", queue="fleet", gpu=1)
    plan = world.plan()
    assert plan.dispatch == ()
    assert [p.reason for p in plan.pending] == [
        PendingReason.NO_CLUSTER_HAS_CAPACITY,
        PendingReason.WAITING_BEHIND_HEAD,
    ]


def test_reserved_pods_are_taken_from_every_placement() -> None:
    world = World().fleet("fleet", ("a", "b"), require_capacity=True)
    world.nodes("a", node("a-1", gpu=4), reserved={"gpu": 3})
    world.nodes("b", node("b-1", gpu=1))
    world.op("p/two", queue="fleet", gpu=2)
    assert world.plan().pending[0].reason is PendingReason.NO_CLUSTER_HAS_CAPACITY


# --- config -----------------------------------------------------------------------------

CLUSTERS = {
    "reconciler.yaml": "kind: Org\n",
    "clusters/a.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
    "clusters/b.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
}


def _errors(queue: str) -> list[str]:
    compiled = compile_repo(repo({**CLUSTERS, "queues/q.yaml": queue}))
    return [str(e) for e in compiled.errors]


def test_a_fleet_queue_compiles_with_its_clusters_caps_and_capacity_rule() -> None:
    compiled = compile_repo(
        repo(
            {
                **CLUSTERS,
                "queues/q.yaml": "kind: Queue\nclusters: [b, a]\nrequireCapacity: true\n"
                "quota: {nvidia.com/gpu: 8}\nclusterQuota:\n  a: {nvidia.com/gpu: 2}\n",
            }
        )
    )
    assert compiled.valid, compiled.errors
    q = compiled.queues["q"]
    assert (q.cluster, q.clusters, q.members) == ("b", ("b", "a"), ("b", "a"))
    assert q.cluster_quota == {"a": gpus(2)} and q.require_capacity
    assert compiled.fleet_clusters == {"a", "b"}


def test_fleet_queue_errors_point_at_their_line() -> None:
    assert _errors("kind: Queue\ncluster: a\nclusters: [a, b]\n") == [
        "queues/q.yaml:3:1: set exactly one of 'cluster' or 'clusters'"
    ]
    assert _errors("kind: Queue\npriority: 1\n") == [
        "queues/q.yaml:1:1: set exactly one of 'cluster' or 'clusters'"
    ]
    assert _errors("kind: Queue\nclusters:\n  - a\n  - bb\n  - a\n") == [
        "queues/q.yaml:4:5: unknown cluster 'bb': no clusters/bb.yaml (did you mean 'b'?)",
        "queues/q.yaml:5:5: cluster 'a' is listed twice",
    ]
    assert _errors("kind: Queue\nclusters: [a, b]\nclusterQuota:\n  bb: {cpu: 1}\n") == [
        "queues/q.yaml:4:3: clusterQuota names 'bb', which is not in the queue's clusters "
        "(did you mean 'b'?)"
    ]
    assert _errors("kind: Queue\ncluster: a\nrequireCapacity: true\n") == [
        "queues/q.yaml:3:1: requireCapacity is for a fleet queue: set 'clusters'"
    ]
    assert _errors("kind: Queue\nclusters: []\n")[0].startswith("queues/q.yaml:2:")


# --- decide, the status branch, and the cycle ------------------------------------------


def _listing(world: World) -> dict[str, ClusterListing]:
    return {name: ClusterListing(capacity=world.capacity.get(name)) for name in world.clusters}


def test_decide_renders_the_operation_for_the_chosen_cluster() -> None:
    world = two_clusters()
    world.op("p/big", queue="fleet", gpu=6)
    world.op("p/small", queue="fleet", gpu=8)
    compiled = world.repo()
    decision = decide(compiled, _listing(world), Memory(), NOW)
    assert [(c.operation.cluster, c.cluster) for c in decision.actions.creates] == [
        ("b", "b"),
        ("a", "a"),  # no room anywhere: the first cluster under quota
    ]
    files = render_status(
        compiled, decision.plan, decision.states, clusters=decision.cluster_records()
    )
    big = read_status(files).operations["p/big"]
    assert (big.cluster, big.message) == ("b", "dispatched to cluster b")
    assert b"fleet:" in files["status/queues.yaml"]


def test_plan_from_the_status_branch_chooses_with_the_recorded_capacity() -> None:
    world = two_clusters()
    before = world.repo()
    cycle = decide(before, _listing(world), Memory(), NOW)
    files = render_status(before, cycle.plan, cycle.states, clusters=cycle.cluster_records())
    assert b"capacity:" in files["status/clusters.yaml"]
    view = read_status(files)
    assert capacity_from_status(view) == dict(cycle.capacity) == world.capacity
    # a new commit adds operations: the plan from the status branch (no --live) is the
    # plan over the clusters as they were read
    world.op("p/big", queue="fleet", gpu=6)
    world.op("p/small", queue="fleet", gpu=2)
    after = world.repo()
    live = decide(after, _listing(world), Memory(), NOW)
    recorded = decide(
        after,
        listing_from_memory(
            after, memory_from_status(view), {}, capacity=capacity_from_status(view)
        ),
        memory_from_status(view),
        NOW,
    )
    assert recorded.plan == live.plan
    assert [d.cluster for d in live.plan.dispatch] == ["b", "a"]


def test_a_taint_and_its_key_value_survive_the_status_round_trip() -> None:
    cap = ClusterCapacity(
        (
            node(
                "n",
                gpu=1,
                labels={"a": "b"},
                taints=(("k", "v", "NoSchedule"), ("only-key", "", "NoExecute")),
                requested={"cpu": "1500m"},
            ),
        ),
        {"cpu": Decimal("0.5")},
        2,
        1,
    )
    world = World().fleet("fleet", ("local",))
    compiled = world.repo()
    decision = decide(compiled, {"local": ClusterListing(capacity=cap)}, Memory(), NOW)
    files = render_status(
        compiled, decision.plan, decision.states, clusters=decision.cluster_records()
    )
    assert capacity_from_status(read_status(files)) == {"local": cap}
    assert Taint("only-key", "", "NoExecute") in cap.nodes[0].taints


def _reconciler(compiled: CompiledRepo, clusters: dict[str, FakeCluster]) -> Any:
    def connect(spec: ClusterSpec) -> Any:
        return FakeKube(clusters[spec.name])

    reconciler = Reconciler(
        lambda: RepoSnapshot(files={}, version=compiled.version),
        connect,
        SteppedClock(),
        watch=False,
    )

    def cycle() -> CycleResult:
        with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: compiled):
            return reconciler.run_once()

    return cycle


def test_the_cycle_creates_the_job_in_the_cluster_with_room_and_remembers_it() -> None:
    world = World().fleet("fleet", ("a", "b"), require_capacity=True)
    world.op("p/train", queue="fleet", gpu=4)
    world.op("p/huge", queue="fleet", gpu=64)
    clusters = {"a": FakeCluster("a"), "b": FakeCluster("b")}
    clusters["a"].add_node("a-1", gpu="8")
    clusters["a"].add_pod("other", "hog", "a-1", gpu="6")  # someone else's pod on a
    clusters["b"].add_node("b-1", gpu="8")
    clusters["b"].add_node("b-2", gpu="8", ready=False)
    cycle = _reconciler(world.repo(), clusters)
    first = cycle()
    assert first.dispatched == ("p/train",)
    assert list(clusters["b"].jobs) == [("p", "p-train-g1")] and not clusters["a"].jobs
    assert first.states["p/train"].cluster == "b"
    (held,) = first.plan.pending
    assert held.reason is PendingReason.NO_CLUSTER_HAS_CAPACITY
    assert "a has nvidia.com/gpu 2 free; b has nvidia.com/gpu 4 free" in held.message
    # the next cycle: p/train stays on b (it is not a candidate any more)
    clusters["b"].set_phase("p", "p-train-g1", "Running")
    second = cycle()
    assert second.states["p/train"].cluster == "b" and second.dispatched == ()


def test_nodes_that_cannot_be_listed_leave_the_cluster_readable_but_not_observed() -> None:
    world = World().fleet("fleet", ("a",), require_capacity=True)
    world.op("p/x", queue="fleet", gpu=1)
    clusters = {"a": FakeCluster("a", nodes_forbidden=True)}
    result = _reconciler(world.repo(), clusters)()
    assert [c.reachable for c in result.clusters] == [True]
    (entry,) = result.plan.pending
    assert isinstance(entry.blocked_by, FleetBlock)
    assert entry.blocked_by.members[0].state is MemberState.NOT_OBSERVED


# --- the views --------------------------------------------------------------------------


def test_the_queue_views_show_each_fleet_clusters_share_and_free_capacity() -> None:
    from reconciler.core.views.queue_view import (
        build_queues_view,
        queue_settings,
        queues_to_table,
        queues_view_from_status,
    )
    from reconciler.core.views.web_html import queues_main

    world = two_clusters(cluster_quota={"a": {"gpu": 4}}).queue("single", cluster="a")
    world.op("p/big", queue="fleet", gpu=6)
    compiled = world.repo()
    decision = decide(compiled, _listing(world), Memory(), NOW)
    view = build_queues_view(compiled, decision.plan, decision.workloads, applied=False)
    fleet = view.row("fleet")
    assert fleet is not None and fleet.cluster == "a,b"
    assert [c.to_json() for c in fleet.clusters] == [
        {
            "cluster": "a",
            "reachable": True,
            "active": 0,
            "used": {},
            "clusterQuota": {GPU: "4"},
            "free": {GPU: "4"},
            "nodes": 2,
        },
        {
            "cluster": "b",
            "reachable": True,
            "active": 1,
            "used": {GPU: "6"},
            "clusterQuota": {},
            "free": {GPU: "2"},
            "nodes": 1,
        },
    ]
    assert view.row("single").clusters == ()  # type: ignore[union-attr]
    table = queues_to_table(view)
    assert "FLEET QUEUE" in table
    assert [line.split() for line in table.splitlines()[-2:]] == [
        ["fleet", "a", "0", "nvidia.com/gpu", "0/4", "nvidia.com/gpu", "4", "2"],
        ["fleet", "b", "1", "nvidia.com/gpu", "6", "nvidia.com/gpu", "2", "1"],
    ]
    html = queues_main(view)
    assert '<tr data-fleet-queue="fleet" data-cluster="b">' in html
    assert "<td class=free>nvidia.com/gpu 2</td>" in html
    # the status branch gives the same shares
    files = render_status(
        compiled, decision.plan, decision.states, clusters=decision.cluster_records()
    )
    recorded = queues_view_from_status(read_status(files)).row("fleet")
    assert recorded is not None and recorded.clusters == fleet.clusters
    # the queue page's settings, each at its line
    text = b"kind: Queue\nclusters: [a, b]\nclusterQuota:\n  a: {nvidia.com/gpu: 4}\n"
    spec = compiled.queues["fleet"]
    settings = {s.key: (s.value, s.line) for s in queue_settings(spec, text)}
    assert settings["clusters"] == ("a, b", 2)
    assert settings["clusterQuota.a.nvidia.com/gpu"] == ("4", 4)
    assert settings["requireCapacity"] == ("false", 0)
    assert "cluster" not in settings


def test_a_pr_plan_shows_a_queue_becoming_a_fleet_queue_and_where_its_ops_go() -> None:
    from reconciler.core.views.diff import diff_plans

    base = World().queue("q", cluster="a", quota={GPU: 8})
    base.nodes("a", node("a-1", gpu=2)).nodes("b", node("b-1", gpu=8))
    base.op("p/train", queue="q", gpu=4)
    head = World().fleet("q", ("a", "b"), quota={GPU: 8}, require_capacity=True)
    head.nodes("a", node("a-1", gpu=2)).nodes("b", node("b-1", gpu=8))
    head.op("p/train", queue="q", gpu=4)
    before, after = base.repo(), head.repo()
    diff = diff_plans(
        (before, decide(before, _listing(base), Memory(), NOW).plan),
        (after, decide(after, _listing(head), Memory(), NOW).plan),
    )
    (queue,) = diff.queues
    changed = {f.path: (f.before, f.after) for f in queue.fields}
    assert changed["clusters"] == (None, ["a", "b"])
    assert changed["requireCapacity"] == (None, True)
    assert [
        (d.operation, d.cluster) for d in decide(after, _listing(head), Memory(), NOW).plan.dispatch
    ] == [("p/train", "b")]


# --- fleet queues with budgets, distributed operations, maxPods and backends -------------


def test_a_fleet_operations_cost_is_at_the_prices_of_the_cluster_it_goes_to() -> None:
    """Check 11 after check 10: the reservation is priced on the chosen cluster."""
    world = World().with_org(prices={GPU: Decimal("4.00")}, currency="USD")
    world.fleet("fleet", ("a", "b"), quota={GPU: 8}, budget=BudgetSpec(Decimal(10), DAY))
    world.clusters["b"] = ClusterSpec("b", prices={GPU: Decimal("1.00")})
    world.nodes("a", node("a-1", gpu=1))  # room for one op: 4 USD an hour there
    world.nodes("b", node("b-1", gpu=8))
    for i in range(4):
        world.op(f"p/o{i}", queue="fleet", gpu=1).timeout(2 * 3600)
    plan = world.plan()
    # o0 on a: 8 USD; o1 on b: 2 USD (10 in all); o2 would cost 2 more on b
    assert [(d.operation, d.cluster) for d in plan.dispatch] == [("p/o0", "a"), ("p/o1", "b")]
    assert plan.pending[0].reason is PendingReason.BUDGET_EXCEEDED
    assert "needs 2 USD; fleet spent 0 USD and committed 10 USD of 10 USD" in (
        plan.pending[0].message
    )
    # a running op is committed at the prices of the cluster it runs on
    world.observe("p/o0", Phase.RUNNING, queue="fleet", cluster="b", requests=gpus(1))
    world.nodes("a", node("a-1", gpu=0))
    plan = world.plan()
    assert [(d.operation, d.cluster) for d in plan.dispatch] == [
        ("p/o1", "b"),
        ("p/o2", "b"),
        ("p/o3", "b"),
    ]


def test_a_distributed_op_goes_where_every_replica_fits_node_by_node() -> None:
    """A gang's request is replicas x per pod, admitted whole on one cluster; each pod needs
    one node with room for it (a has 4 GPUs free in all, but 1 per node)."""
    world = World().fleet("fleet", ("a", "b"), quota={GPU: 16}, require_capacity=True)
    world.nodes("a", *(node(f"a-{i}", gpu=1) for i in range(4)))
    world.nodes("b", node("b-1", gpu=2), node("b-2", gpu=2))
    world.op("p/ddp", queue="fleet", gpu=2).replicas(2)
    world.op("p/single", queue="fleet", gpu=2)
    plan = world.plan()
    assert [(d.operation, d.cluster) for d in plan.dispatch] == [("p/ddp", "b")]
    (entry,) = plan.pending
    assert entry.reason is PendingReason.NO_CLUSTER_HAS_CAPACITY
    assert isinstance(entry.blocked_by, FleetBlock)
    a, b = entry.blocked_by.members
    assert (a.state, a.scattered, dict(a.free)) == (MemberState.NO_CAPACITY, True, gpus(4))
    assert (b.state, b.scattered, dict(b.free)) == (MemberState.NO_CAPACITY, False, gpus(0))
    assert "a has nvidia.com/gpu 4 free, but not on one node per pod" in entry.message


def test_a_gang_counts_every_replica_against_the_clusters_cap_and_max_pods() -> None:
    world = World().fleet(
        "fleet", ("a", "b"), quota={GPU: 16}, cluster_quota={"a": {"gpu": 3}}, max_pods=3
    )
    world.nodes("a", node("a-1", gpu=8))
    world.nodes("b", node("b-1", gpu=8))
    world.op("p/ddp", queue="fleet", gpu=1).replicas(4)  # 4 pods: over maxPods alone
    world.op("p/pair", queue="fleet", gpu=2).replicas(2)  # 4 GPUs: over a's cap of 3
    world.op("p/one", queue="fleet", gpu=1)
    world.op("p/two", queue="fleet", gpu=1)
    plan = world.plan()
    assert [(d.operation, d.cluster) for d in plan.dispatch] == [("p/pair", "b"), ("p/one", "a")]
    reasons = {p.operation: p.reason for p in plan.pending}
    assert reasons == {
        "p/ddp": PendingReason.EXCEEDS_QUOTA,
        "p/two": PendingReason.MAX_PODS_REACHED,
    }
    slices = {s.cluster: s for s in plan.queues[0].members}
    assert (slices["a"].used, slices["b"].used) == (gpus(1), gpus(4))


def test_a_backend_goes_only_to_a_cluster_that_serves_it() -> None:
    world = two_clusters()
    world.op("p/torch", queue="fleet", gpu=1).replicas(
        2, Distributed(backend=DistributedBackend.PYTORCHJOB)
    )
    # neither serves the PyTorchJob CRD: check 0
    plan = world.plan()
    assert plan.pending[0].reason is PendingReason.BACKEND_UNAVAILABLE
    assert "clusters a, b do not serve" in plan.pending[0].message
    # b serves it: chosen though a, listed first, has room
    plan = world.plan(backends={"b": frozenset({"pytorchjob"})})
    assert [(d.operation, d.cluster) for d in plan.dispatch] == [("p/torch", "b")]
    # only a serves it, and requireCapacity with no room there: a's state says why not b
    world.set_queue("fleet", require_capacity=True)
    world.nodes("a", node("a-1", gpu=1))
    plan = world.plan(backends={"a": frozenset({"pytorchjob"})})
    (entry,) = plan.pending
    assert isinstance(entry.blocked_by, FleetBlock)
    assert [m.state for m in entry.blocked_by.members] == [
        MemberState.NO_CAPACITY,
        MemberState.BACKEND_UNAVAILABLE,
    ]
