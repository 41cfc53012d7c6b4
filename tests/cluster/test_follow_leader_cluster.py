"""A replica that does not lead follows the leader's record on the status branch, on the
real control plane: a run it last saw active, which the leader saw succeed and whose Job
was deleted before the replica looked again, is the leader's ``Succeeded`` there, not
"deleted by hand" (``tests/core/test_follow_leader.py`` has the unit twin)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.cluster import KubeCluster
from support.reconciler_env import make_config_repo, make_reconciler

from reconciler.adapters.git import ConfigRepo, StatusBranch
from reconciler.adapters.kube import Kube
from reconciler.core.types import Phase
from reconciler.runtime.cycle import CycleResult, Reconciler
from reconciler.runtime.status import StatusPublisher

pytestmark = pytest.mark.cluster


def _publisher(repo: Path, cache: Path) -> StatusPublisher:
    return StatusPublisher(StatusBranch(ConfigRepo(str(repo), cache_dir=cache)))


def test_a_follower_takes_the_leaders_record_of_a_run_it_did_not_see_end(
    kube: Kube, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    repo = make_config_repo(tmp_path / "config", kube_cluster.kubeconfig, duration="2s")
    leader = make_reconciler(repo, watch=False)
    status = _publisher(repo, tmp_path / "leader")
    record = _publisher(repo, tmp_path / "follower")
    follower = make_reconciler(
        repo, watch=False, is_leader=lambda: False, leader_record=record.leader_record
    )
    alone = make_reconciler(repo, watch=False, is_leader=lambda: False)
    replicas: list[Reconciler] = [leader, follower, alone]
    try:
        first = leader.run_once()
        assert first.dispatched
        assert status.publish(first) is not None
        follower.seed(record.recorded())
        for replica in (follower, alone):
            seen = replica.run_once()
            assert all(seen.states[op].phase.active for op in first.dispatched)

        # The leader sees one run succeed and records it; then its Job is deleted (as its
        # run.ttl would) before either replica reads the cluster again.
        ended: CycleResult | None = None
        op = ""
        deadline = time.monotonic() + 60
        while not op and time.monotonic() < deadline:
            time.sleep(0.5)
            ended = leader.run_once()
            op = next((o for o in first.dispatched if ended.states[o].phase is Phase.SUCCEEDED), "")
        assert ended is not None and op, "no run succeeded within 60 s"
        assert status.publish(ended) is not None
        workload = ended.states[op]
        assert kube.delete_workload(workload.namespace, workload.name)
        deadline = time.monotonic() + 30
        while any(j["metadata"]["name"] == workload.name for j in kube.list_managed("Job").items):
            assert time.monotonic() < deadline, "the Job was not deleted"
            time.sleep(0.2)

        followed = follower.run_once()
        assert followed.states[op].phase is Phase.SUCCEEDED
        assert followed.states[op].phase is leader.run_once().states[op].phase
        # without the record, the gone Job reads as deleted by hand
        assert alone.run_once().states[op].phase is Phase.STOPPED
    finally:
        for replica in replicas:
            replica.close()
