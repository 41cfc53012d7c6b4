"""Shards on the real control plane: two dev clusters in two partitions (the session's
``local`` and a second control plane, ``remote``, where team-b runs) and two ``reconciler run
--shards`` processes. Each holds one partition; kill -9 one and the other takes its
partition within the Lease's duration (plus a retry period); a replica started again gets
its share back, and a second kill moves it again. All along, no Job is made twice and no
queue goes over its limits; at the end every operation has Succeeded, once.
``bench/shard_fault_loop.py`` runs it with 20 kills or more."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from support.cluster import KubeCluster
from support.helpers import wait_until
from support.reconciler_env import second_cluster
from support.shard_replicas import LEASE_NAME, ShardReplicas, move_team_b, split_team_b

from reconciler.adapters.kube import Kube
from reconciler.core.plan.partitions import partition_id, partition_repo
from reconciler.devcluster.cluster import free_port

pytestmark = pytest.mark.cluster


def _queues(port: int) -> set[str]:
    """The queues ``/api/v1/queues`` lists (none while it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/queues", timeout=5) as r:
            return {row["name"] for row in json.load(r)["queues"]}
    except (OSError, ValueError, KeyError):
        return set()


@pytest.mark.timeout(420)
def test_two_shards_one_partition_each_and_kills_move_them(
    kube: Kube, config_repo: Path, kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    if kube_cluster.dev is None:
        pytest.skip("starts a second dev cluster; needs the dev-cluster binaries")
    from reconciler.devcluster.shape import default_shape

    shape = default_shape(gpu_nodes=2, cpu_nodes=0)
    with second_cluster(tmp_path / "second", config_repo, shape) as (_, remote):
        compiled = split_team_b(config_repo)
        assert [p.clusters for p in partition_repo(compiled)] in (
            [("local",), ("remote",)],
            [("remote",), ("local",)],
        )
        kubes = {"local": kube, "remote": remote}
        replicas = ShardReplicas(
            config_repo, kube_cluster.kubeconfig, namespace, tmp_path, kubes, compiled
        )
        try:
            port = free_port()
            replicas.start("r1")
            replicas.start("r2", "--http", f"127.0.0.1:{port}")
            wait_until(
                lambda: sorted(replicas.holders().values()) == ["r1", "r2"],
                timeout=60,
                what="one partition each",
            )
            # r2's pages show the whole fleet, not only its partition's queues
            rows = wait_until(
                lambda: _queues(port) >= {"team-a", "team-b"} and _queues(port),
                timeout=60,
                what="r2's pages to show both partitions' queues",
            )
            assert rows == {q for q in compiled.queues}
            for survivor, victim, fresh in (("r2", "r1", "r3"), ("r3", "r2", "r4")):
                lost = [p for p, h in replicas.holders().items() if h == victim]
                took = replicas.kill(victim)
                assert took <= replicas.lease + 2 * replicas.retry + 1.5, took
                assert set(replicas.holders().values()) == {survivor}, lost
                replicas.start(fresh)
                wait_until(
                    lambda s=survivor, f=fresh: (
                        sorted(replicas.holders().values()) == sorted([s, f])
                    ),
                    timeout=60,
                    what=f"{fresh} to get its share",
                )
            replicas.wait_all_succeeded(timeout=240)
            # the first replica killed is gone for good: its membership Lease is deleted
            wait_until(lambda: "r1" not in replicas.members(), timeout=60, what="r1's Lease")
        finally:
            replicas.close()
        print(f"takeovers {replicas.takeovers}, samples {replicas.samples}")
        assert replicas.violations() == []
        assert replicas.takeovers and all(
            t <= replicas.lease + 2 * replicas.retry + 1.5 for t in replicas.takeovers
        )
        runs = replicas.jobs_per_operation()  # with the scheduled operation's runs
        assert set(runs.values()) == {1}, runs
        assert {op.id for op in compiled.operations} <= set(runs)


@pytest.mark.timeout(420)
def test_a_queue_moved_with_runs_active_is_neither_run_twice_nor_pruned(
    kube: Kube, config_repo: Path, kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """team-b moves from ``remote`` back to ``local`` while its runs are active on remote:
    the two clusters are one partition until they end; no Job is made twice, none is
    stopped, and every operation Succeeds once."""
    if kube_cluster.dev is None:
        pytest.skip("starts a second dev cluster; needs the dev-cluster binaries")
    from reconciler.devcluster.shape import default_shape

    shape = default_shape(gpu_nodes=2, cpu_nodes=0)
    with second_cluster(tmp_path / "second", config_repo, shape) as (_, remote):
        compiled = split_team_b(config_repo)
        team_b = {op.id for op in compiled.operations if op.queue == "team-b"}
        kubes = {"local": kube, "remote": remote}
        replicas = ShardReplicas(
            config_repo, kube_cluster.kubeconfig, namespace, tmp_path, kubes, compiled
        )
        try:
            replicas.start("r1")
            replicas.start("r2")
            wait_until(
                lambda: sorted(replicas.holders().values()) == ["r1", "r2"],
                timeout=60,
                what="one partition each",
            )
            on_remote = wait_until(
                lambda: replicas.seen_on("remote") & team_b,
                timeout=120,
                what="a run of team-b on remote",
            )
            replicas.compiled = move_team_b(config_repo, "local")
            joined = f"{LEASE_NAME}-shard-{partition_id(('local', 'remote'))}"
            wait_until(
                lambda: replicas.holders().get(joined) in ("r1", "r2"),
                timeout=60,
                what="the two clusters held as one partition",
            )
            replicas.wait_all_succeeded(timeout=240)
        finally:
            replicas.close()
        assert replicas.violations() == []
        runs = replicas.jobs_per_operation()
        assert set(runs.values()) == {1}, runs
        assert on_remote and all(replicas.phases().get(op) == "Succeeded" for op in on_remote)
