"""``stopped: true`` on an operation (or a workflow: each child): an active run is deleted,
reason ``StoppedInRepo``, whatever ``prune.enabled`` and the mass-prune guard say; a pending
one is not dispatched; ``false`` and a ``generation`` bump run it again. Against the fake
Kube; the dev-cluster version is tests/cluster/test_stop_in_repo_live.py."""

from __future__ import annotations

from support.builders import World
from support.fake_kube import FakeCycles

from reconciler.core.observation.observe import ObservedReason
from reconciler.core.plan import StopReason
from reconciler.core.reporting.status import read_status
from reconciler.core.types import Phase, Provenance
from reconciler.core.views.diff import diff_plans, diff_to_dict, diff_to_markdown
from reconciler.core.views.queue_view import BlameLine

COMMIT = "c0ffee" * 6 + "beef"
# each change is a new commit: the reconciler recompiles only when the version moves
FIRST, UNSTOPPED, BUMPED = "1" * 40, "2" * 40, "3" * 40


def world(*, stopped: bool = False, generation: int = 1, ops: int = 1) -> World:
    w = World().queue("q")
    for i in range(ops):
        b = w.op(f"p/train-{i}").provenance("stopped", "projects/p/operations/train.yaml", 4)
        b._fields["generation"] = generation
        if stopped and i == 0:
            b.stopped()
    return w


def test_an_active_run_stopped_in_the_repo_is_deleted_and_stays_stopped() -> None:
    h = FakeCycles(world().repo(FIRST))
    assert h.cycle().dispatched == ("p/train-0",)
    assert ("p", "p-train-0-g1") in h.cluster.jobs

    h.repo = world(stopped=True).repo(COMMIT)
    stopping = h.cycle(after=10)
    assert stopping.stopped == ("p/train-0",)
    assert stopping.plan is not None
    (stop,) = stopping.plan.stop
    assert stop.reason is StopReason.STOPPED_IN_REPO
    assert ("p", "p-train-0-g1") not in h.cluster.jobs
    state = stopping.states["p/train-0"]
    assert (state.phase, state.reason) == (Phase.STOPPED, ObservedReason.STOPPED_IN_REPO)
    assert state.message == (
        f"stopped: true at projects/p/operations/train.yaml:4 (config {COMMIT[:12]}): "
        "its workload is deleted"
    )
    assert state.stopped_by == {
        "commit": COMMIT,
        "author": "",
        "file": "projects/p/operations/train.yaml",
        "line": 4,
    }
    for _ in range(2):
        later = h.cycle(after=10)
        assert later.dispatched == () and later.stopped == ()
        assert later.states["p/train-0"].reason is ObservedReason.STOPPED_IN_REPO

    # the record keeps the commit (and author) that stopped it, and reads back
    files = h.status_of(later)
    record = read_status(files).operations["p/train-0"]
    assert (record.phase, record.reason) == ("Stopped", "StoppedInRepo")
    assert record.stopped_by == state.stopped_by
    restarted = h.restart(files)
    again = restarted.cycle(after=1)
    assert again.dispatched == ()
    assert again.states["p/train-0"].reason is ObservedReason.STOPPED_IN_REPO

    # false alone keeps it stopped (that run is over); false and a bump run it again
    h.repo = world().repo(UNSTOPPED)
    assert h.cycle(after=1).dispatched == ()
    h.repo = world(generation=2).repo(BUMPED)
    assert h.cycle(after=1).dispatched == ("p/train-0",)
    assert ("p", "p-train-0-g2") in h.cluster.jobs


def test_a_stop_in_the_repo_needs_no_prune_and_passes_the_mass_prune_guard() -> None:
    base = world(ops=1)
    base.with_org(prune=False)
    h = FakeCycles(base.repo(FIRST))
    h.cycle()
    # the only active operation is stopped: 100% of the active ones, past any guard
    stopped = world(stopped=True, ops=1)
    stopped.with_org(prune=False, max_prune_fraction=0.1)
    h.repo = stopped.repo(COMMIT)
    result = h.cycle(after=1)
    assert result.stopped == ("p/train-0",)
    assert result.plan is not None and result.plan.prune_refused is None


def test_a_pending_operation_stopped_in_the_repo_is_not_dispatched() -> None:
    w = world(stopped=True, ops=2)
    plan = w.plan()
    assert [d.operation for d in plan.dispatch] == ["p/train-1"]
    assert [p.operation for p in plan.pending] == []
    assert plan.stop == ()
    h = FakeCycles(w.repo(COMMIT))
    result = h.cycle()
    assert result.dispatched == ("p/train-1",)
    record = read_status(h.status_of(result)).operations["p/train-0"]
    assert (record.phase, record.reason) == ("Queued", "StoppedInRepo")
    assert record.message == (
        "stopped: true at projects/p/operations/train.yaml:4: not dispatched "
        "(set it to false and bump generation to run it)"
    )
    # unstopped, it is pending again (it never ran)
    h.repo = world(ops=2).repo(UNSTOPPED)
    assert h.cycle(after=1).dispatched == ("p/train-0",)


