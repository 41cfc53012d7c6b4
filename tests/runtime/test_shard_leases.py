"""Partition Leases: fair share, a replica joining, one dying or stopping, against Leases in
memory and a clock moved by hand (the real API: tests/cluster/test_shards.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from support.clocks import SteppedClock
from support.leases import MemoryLeases

from reconciler.runtime.shards import ShardManager, fair_share

PARTS = ("p-a", "p-b")


def _clock() -> SteppedClock:
    return SteppedClock(datetime(2026, 1, 1, tzinfo=UTC), 1000.0)


def _replica(leases: MemoryLeases, clock: SteppedClock, identity: str) -> ShardManager:
    shards = ShardManager(None, "ns", "r", identity, 15, 10, 2, clock, leases=leases)
    shards.assign(PARTS)
    return shards


def _run(clock: SteppedClock, seconds: float, *replicas: ShardManager) -> None:
    """Step each replica every 2 s for ``seconds``; never two owners of one partition."""
    for _ in range(int(seconds / 2)):
        for r in replicas:
            r.step()
        owned = [r.owned() for r in replicas]
        assert sum(len(o) for o in owned) == len(frozenset().union(*owned)), owned
        clock.advance(2)


def test_fair_share_is_the_ceiling() -> None:
    assert [fair_share(p, 2) for p in (0, 1, 2, 3)] == [0, 1, 1, 2]
    assert fair_share(3, 0) == 3


def test_alone_a_replica_holds_every_partition() -> None:
    leases, clock = MemoryLeases(), _clock()
    a = _replica(leases, clock, "a")
    _run(clock, 2, a)
    assert a.owned() == frozenset(PARTS)
    assert leases.holders("r-shard-") == {"r-shard-p-a": "a", "r-shard-p-b": "a"}


def test_a_replica_that_joins_gets_its_share() -> None:
    leases, clock = MemoryLeases(), _clock()
    a, b = _replica(leases, clock, "a"), _replica(leases, clock, "b")
    _run(clock, 4, a)
    _run(clock, 6, a, b)
    assert len(a.owned()) == len(b.owned()) == 1
    assert (a.live, b.live) == (2, 2)


def test_a_killed_replicas_partition_is_taken_once_its_lease_expires() -> None:
    leases, clock = MemoryLeases(), _clock()
    a, b = _replica(leases, clock, "a"), _replica(leases, clock, "b")
    _run(clock, 10, a, b)
    (lost,) = a.owned()
    _run(clock, 14, b)  # a is killed: it renews nothing; its Leases last 15 s
    assert lost not in b.owned()
    _run(clock, 4, b)
    assert b.owned() == frozenset(PARTS)
    assert b.live == 1


def test_a_stopped_replica_lets_go_at_once() -> None:
    leases, clock = MemoryLeases(), _clock()
    a, b = _replica(leases, clock, "a"), _replica(leases, clock, "b")
    _run(clock, 10, a, b)
    a.stop(release=True)
    assert a.owned() == frozenset()
    _run(clock, 2, b)
    assert b.owned() == frozenset(PARTS)


def test_a_partition_gone_from_the_config_is_let_go() -> None:
    leases, clock = MemoryLeases(), _clock()
    a = _replica(leases, clock, "a")
    _run(clock, 2, a)
    a.assign(["p-a"])
    _run(clock, 2, a)
    assert a.owned() == frozenset({"p-a"})
    assert leases.holders("r-shard-p-b") == {"r-shard-p-b": ""}


def test_a_failed_renewal_stops_acting_at_once_and_a_stuck_one_by_the_deadline() -> None:
    leases, clock = MemoryLeases(), _clock()
    a = _replica(leases, clock, "a")
    _run(clock, 2, a)
    clock.advance(8)  # no step (a renewal hangs): renewed 10 s ago
    assert a.owned() == frozenset()
    _run(clock, 2, a)
    assert a.owned() == frozenset(PARTS)
    leases.down = True
    _run(clock, 2, a)
    assert a.owned() == frozenset()
    leases.down = False
    _run(clock, 2, a)
    assert a.owned() == frozenset(PARTS)


def test_the_lease_of_a_replica_gone_is_deleted_after_ten_durations() -> None:
    leases, clock = MemoryLeases(), _clock()
    a, b = _replica(leases, clock, "a"), _replica(leases, clock, "b")
    _run(clock, 4, a, b)
    assert len(leases.holders("r-member-")) == 2
    _run(clock, 146, b)  # a is killed: its membership Lease is left as it was
    assert len(leases.holders("r-member-")) == 2
    _run(clock, 6, b)
    assert list(leases.holders("r-member-").values()) == ["b"]
    assert b.owned() == frozenset(PARTS)


def test_no_partition_is_taken_while_another_replica_holds_one_it_does_not_know() -> None:
    """a cut p-a and p-b (an older config or record); b cuts p-ab, which shares their
    clusters: b takes nothing until a holds no Lease b does not know, nor after a kill
    until those Leases expire."""
    leases, clock = MemoryLeases(), _clock()
    a, b = _replica(leases, clock, "a"), _replica(leases, clock, "b")
    b.assign(("p-ab",))
    _run(clock, 4, a)
    _run(clock, 6, a, b)
    assert a.owned() and b.owned() == frozenset()
    a.assign(("p-ab",))  # a reads the newer record: it lets its partitions go
    _run(clock, 4, a, b)
    assert len(a.owned() | b.owned()) == 1 and (a.owned() | b.owned()) == {"p-ab"}

    c = _replica(leases, clock, "c")  # an older cut again, while a or b holds p-ab
    _run(clock, 8, a, b, c)
    assert c.owned() == frozenset()
