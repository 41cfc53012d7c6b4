"""A shard's status write (core/reporting/shards.py): each shard's files joined on the
branch read as the one reconciler's of the whole repo, whatever order they land in."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from decimal import Decimal

from reconciler.core.plan import plan_repo
from reconciler.core.plan.ledger import Ledger, LedgerEntry
from reconciler.core.plan.partitions import (
    Partition,
    partition_repo,
    restrict_repo,
    shard_scope,
)
from reconciler.core.reporting.notify import Owed, encode_owed, read_owed
from reconciler.core.reporting.shards import owed_for, shard_changes
from reconciler.core.reporting.status import (
    NOTIFY_FILE,
    ClusterStatus,
    flat_operation_path,
    operation_path,
    order_path,
    path_operation,
    render_status,
)
from reconciler.core.types import CompiledRepo, Phase
from tests.support.builders import NOW, World


def _world() -> World:
    world = (
        World()
        .queue("qa", cluster="a", priority=5, concurrency=1)
        .queue("qb", cluster="b", priority=9, concurrency=1)
        .queue("qb2", cluster="b", priority=1)
    )
    world.ops("t/a-{}", 3, queue="qa")
    world.ops("t/b-{}", 3, queue="qb")
    world.ops("t/c-{}", 1, queue="qb2")
    world.observe("t/b-1", Phase.RUNNING, queue="qb", cluster="b")
    return world


def _ledger(repo: CompiledRepo) -> Ledger:
    def entry(op: str, queue: str, cluster: str, days: int) -> LedgerEntry:
        end = NOW - timedelta(days=days)
        return LedgerEntry(
            operation=op,
            generation=1,
            workload=op.replace("/", "-"),
            queue=queue,
            cluster=cluster,
            phase="Succeeded",
            requests={},
            start=end - timedelta(hours=1),
            end=end,
            cost=Decimal(0),
        )

    entries = [entry("t/a-9", "qa", "a", 1), entry("t/b-9", "qb", "b", 40)]
    return Ledger.of(e for e in entries if e.cluster in repo.clusters)


def _render(world: World, repo: CompiledRepo) -> dict[str, bytes]:
    observed = [o for o in world.observed.values() if o.cluster in repo.clusters]
    return render_status(
        repo,
        plan_repo(repo, observed, NOW),
        {},
        clusters=tuple(ClusterStatus(name=c) for c in sorted(repo.clusters)),
        ledger=_ledger(repo),
    )


def _apply(tip: Mapping[str, bytes], changes: Mapping[str, bytes | None]) -> dict[str, bytes]:
    out = dict(tip)
    for path, data in changes.items():
        if data is None:
            out.pop(path, None)
        else:
            out[path] = data
    return out


def _write(tip: dict[str, bytes], world: World, part: Partition) -> dict[str, bytes]:
    repo = world.repo()
    ours = _render(world, restrict_repo(repo, [part]))
    return _apply(tip, shard_changes(tip, ours, shard_scope(repo, [part])))


def test_the_shards_writes_together_are_the_whole_reconcilers() -> None:
    world = _world()
    whole = _render(world, world.repo())
    pa, pb = partition_repo(world.repo())
    for first, second in ((pa, pb), (pb, pa)):
        tip = _write(_write({}, world, first), world, second)
        assert tip == whole
        assert (
            shard_changes(
                tip,
                _render(world, restrict_repo(world.repo(), [first])),
                shard_scope(world.repo(), [first]),
            )
            == {}
        )


def test_a_shard_deletes_only_its_own_files() -> None:
    world = _world()
    pa, pb = sorted(partition_repo(world.repo()), key=lambda p: p.clusters)
    tip = _write(_write({}, world, pa), world, pb)
    world.remove("t/a-3", "t/b-3")  # each shard's operation leaves the repo
    after = _write(tip, world, pa)
    assert operation_path("t/a-3") not in after
    assert operation_path("t/b-3") in after  # b's: b's shard deletes it
    assert order_path("qb") in after
    assert _write(after, world, pb) == _render(world, world.repo())


def test_a_shards_first_write_on_a_flat_branch_moves_its_own_records_alone() -> None:
    """A branch written before the buckets: each shard's first write moves its partitions'
    records (and deletes its operation gone from the repo) and leaves the other shard's,
    flat or moved, to it; after both, the branch is the whole reconciler's."""
    world = _world()
    flat: dict[str, bytes] = {}
    for path, data in _render(world, world.repo()).items():
        operation = path_operation(path)
        flat[flat_operation_path(operation) if operation else path] = data
    pa, pb = sorted(partition_repo(world.repo()), key=lambda p: p.clusters)
    world.remove("t/a-3")
    tip = _write(flat, world, pb)
    assert operation_path("t/b-2") in tip and flat_operation_path("t/a-2") in tip
    # b's, recorded when it ran on a: b's all the same (its operation is in b's partition)
    moved = operation_path("t/b-2")
    tip[moved] = tip[moved].replace(b"cluster: b", b"cluster: a")
    after = _write(tip, world, pa)
    for n in (1, 2):
        assert operation_path(f"t/a-{n}") in after
        assert flat_operation_path(f"t/a-{n}") not in after
        assert operation_path(f"t/b-{n}") in after
    assert after[moved] == tip[moved]
    assert not {flat_operation_path("t/a-3"), operation_path("t/a-3")} & after.keys()
    assert _write(after, world, pb) == _render(world, world.repo())


