"""diff_plans: what a pull request changes in queues, compiled specs and the plan."""

from __future__ import annotations

import json

from support.builders import NOW, World

from reconciler.core.plan import PendingReason, plan_repo
from reconciler.core.types import Provenance
from reconciler.core.views.diff import Change, diff_plans, diff_to_json, diff_to_markdown

GPU_PATH = "resources.limits.nvidia.com/gpu"


def team_a(*, quota: int = 2, train1_gpu: int = 1, priority: int = 0) -> World:
    w = World().queue("team-a", quota={"nvidia.com/gpu": quota}, priority=priority)
    w.queue("batch", concurrency=1)
    for i in range(1, 5):
        gpu = train1_gpu if i == 1 else 1
        b = w.op(f"vision/train-{i}", queue="team-a", gpu=gpu)
        b.spec({"kind": "job", "resources": {"limits": {"nvidia.com/gpu": gpu}}})
        b.provenance(GPU_PATH, f"vision/operations/train-{i}.yaml", 7)
        b.provenance("kind", "presets/gpu.yaml", 2, "preset gpu (replace)")
    return w


def run(base: World, head: World):  # type: ignore[no-untyped-def]
    b, h = base.repo("a" * 40), head.repo("b" * 40)
    observed = list(base.observed.values())
    return diff_plans((b, plan_repo(b, observed, NOW)), (h, plan_repo(h, observed, NOW)))


def test_no_change() -> None:
    diff = run(team_a(), team_a())
    assert not diff.has_changes
    assert "No change" in diff_to_markdown(diff)
    assert json.loads(diff_to_json(diff))["changed"] is False


def test_raising_a_quota_dispatches_more() -> None:
    diff = run(team_a(quota=2), team_a(quota=3))
    assert diff.has_changes
    (q,) = diff.queues
    assert (q.name, q.change) == ("team-a", Change.CHANGED)
    assert [(f.path, f.before, f.after) for f in q.fields] == [("quota.nvidia.com/gpu", "2", "3")]
    assert [(t.operation, t.before) for t in diff.newly_dispatched] == [
        ("vision/train-3", "QuotaExceeded")
    ]
    assert diff.newly_pending == ()
    assert [(c.queue, c.before, c.after, c.delta) for c in diff.pending_counts] == [
        ("team-a", 2, 1, -1)
    ]
    md = diff_to_markdown(diff)
    assert "| team-a | quota.nvidia.com/gpu | `2` | `3` |" in md
    assert "| team-a | 2 | 1 | -1 |" in md


def test_spec_change_with_provenance_and_newly_exceeds_quota() -> None:
    diff = run(team_a(), team_a(train1_gpu=4))
    (op,) = diff.operations
    assert op.operation == "vision/train-1"
    by_path = {f.path: f for f in op.fields}
    f = by_path[GPU_PATH]
    assert (f.before, f.after) == (1, 4)
    assert f.after_from == Provenance("vision/operations/train-1.yaml", 7, "operation")
    assert by_path["(resolved).requests.nvidia.com/gpu"].after == "4"

    assert [t.operation for t in diff.newly_exceeds_quota] == ["vision/train-1"]
    (pending,) = diff.newly_pending
    assert (pending.operation, pending.before, pending.reason) == (
        "vision/train-1",
        "dispatch",
        PendingReason.EXCEEDS_QUOTA,
    )
    assert [t.operation for t in diff.newly_dispatched] == ["vision/train-3"]
    md = diff_to_markdown(diff)
    assert "vision/operations/train-1.yaml:7 (operation)" in md
    assert "### Newly ExceedsQuota" in md


def test_newly_policy_violation_and_added_removed_operations() -> None:
    base = team_a()
    head = team_a().reject("vision/train-4", "securityContext.privileged: not allowed")
    head.op("nlp/new", queue="batch")
    diff = run(base, head)
    assert [r.operation for r in diff.newly_policy_violation] == ["vision/train-4"]
    changes = {o.operation: o.change for o in diff.operations}
    assert changes == {"vision/train-4": Change.REMOVED, "nlp/new": Change.ADDED}
    assert [t.operation for t in diff.newly_dispatched] == ["nlp/new"]
    data = json.loads(diff_to_json(diff))
    assert data["newlyPolicyViolation"][0]["message"].startswith("securityContext")
    assert data["newlyDispatched"] == [
        {"operation": "nlp/new", "queue": "batch", "before": "absent"}
    ]


