"""Leader election on a real Lease: one leader, takeover after a kill, hand-over on
release, and leadership lost as soon as someone else writes the Lease."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from support.cluster import KubeCluster
from support.helpers import wait_until

from reconciler.adapters.lease import LeaseClient, LeaseConflict
from reconciler.runtime.leader import LeaderElector

pytestmark = pytest.mark.cluster

LEASE, DEADLINE, RETRY = 3.0, 2.0, 0.5


@pytest.fixture
def electors(kube_cluster: KubeCluster, namespace: str) -> Iterator[list[LeaderElector]]:
    made: list[LeaderElector] = []
    yield made
    for elector in made:
        elector.stop(release=False)


def _elector(kube: KubeCluster, namespace: str, identity: str) -> LeaderElector:
    return LeaderElector(
        kube.api_client(), namespace, "reconciler", identity, LEASE, DEADLINE, RETRY
    )


def _leaders(electors: list[LeaderElector]) -> list[str]:
    return [e.identity for e in electors if e.is_leader()]


def test_exactly_one_leads_and_the_other_takes_over_after_a_kill(
    kube_cluster: KubeCluster, namespace: str, electors: list[LeaderElector]
) -> None:
    a, b = _elector(kube_cluster, namespace, "a"), _elector(kube_cluster, namespace, "b")
    electors += [a, b]
    a.start()
    wait_until(a.is_leader, timeout=10, what="a to lead")
    b.start()
    for _ in range(10):  # several renew periods: never two leaders, a keeps it
        time.sleep(RETRY)
        assert _leaders(electors) == ["a"]
    lease = LeaseClient(kube_cluster.api_client(), namespace, "reconciler").get()
    assert lease is not None and lease.holder == "a" and lease.duration_seconds == 3

    a.stop(release=False)  # like kill -9 or a partition: the Lease is left to expire
    killed = time.monotonic()
    last = LeaseClient(kube_cluster.api_client(), namespace, "reconciler").get()
    assert last is not None and last.holder == "a" and last.renew_time is not None
    wait_until(b.is_leader, timeout=LEASE + 2 * RETRY + 2, what="b to take over")
    # b's first sight of a's last renewal may lag it by one retry period
    assert time.monotonic() - killed <= LEASE + 2 * RETRY + 0.5
    assert not a.is_leader()
    lease = LeaseClient(kube_cluster.api_client(), namespace, "reconciler").get()
    assert lease is not None and (lease.holder, lease.transitions) == ("b", 1)
    assert lease.acquire_time is not None
    # within lease_duration + retry_period of a's last renewal (same host clock; 0.3 s
    # for the API round trips)
    gap = (lease.acquire_time - last.renew_time).total_seconds()
    assert LEASE <= gap <= LEASE + RETRY + 0.3, gap


def test_a_released_lease_is_taken_over_at_once(
    kube_cluster: KubeCluster, namespace: str, electors: list[LeaderElector]
) -> None:
    a, b = _elector(kube_cluster, namespace, "a"), _elector(kube_cluster, namespace, "b")
    electors += [a, b]
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    a.stop(release=True)  # clean shutdown, never started: release() alone
    assert not a.is_leader()
    assert b.try_acquire_or_renew() is True  # no waiting for expiry
    assert _leaders(electors) == ["b"]


def test_leadership_is_lost_when_another_identity_writes_the_lease(
    kube_cluster: KubeCluster, namespace: str, electors: list[LeaderElector]
) -> None:
    a = _elector(kube_cluster, namespace, "a")
    electors.append(a)
    a.start()
    wait_until(a.is_leader, timeout=10, what="a to lead")
    store = LeaseClient(kube_cluster.api_client(), namespace, "reconciler")

    def overwrite() -> bool:  # read-modify-write by another identity; retried on conflict
        current = store.get()
        assert current is not None
        try:
            store.update(replace(current, holder="intruder"))
        except LeaseConflict:
            return False
        return True

    wait_until(overwrite, timeout=10, what="the intruder's write", interval=0.01)
    written = time.monotonic()
    wait_until(lambda: not a.is_leader(), timeout=5, what="a to notice", interval=0.02)
    assert time.monotonic() - written <= RETRY + 0.3  # at its next renewal at the latest
    assert a.holder() == "intruder"
    time.sleep(2 * RETRY)
    assert not a.is_leader()  # and it does not grab it back while the intruder's claim lives
    after = store.get()
    assert after is not None and after.holder == "intruder"
