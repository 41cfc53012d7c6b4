"""Two sharded replicas over fake clusters, their Leases in memory and one status branch
(a bare Git repo): each dispatches only to its partition, the branch reads as one
reconciler's, and the survivor of a kill takes the other's partition without dispatching
anything twice."""

from __future__ import annotations

import subprocess
from collections import Counter
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any
from unittest import mock

from support.builders import World
from support.clocks import SteppedClock
from support.fake_kube import FakeCluster, FakeKube
from support.git_commands import git
from support.leases import MemoryLeases

from reconciler.adapters.git import ConfigRepo, Retention, StatusBranch
from reconciler.core.plan.partitions import partition_id
from reconciler.core.reporting.notify import read_owed
from reconciler.core.reporting.replay import (
    Replayed,
    differences,
    outcome_history,
    queue_days,
    replay,
)
from reconciler.core.reporting.shards import owed_for
from reconciler.core.reporting.status import DECISION_FILE, NOTIFY_FILE, read_status
from reconciler.core.types import ClusterSpec, CompiledRepo, Location, NotifyRule, RepoSnapshot
from reconciler.runtime.cycle import CycleResult, Reconciler
from reconciler.runtime.metrics import Metrics
from reconciler.runtime.notify import NOTIFICATION, Notifier, Outbox
from reconciler.runtime.service import Runtime
from reconciler.runtime.shards import ShardManager
from reconciler.runtime.status import StatusPublisher


class Replica:
    """One ``reconciler run --shards`` process: a Reconciler, its Leases, its status writer."""

    def __init__(
        self,
        name: str,
        repo: CompiledRepo,
        clusters: dict[str, FakeCluster],
        leases: MemoryLeases,
        clock: SteppedClock,
        remote: Path,
        cache: Path,
        retention: Retention | None = None,
    ) -> None:
        self.repo, self.clusters = repo, clusters
        self.shards = ShardManager(None, "ns", "r", name, 15, 10, 2, clock, leases=leases)
        self.publisher = StatusPublisher(
            StatusBranch(ConfigRepo(str(remote), cache_dir=cache)),
            retention=retention,
            retention_interval=0,
        )
        self.publisher.owns = self.shards.owns
        self.publisher.retains = self.shards.retains
        self.reconciler = Reconciler(
            lambda: RepoSnapshot(files={}, version=self.repo.version),
            self._connect,  # type: ignore[arg-type]
            clock,
            watch=False,
            shards=self.shards,
            taken_record=self.publisher.taken_record,
        )
        self.reconciler.seed(self.publisher.recorded())

    def _connect(self, spec: ClusterSpec) -> Any:
        return FakeKube(self.clusters[spec.name])

    def cycle(self) -> CycleResult:
        with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: self.repo):
            result = self.reconciler.run_once()
        assert self.reconciler.wait_writes(10.0)
        if result.leading:
            self.publisher.publish(result)
        return result


def _world() -> World:
    world = World().queue("qa", cluster="a", concurrency=1).queue("qb", cluster="b", concurrency=1)
    world.ops("t/a-{}", 3, queue="qa")
    world.ops("t/b-{}", 3, queue="qb")
    return world