def test_a_human_file_and_a_queue_gone_from_the_repo() -> None:
    world = _world()
    pa, pb = sorted(partition_repo(world.repo()), key=lambda p: p.clusters)
    tip = {**_write(_write({}, world, pa), world, pb), "status/NOTES.md": b"kept"}
    del world.queues["qb2"]
    world.remove("t/c-1")
    after = _write(tip, world, pa)  # a's shard drops the gone queue from the shared file
    assert b"qb2" not in after["status/queues.yaml"]
    assert after["status/NOTES.md"] == b"kept"


def _owed(*ops: str) -> bytes:
    return encode_owed(
        tuple(
            Owed(f"{op}:u:Dispatched", "http://127.0.0.1:9/h", op, "?", "t", None, "o:1:1", {})
            for op in ops
        ),
        0,
    )


def test_each_shard_keeps_the_others_owed_notifications_and_settles_its_own() -> None:
    """``_notify.yaml`` is shared: a shard writes its own entries beside the others', drops
    its own once settled, and what is owed alone makes no commit."""
    world = _world()
    repo = world.repo()
    pa, pb = sorted(partition_repo(repo), key=lambda p: p.clusters)
    sa, sb = shard_scope(repo, [pa]), shard_scope(repo, [pb])
    ours_a = _render(world, restrict_repo(repo, [pa]))
    ours_b = _render(world, restrict_repo(repo, [pb]))
    tip = _apply({}, shard_changes({}, {**ours_a, NOTIFY_FILE: _owed("t/a-1")}, sa))
    tip = _apply(tip, shard_changes(tip, {**ours_b, NOTIFY_FILE: _owed("t/b-1")}, sb))
    keys = [e.operation for e in read_owed(tip[NOTIFY_FILE])[0]]
    assert sorted(keys) == ["t/a-1", "t/b-1"]
    assert [e.operation for e in owed_for(tip[NOTIFY_FILE], sa)] == ["t/a-1"]
    assert shard_changes(tip, ours_a, sa) == {}  # settled: it leaves with the next commit
    world.observe("t/a-1", Phase.RUNNING, queue="qa", cluster="a")
    moved = _render(world, restrict_repo(world.repo(), [pa]))
    tip = _apply(tip, shard_changes(tip, moved, sa))
    assert [e.operation for e in read_owed(tip[NOTIFY_FILE])[0]] == ["t/b-1"]
    tip = _apply(tip, shard_changes(tip, ours_b, sb))
    assert NOTIFY_FILE in tip  # b's status unchanged: its settled entry rides later