def test_a_workflow_stopped_in_the_repo_stops_every_child() -> None:
    def sweep(stopped: bool) -> World:
        w = World().queue("q")
        for i in range(3):
            b = w.op(f"p/sweep-{i}").child_of("p/sweep", i)
            if stopped:
                b.stopped()
        return w

    h = FakeCycles(sweep(False).repo(FIRST))
    assert h.cycle().dispatched == ("p/sweep-0", "p/sweep-1", "p/sweep-2")
    h.repo = sweep(True).repo(COMMIT)
    assert h.cycle(after=1).stopped == ("p/sweep-0", "p/sweep-1", "p/sweep-2")
    assert not h.cluster.jobs


def test_a_stop_in_an_unreachable_cluster_waits_for_it() -> None:
    w = world(stopped=True)
    w.observe("p/train-0", Phase.RUNNING, queue="q")
    w.unreachable.add("local")
    assert w.plan().stop == ()


def test_the_pr_plan_lists_stops() -> None:
    base, head = world(ops=2), world(stopped=True, ops=2)
    base.observe("p/train-0", Phase.RUNNING, queue="q")
    head.observe("p/train-0", Phase.RUNNING, queue="q")
    diff = diff_plans((base.repo(), base.plan()), (head.repo(), head.plan()))
    assert [(s.operation, s.reason, s.action) for s in diff.stops] == [
        ("p/train-0", "StoppedInRepo", "delete")
    ]
    assert diff_to_dict(diff)["stops"] == [
        {"operation": "p/train-0", "queue": "q", "reason": "StoppedInRepo", "action": "delete"}
    ]
    text = diff_to_markdown(diff)
    assert "### Stops" in text
    assert "| p/train-0 | q | StoppedInRepo | its running workload is deleted |" in text

    pending_base, pending_head = world(ops=2), world(stopped=True, ops=2)
    diff = diff_plans(
        (pending_base.repo(), pending_base.plan()), (pending_head.repo(), pending_head.plan())
    )
    assert [(s.operation, s.reason, s.action) for s in diff.stops] == [
        ("p/train-0", "StoppedInRepo", "hold")
    ]
    assert diff.has_changes


def test_provenance_of_stopped_is_kept_for_the_message() -> None:
    op = world(stopped=True).repo().operations[0]
    where = Provenance("projects/p/operations/train.yaml", 4, "operation")
    assert op.provenance["stopped"] == where


def test_the_record_names_the_commit_and_author_that_set_stopped() -> None:
    """With Git (``reconciler run`` on a repo), the commit that last changed the line
    ``stopped: true`` and its author replace the config commit (``git blame``)."""
    h = FakeCycles(world().repo(FIRST))
    asked: list[tuple[str, str]] = []

    def blame(rev: str, path: str) -> list[BlameLine]:
        asked.append((rev, path))
        return [BlameLine(n, f"{n}" * 40, f"author {n}", None, "s", "") for n in range(1, 6)]

    h.reconciler._blame = blame
    h.cycle()
    h.repo = world(stopped=True).repo(COMMIT)
    stopping = h.cycle(after=1)
    assert asked == [(COMMIT, "projects/p/operations/train.yaml")]
    assert stopping.stopped == ("p/train-0",)
    later = h.cycle(after=1).states["p/train-0"]
    assert later.stopped_by == {
        "commit": "4" * 40,
        "author": "author 4",
        "file": "projects/p/operations/train.yaml",
        "line": 4,
    }
    assert later.message.endswith(f"its workload is deleted; set by author 4 in {'4' * 12}")


def test_a_job_still_being_deleted_keeps_the_reason_of_its_stop() -> None:
    h = FakeCycles(world().repo(FIRST))
    h.cycle()
    deleting: list[tuple[str, str]] = []

    def slow_delete(namespace: str, name: str) -> bool:  # a finalizer holds the Job a while
        deleting.append((namespace, name))
        h.cluster.set_phase(namespace, name, "Deleting")
        return True

    h.cluster.delete = slow_delete  # type: ignore[method-assign]
    h.repo = world(stopped=True).repo(COMMIT)
    assert h.cycle(after=1).stopped == ("p/train-0",)
    assert deleting == [("p", "p-train-0-g1")]
    listed = h.cycle(after=1).states["p/train-0"]  # listed, Stopped, being deleted
    assert (listed.phase, listed.reason) == (Phase.STOPPED, ObservedReason.STOPPED_IN_REPO)
    assert listed.stopped_by is not None and listed.stopped_by["line"] == 4
    del h.cluster.jobs[("p", "p-train-0-g1")]
    gone = h.cycle(after=1).states["p/train-0"]
    assert (gone.phase, gone.reason) == (Phase.STOPPED, ObservedReason.STOPPED_IN_REPO)