def _remote(tmp_path: Path) -> Path:
    remote = tmp_path / "config.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(remote), str(work))
    (work / "reconciler.yaml").write_text("kind: Org\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "one")
    git(work, "push", "-q", "origin", "HEAD:main")
    return remote


def _branch(remote: Path) -> dict[str, bytes]:
    names = subprocess.run(
        ["git", "-C", str(remote), "ls-tree", "-r", "--name-only", "reconciler/status"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return {
        n: subprocess.run(
            ["git", "-C", str(remote), "show", f"reconciler/status:{n}"],
            capture_output=True,
            check=True,
        ).stdout
        for n in names
    }


def _jobs(clusters: dict[str, FakeCluster]) -> Counter[str]:
    return Counter(name for c in clusters.values() for (_, name) in c.jobs)


def test_two_shards_split_the_work_and_one_takes_over_after_a_kill(tmp_path: Path) -> None:
    world = _world()
    repo = world.repo()
    clusters = {n: FakeCluster(n) for n in ("a", "b")}
    leases, clock, remote = MemoryLeases(), SteppedClock(), _remote(tmp_path)
    a, b = (
        Replica(n, repo, clusters, leases, clock, remote, tmp_path / f"cache-{n}") for n in "ab"
    )
    assert not a.cycle().leading  # the first cycle names the partitions; none held yet
    b.cycle()
    for _ in range(4):  # the Leases settle: one partition each
        a.shards.step()
        b.shards.step()
        clock.advance(2)
    assert len(a.shards.owned()) == len(b.shards.owned()) == 1
    ra, rb = a.cycle(), b.cycle()
    assert {ra.dispatched, rb.dispatched} == {("t/a-1",), ("t/b-1",)}
    assert set(ra.compiled.clusters if ra.compiled else ()) != set(
        rb.compiled.clusters if rb.compiled else ()
    )
    view = read_status(_branch(remote))
    assert [q.name for q in view.queues] == ["qa", "qb"]
    assert {q.name: q.active for q in view.queues} == {"qa": 1, "qb": 1}
    assert {op: s.phase for op, s in view.operations.items()} == {
        "t/a-1": "Dispatched",
        "t/a-2": "Queued",
        "t/a-3": "Queued",
        "t/b-1": "Dispatched",
        "t/b-2": "Queued",
        "t/b-3": "Queued",
    }

    # a shard's own pages (``run --shards --http``): the fleet, from the branch
    runtime = Runtime(b.reconciler, b.publisher)
    runtime.completed = b.reconciler.last
    fleet = runtime.fleet()
    assert fleet is not None and fleet.report is not None and not fleet.leading
    assert {q.name: q.active for q in fleet.report.plan.queues} == {"qa": 1, "qb": 1}
    assert fleet.plan is not None
    shown = set(fleet.states) | {p.operation for p in fleet.plan.pending}
    assert shown == {f"t/{q}-{i}" for q in "ab" for i in (1, 2, 3)}
    assert rb.compiled is not None and len(rb.compiled.queues) == 1  # its own cycle: one
    assert runtime.fleet() is fleet  # made once per config and branch

    # a is killed (nothing renewed, nothing released); its partition's run ends meanwhile
    (lost,) = a.shards.owned()
    (where,) = ("a",) if "t/a-1" in ra.dispatched else ("b",)
    ended = "t-a-1-g1" if where == "a" else "t-b-1-g1"
    clusters[where].set_phase("t", ended, "Succeeded")
    for _ in range(9):  # within the Lease's duration and a retry period
        b.shards.step()
        clock.advance(2)
    assert lost in b.shards.owned()
    b.cycle()
    assert _jobs(clusters) == Counter(
        {"t-a-1-g1": 1, "t-b-1-g1": 1, "t-a-2-g1" if where == "a" else "t-b-2-g1": 1}
    )
    view = read_status(_branch(remote))
    assert {q.name: q.active for q in view.queues} == {"qa": 1, "qb": 1}

    # ``serve`` beside the shards: one follower over the whole config shows the fleet
    follower = StatusPublisher(StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "s")))
    serve = Reconciler(
        lambda: RepoSnapshot(files={}, version=repo.version),
        a._connect,  # type: ignore[arg-type]
        clock,
        is_leader=lambda: False,
        watch=False,
        leader_record=follower.leader_record,
    )
    with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: repo):
        shown = serve.run_once()
    assert shown.report is not None
    assert {q.name: q.active for q in shown.report.plan.queues} == {"qa": 1, "qb": 1}
    assert not shown.dispatched