def test_removed_queue_and_priority_change() -> None:
    base = team_a()
    head = team_a(priority=5)
    head.queues.pop("batch")
    diff = run(base, head)
    changes = {q.name: (q.change, [f.path for f in q.fields]) for q in diff.queues}
    assert changes["team-a"] == (Change.CHANGED, ["priority"])
    assert changes["batch"][0] is Change.REMOVED
    assert [(c.queue, c.before, c.after) for c in diff.pending_counts] == [("batch", 0, None)]


def cohort_world(*, borrowing: int, timeout: str = "1h") -> World:
    w = World().cohort("gpu-pool", "2h")
    w.queue(
        "team-a",
        quota={"nvidia.com/gpu": 2},
        cohort="gpu-pool",
        borrowing_limit={"nvidia.com/gpu": borrowing} if borrowing else None,
    )
    w.queue("team-b", quota={"nvidia.com/gpu": 4}, cohort="gpu-pool")
    w.ops("vision/own-{}", 2, queue="team-a", gpu=1)
    w.op("vision/sweep", queue="team-a", gpu=2).timeout(timeout)
    return w


def test_a_pr_that_lets_a_queue_borrow_says_so() -> None:
    diff = run(cohort_world(borrowing=0), cohort_world(borrowing=2))
    (b,) = diff.borrowing
    assert (b.queue, b.verdict, b.before) == ("team-a", "may borrow", None)
    assert b.after == (
        "up to nvidia.com/gpu 2 from cohort gpu-pool, for operations with a timeout of at most 2h"
    )
    assert [(t.operation, t.before) for t in diff.newly_dispatched] == [
        ("vision/sweep", "QuotaExceeded")
    ]
    md = diff_to_markdown(diff)
    assert "### Borrowing from a cohort" in md
    assert "| team-a | may borrow | may not borrow | up to nvidia.com/gpu 2" in md
    assert "| team-a | borrowingLimit.nvidia.com/gpu | — | `2` |" in md
    assert json.loads(diff_to_json(diff))["borrowing"][0]["change"] == "may borrow"


def test_a_pr_that_stops_a_queue_borrowing_says_so() -> None:
    diff = run(cohort_world(borrowing=2), cohort_world(borrowing=0))
    (b,) = diff.borrowing
    assert (b.verdict, b.after) == ("stops borrowing", None)
    assert [(t.operation, t.before, t.reason) for t in diff.newly_pending] == [
        ("vision/sweep", "dispatch", PendingReason.QUOTA_EXCEEDED)
    ]


def test_a_longer_timeout_makes_an_op_wait_borrowing_not_allowed() -> None:
    diff = run(cohort_world(borrowing=2), cohort_world(borrowing=2, timeout="3h"))
    assert diff.borrowing == ()
    assert [(t.operation, t.reason) for t in diff.newly_pending] == [
        ("vision/sweep", PendingReason.BORROWING_NOT_ALLOWED)
    ]


def test_a_value_cannot_leave_its_code_span_in_the_pr_comment() -> None:
    """A value is shown as a code span. A backtick in it closed the span, so the rest of
    the value was Markdown and HTML in the comment (``<img>``, ``@team`` mentions, a
    ``<!--`` hiding the cell); a backslash showed doubled (no escape works in a code
    span). The fence is now longer than any run of backticks in the value."""

    def world(image: str) -> World:
        w = World().queue("team-a")
        w.op("vision/train", queue="team-a").spec({"kind": "job", "image": image})
        return w

    diff = run(world("busybox"), world("evil` <img src=x> @org/team `C:\\tmp"))
    md = diff_to_markdown(diff)
    assert "| `image` | `busybox` | ``evil` <img src=x> @org/team `C:\\tmp`` |" in md
    diff = run(world("busybox"), world("`a|b`"))
    assert "| `image` | `busybox` | `` `a\\|b` `` |" in diff_to_markdown(diff)


