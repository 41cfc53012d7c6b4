"""Partitions: the connected components a shard decides over (core/plan/partitions.py)."""

from __future__ import annotations

from reconciler.core.observation.observe import WorkloadState
from reconciler.core.plan import plan_repo
from reconciler.core.plan.partitions import (
    moved_runs,
    partition_id,
    partition_repo,
    restrict_repo,
)
from reconciler.core.types import Phase
from tests.support.builders import NOW, World


def groups(world: World) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    return sorted((p.clusters, p.queues) for p in partition_repo(world.repo()))


def test_queues_on_separate_clusters_are_separate_partitions() -> None:
    world = World().queue("qa", cluster="a").queue("qb", cluster="b").queue("qb2", cluster="b")
    assert groups(world) == [(("a",), ("qa",)), (("b",), ("qb", "qb2"))]


def test_a_fleet_queue_joins_its_clusters() -> None:
    world = World().queue("qa", cluster="a").queue("qc", cluster="c").fleet("f", ("a", "b"))
    assert groups(world) == [(("a", "b"), ("f", "qa")), (("c",), ("qc",))]


def test_a_cohort_across_clusters_joins_them() -> None:
    world = (
        World()
        .cohort("pool")
        .queue("qa", cluster="a", cohort="pool")
        .queue("qb", cluster="b", cohort="pool")
        .queue("qc", cluster="c")
    )
    assert groups(world) == [(("a", "b"), ("qa", "qb")), (("c",), ("qc",))]


def test_a_workflow_across_queues_joins_them() -> None:
    world = World().queue("qa", cluster="a").queue("qb", cluster="b")
    world.op("p/w-0", queue="qa").child_of("p/w", 0, kind="dag")
    world.op("p/w-1", queue="qb").child_of("p/w", 1, kind="dag").after("p/w-0")
    assert groups(world) == [(("a", "b"), ("qa", "qb"))]


def test_a_cluster_without_queues_is_a_partition_of_its_own() -> None:
    world = World().queue("qa", cluster="a").cluster("idle")
    assert groups(world) == [(("a",), ("qa",)), (("idle",), ())]


def test_ids_follow_the_clusters_not_the_queues_or_the_order() -> None:
    before = {p.clusters: p.id for p in partition_repo(World().queue("qa", cluster="a").repo())}
    after = World().queue("qz", cluster="z").queue("qa2", cluster="a").queue("qa", cluster="a")
    now = {p.clusters: p.id for p in partition_repo(after.repo())}
    assert now[("a",)] == before[("a",)] == partition_id(["a"])
    assert partition_id(["b", "a"]) == partition_id(["a", "b"]) != partition_id(["a"])
    assert all(len(i) <= 63 and i.replace("-", "").isalnum() for i in now.values())


def test_the_shards_plans_together_are_the_whole_repos_plan() -> None:
    """No check reads another partition's counters: each queue's dispatches and pending
    reasons are the same whether the repo is decided whole or one partition at a time."""
    world = (
        World()
        .cohort("pool")
        .queue("qa", cluster="a", quota={"gpu": 1}, cohort="pool")
        .queue("qb", cluster="b", quota={"gpu": 2}, cohort="pool", lending_limit={"gpu": 1})
        .queue("qc", cluster="c", concurrency=1)
        .fleet("f", ("d", "e"), concurrency=2)
    )
    world.ops("t/a-{}", 3, queue="qa", gpu=1)
    world.ops("t/b-{}", 2, queue="qb", gpu=1)
    world.ops("t/c-{}", 2, queue="qc")
    world.ops("t/f-{}", 3, queue="f")
    world.observe("t/b-1", Phase.RUNNING, queue="qb", cluster="b", requests={"gpu": 1})
    for op in world.operations():
        if op.queue in ("qa", "qb"):
            world.set_queue(op.queue, default_timeout=60)
    repo = world.repo()
    observed = list(world.observed.values())
    whole = plan_repo(repo, observed, NOW)
    partitions = partition_repo(repo)
    assert len(partitions) == 3
    dispatched: list[tuple[str, str]] = []
    pending: list[tuple[str, str]] = []
    for p in partitions:
        part = plan_repo(restrict_repo(repo, [p]), observed, NOW)
        dispatched += [(d.operation, d.cluster) for d in part.dispatch]
        pending += [(w.operation, w.reason) for w in part.pending]
    assert sorted(dispatched) == sorted((d.operation, d.cluster) for d in whole.dispatch)
    assert sorted(pending) == sorted((w.operation, w.reason) for w in whole.pending)
    assert dispatched and pending


def test_restrict_keeps_only_the_partitions_parts() -> None:
    world = World().cohort("pool").queue("qa", cluster="a", cohort="pool").queue("qb", cluster="b")
    world.op("t/x", queue="qa")
    world.op("t/y", queue="qb")
    repo = world.repo()
    (pa,) = [p for p in partition_repo(repo) if p.clusters == ("a",)]
    only = restrict_repo(repo, [pa])
    assert (set(only.clusters), set(only.queues), set(only.cohorts)) == ({"a"}, {"qa"}, {"pool"})
    assert [o.id for o in only.operations] == ["t/x"]
    assert restrict_repo(repo, partition_repo(repo)) == repo


def _run(op_id: str, cluster: str, phase: Phase) -> WorkloadState:
    return WorkloadState(op_id, 1, cluster, "t", op_id.replace("/", "-"), "uid", phase)


def test_a_queue_moved_with_runs_active_stays_joined_with_its_old_cluster() -> None:
    """qa moved from a to b: while t/a-1 runs on a, a and b are one partition, qa's; a run
    ended there, one of a queue not moved, or on a cluster gone does not join them."""
    world = World().queue("qa", cluster="b").queue("qc", cluster="a").cluster("c")
    world.ops("t/a-{}", 2, queue="qa")
    world.op("t/c-1", queue="qc")
    repo = world.repo()
    runs = [
        _run("t/a-1", "a", Phase.RUNNING),
        _run("t/a-2", "c", Phase.SUCCEEDED),
        _run("t/a-2", "gone", Phase.RUNNING),
        _run("t/c-1", "a", Phase.DISPATCHED),
    ]
    moved = moved_runs(repo, runs)
    assert moved == {"qa": frozenset({"a"})}
    parts = partition_repo(repo, moved)
    assert sorted((p.clusters, p.queues) for p in parts) == [
        (("a", "b"), ("qa", "qc")),
        (("c",), ()),
    ]
    (joined,) = [p for p in parts if p.clusters == ("a", "b")]
    assert set(restrict_repo(repo, [joined]).queues) == {"qa", "qc"}
    assert partition_repo(repo, moved_runs(repo, [_run("t/a-1", "a", Phase.SUCCEEDED)])) == (
        partition_repo(repo)
    )