def test_a_partition_taken_starts_from_its_last_owners_record(tmp_path: Path) -> None:
    """a ran t-a-1 to its end and recorded it, then died; the Job is then deleted (its
    TTL). b, which never saw that run, takes the partition: it must not run it again."""
    world = _world().set_queue("qa", concurrency=3)  # room for t/a-1 again, if forgotten
    repo = world.repo()
    clusters = {n: FakeCluster(n) for n in ("a", "b")}
    leases, clock, remote = MemoryLeases(), SteppedClock(), _remote(tmp_path)
    a = Replica("a", repo, clusters, leases, clock, remote, tmp_path / "cache-a")
    b = Replica("b", repo, clusters, leases, clock, remote, tmp_path / "cache-b")
    a.cycle()
    b.cycle()
    for _ in range(2):  # a alone: it holds both
        a.shards.step()
        clock.advance(2)
    assert a.cycle().dispatched == ("t/a-1", "t/a-2", "t/a-3", "t/b-1")
    clusters["a"].set_phase("t", "t-a-1-g1", "Succeeded")
    a.cycle()  # recorded Succeeded on the branch
    clusters["a"].delete("t", "t-a-1-g1")  # a is killed; the Job's TTL deletes it
    for _ in range(10):
        b.shards.step()
        clock.advance(2)
    assert len(b.shards.owned()) == 2
    taken = b.cycle()
    assert taken.leading and taken.dispatched == ()
    assert taken.states["t/a-1"].phase == "Succeeded"
    assert "t-a-1-g1" not in _jobs(clusters)


def _settle(replicas: tuple[Replica, ...], clock: SteppedClock, steps: int = 4) -> None:
    for _ in range(steps):
        for r in replicas:
            r.shards.step()
        clock.advance(2)


def test_a_queue_moved_with_a_run_active_keeps_its_old_cluster_until_the_run_ends(
    tmp_path: Path,
) -> None:
    """qa moves from cluster a to cluster b while t/a-1 runs on a (and prune is on): no
    shard runs t/a-1 again on b, none prunes it on a, qa's concurrency counts it, and
    once it ends qa's next run goes to b and the partitions split again."""
    world = _world().with_org(prune=True, allow_mass_prune=True)
    repo = world.repo("one")
    clusters = {n: FakeCluster(n) for n in ("a", "b")}
    leases, clock, remote = MemoryLeases(), SteppedClock(), _remote(tmp_path)
    a, b = (
        Replica(n, repo, clusters, leases, clock, remote, tmp_path / f"cache-{n}") for n in "ab"
    )
    a.cycle()
    b.cycle()
    _settle((a, b), clock)
    a.cycle()
    b.cycle()
    assert _jobs(clusters) == Counter({"t-a-1-g1": 1, "t-b-1-g1": 1})

    moved = world.set_queue("qa", cluster="b").repo("two")
    a.repo = b.repo = moved
    for _ in range(4):  # the config reaches both; the Leases follow the new partitions
        a.cycle()
        b.cycle()
        _settle((a, b), clock, 2)
    for _ in range(2):
        a.cycle()
        b.cycle()
    assert _jobs(clusters) == Counter({"t-a-1-g1": 1, "t-b-1-g1": 1})
    assert ("t", "t-a-1-g1") in clusters["a"].jobs and ("t", "t-a-1-g1") not in clusters["b"].jobs
    owners = [r for r in (a, b) if r.shards.owned()]
    assert [sorted(r.shards.owned()) for r in owners] == [[partition_id(("a", "b"))]]
    view = read_status(_branch(remote))
    assert view.operations["t/a-1"].phase == "Dispatched"
    assert {q.name: q.active for q in view.queues} == {"qa": 1, "qb": 1}

    clusters["a"].set_phase("t", "t-a-1-g1", "Succeeded")
    for _ in range(4):  # the run ends: qa is b's alone again
        a.cycle()
        b.cycle()
        _settle((a, b), clock, 2)
    for _ in range(2):
        a.cycle()
        b.cycle()
    held = sorted(p for r in (a, b) for p in r.shards.owned())
    assert held == sorted([partition_id(("a",)), partition_id(("b",))])
    assert ("t", "t-a-2-g1") in clusters["b"].jobs
    assert _jobs(clusters)["t-a-1-g1"] == 1 and _jobs(clusters)["t-a-2-g1"] == 1
    assert read_status(_branch(remote)).operations["t/a-1"].phase == "Succeeded"