# --- flavors ------------------------------------------------------------------------------


def flavored(*order: tuple[str, int], borrow_a100: int = 0) -> World:
    """team-a with quota per flavor in ``order``, three 1-GPU operations."""
    w = World().cohort("pool", "2h").queue("team-a", cohort="pool")
    w.flavored(
        "team-a",
        *((name, {"gpu": gpu}) for name, gpu in order),
        borrowing_limit={"a100": {"gpu": borrow_a100}} if borrow_a100 else {},
    )
    w.ops("vision/train-{}", 3, queue="team-a", gpu=1)
    return w


def test_reordering_a_queues_flavors_moves_its_dispatches_to_another_flavor() -> None:
    diff = run(flavored(("h100", 2), ("a100", 4)), flavored(("a100", 4), ("h100", 2)))
    assert diff.has_changes
    (q,) = diff.queues
    assert [(f.path, f.before, f.after) for f in q.fields] == [
        ("flavors", ["h100", "a100"], ["a100", "h100"])
    ]
    assert [m.text for m in diff.flavor_moves] == [
        "vision/train-1 h100 → a100",
        "vision/train-2 h100 → a100",
    ]
    assert diff.newly_dispatched == () and diff.newly_pending == ()
    md = diff_to_markdown(diff)
    assert "2 move(s) flavor" in md
    assert "### Moves flavor" in md and "| vision/train-1 | team-a | h100 | a100 |" in md
    moves = json.loads(diff_to_json(diff))["flavorMoves"]
    assert moves[0] == {
        "operation": "vision/train-1",
        "queue": "team-a",
        "before": "h100",
        "after": "a100",
    }


def test_a_flavors_quota_change_is_per_flavor_before_and_after() -> None:
    diff = run(flavored(("h100", 2), ("a100", 4)), flavored(("h100", 3), ("a100", 4)))
    (q,) = diff.queues
    assert [(f.path, f.before, f.after) for f in q.fields] == [
        ("flavors.h100.quota.nvidia.com/gpu", "2", "3")
    ]
    assert [m.text for m in diff.flavor_moves] == ["vision/train-3 a100 → h100"]
    assert "| team-a | flavors.h100.quota.nvidia.com/gpu | `2` | `3` |" in diff_to_markdown(diff)


def test_adding_and_removing_a_flavor() -> None:
    diff = run(flavored(("h100", 1)), flavored(("h100", 1), ("a100", 4)))
    (q,) = diff.queues
    assert [(f.path, f.change, f.after) for f in q.fields] == [
        ("flavors", Change.CHANGED, ["h100", "a100"]),
        ("flavors.a100.quota.nvidia.com/gpu", Change.ADDED, "4"),
    ]
    assert [(t.operation, t.before, t.flavor) for t in diff.newly_dispatched] == [
        ("vision/train-2", "QuotaExceeded", "a100"),
        ("vision/train-3", "QuotaExceeded", "a100"),
    ]
    md = diff_to_markdown(diff)
    assert "| vision/train-2 | team-a | QuotaExceeded | dispatch (a100) |" in md
    assert json.loads(diff_to_json(diff))["newlyDispatched"][0]["flavor"] == "a100"
    back = run(flavored(("h100", 1), ("a100", 4)), flavored(("h100", 1)))
    (q,) = back.queues
    assert ("flavors.a100.quota.nvidia.com/gpu", Change.REMOVED) in [
        (f.path, f.change) for f in q.fields
    ]


def test_a_flavors_borrowing_limit_is_what_the_queue_may_borrow() -> None:
    diff = run(
        flavored(("h100", 1), ("a100", 1)), flavored(("h100", 1), ("a100", 1), borrow_a100=2)
    )
    (b,) = diff.borrowing
    assert b.verdict == "may borrow"
    assert b.after is not None and b.after.startswith("up to nvidia.com/gpu 2 of a100 from cohort")
