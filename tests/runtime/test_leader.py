"""Leader election logic against an in-memory Lease with resourceVersion checks and a fake
clock (the real API is exercised in tests/cluster/test_leader_lease.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from support.clocks import SteppedClock

from reconciler.adapters.kube import KubeError
from reconciler.adapters.lease import LeaseConflict, LeaseRecord
from reconciler.runtime.leader import LeaderElector


def _clock() -> SteppedClock:
    return SteppedClock(datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=1000), 1000.0)


class MemoryLease:
    """Stores one record; a write with a stale resourceVersion is a conflict."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise KubeError("connection refused")

    def get(self) -> LeaseRecord | None:
        self._check()
        return self.record

    def create(self, record: LeaseRecord) -> LeaseRecord:
        self._check()
        if self.record is not None:
            raise LeaseConflict("already exists", 409)
        return self._store(record)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        self._check()
        assert self.record is not None
        if record.resource_version and record.resource_version != self.record.resource_version:
            raise LeaseConflict("stale", 409)
        return self._store(record)

    def _store(self, record: LeaseRecord) -> LeaseRecord:
        self.version += 1
        self.record = replace(record, resource_version=str(self.version))
        return self.record


def _elector(lease: MemoryLease, clock: SteppedClock, identity: str) -> LeaderElector:
    return LeaderElector(None, "ns", "reconciler", identity, 15, 10, 2, clock, lease=lease)


def test_a_lease_first_seen_is_not_judged_expired_by_its_old_renew_time() -> None:
    lease, clock = MemoryLease(), _clock()
    a = _elector(lease, clock, "a")
    a.try_acquire_or_renew()
    clock.advance(3600)  # the record's renewTime is an hour old ...
    b = _elector(lease, clock, "b")
    assert b.try_acquire_or_renew() is False  # ... but b only trusts its own clock
    clock.advance(15.5)
    assert b.try_acquire_or_renew() is True


def test_first_acquires_second_follows_until_expiry() -> None:
    lease, clock = MemoryLease(), _clock()
    a, b = _elector(lease, clock, "a"), _elector(lease, clock, "b")
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    assert (a.is_leader(), b.is_leader()) == (True, False)
    assert lease.record is not None and lease.record.transitions == 0

    clock.advance(14)  # a stopped renewing; b's view: changed 14 s ago, duration 15 s
    assert b.try_acquire_or_renew() is False
    assert a.is_leader() is False  # a's renew deadline (10 s) passed long ago
    clock.advance(1.5)
    assert b.try_acquire_or_renew() is True
    assert lease.record.holder == "b" and lease.record.transitions == 1


def test_a_renewing_leader_keeps_the_lease() -> None:
    lease, clock = MemoryLease(), _clock()
    a, b = _elector(lease, clock, "a"), _elector(lease, clock, "b")
    a.try_acquire_or_renew()
    acquired = lease.record.acquire_time if lease.record else None
    for _ in range(20):
        clock.advance(2)
        assert a.try_acquire_or_renew() is True
        assert b.try_acquire_or_renew() is False
    assert lease.record is not None
    assert (lease.record.holder, lease.record.acquire_time) == ("a", acquired)
    assert lease.record.renew_time == clock.now()


def test_a_failed_renewal_stops_leading_at_once() -> None:
    lease, clock = MemoryLease(), _clock()
    a = _elector(lease, clock, "a")
    a.try_acquire_or_renew()
    lease.down = True
    clock.advance(2)
    assert a.try_acquire_or_renew() is False
    assert a.is_leader() is False  # not waiting for the renew deadline
    lease.down = False
    assert a.try_acquire_or_renew() is True  # still ours on the server: renewed


def test_renew_deadline_passing_stops_leading_without_a_call() -> None:
    lease, clock = MemoryLease(), _clock()
    a = _elector(lease, clock, "a")
    a.try_acquire_or_renew()
    clock.advance(9.9)
    assert a.is_leader() is True
    clock.advance(0.2)
    assert a.is_leader() is False


def test_the_deadline_passing_is_a_logged_change_of_leadership(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lease, clock = MemoryLease(), _clock()
    changes: list[bool] = []
    a = _elector(lease, clock, "a")
    a.on_change = changes.append
    a.try_acquire_or_renew()
    clock.advance(10.1)  # the renewal call is still hanging: no attempt has returned
    with caplog.at_level("WARNING", logger="reconciler.leader"):
        assert a.is_leader() is False
        assert a.is_leader() is False  # reported once
    assert changes == [True, False]
    assert [r.getMessage() for r in caplog.records] == [
        "lost leadership: renewal failed: none succeeded within 10s"
    ]
    assert a.try_acquire_or_renew() is True  # still ours on the server: leads again
    assert a.is_leader() is True and changes == [True, False, True]


def test_overwritten_lease_is_lost_on_the_next_attempt() -> None:
    lease, clock = MemoryLease(), _clock()
    a = _elector(lease, clock, "a")
    a.try_acquire_or_renew()
    assert lease.record is not None
    lease.update(replace(lease.record, holder="intruder"))
    clock.advance(2)
    assert a.try_acquire_or_renew() is False
    assert a.is_leader() is False and a.holder() == "intruder"


def test_release_hands_over_at_once() -> None:
    lease, clock = MemoryLease(), _clock()
    changes: list[bool] = []
    a = LeaderElector(None, "ns", "l", "a", 15, 10, 2, clock, lease=lease, on_change=changes.append)
    b = _elector(lease, clock, "b")
    a.try_acquire_or_renew()
    assert b.try_acquire_or_renew() is False
    assert a.release() is True
    assert a.is_leader() is False and changes == [True, False]
    assert lease.record is not None and lease.record.holder == ""
    assert b.try_acquire_or_renew() is True  # no waiting for expiry
    assert a.release() is False  # not ours any more


def test_a_stale_write_is_a_conflict_not_a_double_leader() -> None:
    lease, clock = MemoryLease(), _clock()
    a, b = _elector(lease, clock, "a"), _elector(lease, clock, "b")
    a.try_acquire_or_renew()
    assert b.try_acquire_or_renew() is False  # b's expiry clock starts when it first sees it
    clock.advance(16)  # expired for b; a is about to renew too
    stale = lease.get()
    assert b.try_acquire_or_renew() is True
    # a's renewal based on the stale read loses the race
    assert stale is not None
    with pytest.raises(LeaseConflict):
        lease.update(replace(stale, holder="a"))
    assert a.try_acquire_or_renew() is False
    assert (a.is_leader(), b.is_leader()) == (False, True)


@pytest.mark.parametrize(("duration", "deadline", "retry"), [(10, 10, 2), (15, 2, 2), (5, 10, 1)])
def test_inconsistent_timings_are_refused(duration: float, deadline: float, retry: float) -> None:
    with pytest.raises(ValueError):
        LeaderElector(None, "ns", "l", "a", duration, deadline, retry, lease=MemoryLease())