def test_one_shard_runs_status_retention_and_no_write_is_lost(tmp_path: Path) -> None:
    """With ``--status-max-commits``, only the replica holding the first partition squashes
    the branch; the other's writes stay on it (``tests/adapters/test_status_join.py``
    races the two)."""
    world = _world().set_queue("qa", concurrency=3).set_queue("qb", concurrency=3)
    repo = world.repo()
    clusters = {n: FakeCluster(n) for n in ("a", "b")}
    leases, clock, remote = MemoryLeases(), SteppedClock(), _remote(tmp_path)
    kept = Retention(max_commits=3)
    a, b = (
        Replica(n, repo, clusters, leases, clock, remote, tmp_path / f"cache-{n}", kept)
        for n in "ab"
    )
    a.cycle()
    b.cycle()
    _settle((a, b), clock)
    for i in range(1, 4):  # each cycle, one run ends in each partition: both write
        a.cycle()
        b.cycle()
        for cluster, queue in (("a", "a"), ("b", "b")):
            job = f"t-{queue}-{i}-g1"
            if ("t", job) in clusters[cluster].jobs:
                clusters[cluster].set_phase("t", job, "Succeeded")
    a.cycle()
    b.cycle()
    retaining = [r for r in (a, b) if r.shards.retains()]
    assert len(retaining) == 1
    (other,) = {a, b} - set(retaining)
    assert retaining[0].publisher.squashed > 0 and other.publisher.squashed == 0
    commits = git(remote, "rev-list", "--count", "reconciler/status")
    assert int(commits) <= 4  # the last squash, and the other's write after it at most
    view = read_status(_branch(remote))
    assert {op: s.phase for op, s in view.operations.items()} == {
        f"t/{q}-{i}": "Succeeded" for q in "ab" for i in (1, 2, 3)
    }


def _recorded(remote: Path, cache: Path) -> list[tuple[str, dict[str, bytes]]]:
    """Every status commit that records a decision, oldest first, with its files."""
    branch = StatusBranch(ConfigRepo(str(remote), cache_dir=cache))
    branch.fetch()
    return [(sha, branch.files_at(sha)) for sha in branch.commits_changing(DECISION_FILE)]


def test_each_shards_cycle_is_replayed_from_git_alone(tmp_path: Path) -> None:
    """Each shard's commit records its own cycle, naming the clusters and queues it decided:
    replayed over them alone, every commit agrees with what it records, and an operation's
    outcomes read as one reconciler's."""
    world = (
        World()
        .queue("qa", cluster="a", concurrency=1, quota={"nvidia.com/gpu": 2})
        .queue("qb", cluster="b", concurrency=1, quota={"nvidia.com/gpu": 2})
    )
    world.ops("t/a-{}", 3, queue="qa", gpu=1)
    world.ops("t/b-{}", 3, queue="qb", gpu=1)
    repo = world.repo()
    clusters = {n: FakeCluster(n) for n in ("a", "b")}
    leases, clock, remote = MemoryLeases(), SteppedClock(), _remote(tmp_path)
    a, b = (
        Replica(n, repo, clusters, leases, clock, remote, tmp_path / f"cache-{n}") for n in "ab"
    )
    a.cycle()
    b.cycle()
    _settle((a, b), clock)
    for i in (1, 2):  # each queue runs one at a time: t/x-2 waits for t/x-1
        a.cycle()
        b.cycle()
        for q in "ab":
            clusters[q].set_phase("t", f"t-{q}-{i}-g1", "Succeeded")
        clock.advance(5)
    a.cycle()
    b.cycle()
    cycles = []
    scopes = set()
    for sha, files in _recorded(remote, tmp_path / "why"):
        view = read_status(files)
        assert view.decision is not None and view.decision.clusters
        scopes.add((view.decision.clusters, view.decision.queues))
        decision = replay(view, repo)
        assert differences(repo, decision, view) == [], sha
        assert {q.name for q in decision.plan.queues} == set(view.decision.queues)
        cycles.append(
            Replayed(sha, datetime.fromisoformat(view.decision.clock), view, repo, decision)
        )
        assert len(files[DECISION_FILE]) < 1024  # a few names and a clock
    assert scopes == {(("a",), ("qa",)), (("b",), ("qb",))}
    for q in "ab":  # a queue's days read only its shard's cycles
        own = [c for c in cycles if c.view.decision and f"q{q}" in c.view.decision.queues]
        (day,) = queue_days(f"q{q}", cycles)
        assert day == queue_days(f"q{q}", own)[0] and day.utilisation["nvidia.com/gpu"] > 0
    for q in "ab":
        changes, wrong = outcome_history(f"t/{q}-2", cycles)
        assert wrong == []
        outcomes = [c.outcome.split()[0] for c in changes]
        assert outcomes[0] == "pending" and "dispatched" in outcomes, outcomes


def _notifying(replica: Replica) -> Notifier:
    """The replica's notifier, wired as ``run --shards`` wires it (its outbox not started:
    what it would send stays queued, and owed)."""
    notifier = Notifier(Outbox(Metrics(), lambda *_: b""))
    replica.publisher.owed = notifier.owed_file
    publisher = replica.publisher
    replica.reconciler.on_taken = lambda scope, recorded: notifier.take(
        owed_for(publisher.recorded_owed(), scope),
        {op: s for op, s in recorded.seen.items() if op in scope.operations},
    )
    return notifier


def _queued(notifier: Notifier) -> list[str]:
    box = notifier.outbox._queue.queue
    return [d.key for d in list(box) if d is not None and d.kind == NOTIFICATION]


def test_a_shards_owed_notification_is_sent_once_by_the_partitions_next_owner(
    tmp_path: Path,
) -> None:
    """a owes the notice of t/a-1's dispatch (its receiver never answered) when it is
    killed; b, which owes its own, takes a's partition: it sends a's notice once, with its
    key, and derives none again for runs a already notified."""
    world = _world()
    world.org = replace(
        world.org,
        notifications=(
            NotifyRule(
                frozenset({"Dispatched"}), "http://127.0.0.1:9/h", None, Location("o", 1, 1)
            ),
        ),
    )
    repo = world.repo()
    clusters = {n: FakeCluster(n) for n in ("a", "b")}
    leases, clock, remote = MemoryLeases(), SteppedClock(), _remote(tmp_path)
    a, b = (
        Replica(n, repo, clusters, leases, clock, remote, tmp_path / f"cache-{n}") for n in "ab"
    )
    na, nb = _notifying(a), _notifying(b)
    a.cycle()
    b.cycle()
    _settle((a, b), clock)
    for r, n in ((a, na), (b, nb)):  # dispatched: the notices owed after the write
        n.on_cycle(r.cycle())
    for cluster in clusters.values():
        for ns, name in list(cluster.jobs):
            cluster.set_phase(ns, name, "Running")
    for r, n in ((a, na), (b, nb)):  # a change to write: what is owed rides on it
        n.on_cycle(r.cycle())
    (mine,) = _queued(na)
    (theirs,) = _queued(nb)
    owed = read_owed(_branch(remote)[NOTIFY_FILE])[0]
    assert sorted(e.key for e in owed) == sorted([mine, theirs])

    lost = a.shards.owned()  # a is killed: b takes its partition
    _settle((b,), clock, 9)
    assert lost <= b.shards.owned()
    for _ in range(2):
        nb.on_cycle(b.cycle())
    assert sorted(_queued(nb)) == sorted([mine, theirs])  # a's once, b's still once


def test_a_shards_first_write_after_a_restart_tells_every_record_it_rendered(
    tmp_path: Path,
) -> None:
    """A shard's write renders its whole scope into new memos after a restart, though the
    branch already holds nearly all of it: the heap keeper hears of every record rendered
    (it settles the heap after them), not of the few files that differ from the branch."""
    repo = _world().repo()
    clusters = {n: FakeCluster(n) for n in ("a", "b")}
    leases, clock, remote = MemoryLeases(), SteppedClock(), _remote(tmp_path)
    first = Replica("a", repo, clusters, leases, clock, remote, tmp_path / "cache-1")
    first.cycle()
    for _ in range(4):
        first.shards.step()
        clock.advance(2)
    assert len(first.shards.owned()) == 2  # alone: both partitions
    first.cycle()
    again = Replica("a", repo, clusters, leases, clock, remote, tmp_path / "cache-2")
    rendered: list[int] = []
    again.publisher.after_render = rendered.append
    again.cycle()
    for _ in range(4):
        again.shards.step()
        clock.advance(2)
    assert len(again.shards.owned()) == 2
    again.cycle()
    assert rendered and rendered[0] >= len(repo.operations)
