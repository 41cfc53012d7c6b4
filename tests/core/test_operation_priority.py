"""An operation's ``priority`` ranks it inside its queue: higher first, then commit order.
Queue priority still orders the queues, and nothing is ever preempted."""

from __future__ import annotations

from support.builders import World
from support.snapshots import repo

from reconciler.core.compile import compile_repo
from reconciler.core.plan import PendingReason
from reconciler.core.types import Phase
from reconciler.core.views.diff import diff_plans, diff_to_dict, diff_to_markdown


def _order(w: World) -> tuple[list[str], list[str]]:
    plan = w.plan()
    return [d.operation for d in plan.dispatch], [p.operation for p in plan.pending]


def test_a_higher_operation_priority_goes_first_inside_its_queue() -> None:
    w = World().cluster().queue("q", concurrency=1)
    w.op("p/first", queue="q")
    w.op("p/second", queue="q")
    w.op("p/urgent", queue="q").priority(10)
    w.op("p/later", queue="q").priority(10)
    dispatched, pending = _order(w)
    assert dispatched == ["p/urgent"]
    assert pending == ["p/later", "p/first", "p/second"]  # then commit order
    assert list(w.plan().positions().values()) == [1, 2, 3]


def test_priority_ranks_before_the_commit_flag() -> None:
    w = World().cluster().queue("q", concurrency=0)
    w.op("p/committed", queue="q")
    w.op("p/uncommitted", queue="q").submitted(None).priority(1)
    w.op("p/uncommitted-low", queue="q").submitted(None)
    assert _order(w)[1] == ["p/uncommitted", "p/committed", "p/uncommitted-low"]


def test_queue_priority_still_orders_queues() -> None:
    w = World().cluster("local", concurrency=1)
    w.queue("hi", priority=10).queue("lo", priority=0)
    w.op("p/low-queue-top-rank", queue="lo").priority(1000)
    w.op("p/high-queue", queue="hi")
    dispatched, pending = _order(w)
    assert dispatched == ["p/high-queue"]
    assert pending == ["p/low-queue-top-rank"]


def test_nothing_is_preempted() -> None:
    w = World().cluster().queue("q", concurrency=1)
    w.op("p/running", queue="q")
    w.op("p/urgent", queue="q").priority(1000)
    w.observe("p/running", Phase.RUNNING, queue="q")
    plan = w.plan()
    assert plan.stop == () and plan.dispatch == ()
    (p,) = plan.pending
    assert (p.operation, p.reason) == ("p/urgent", PendingReason.QUEUE_CONCURRENCY_LIMIT)


BASE = {
    "reconciler.yaml": "kind: Org\npolicy:\n  maxOperationPriority: 100\n",
    "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
    "queues/q.yaml": "kind: Queue\ncluster: local\nconcurrency: 1\n",
    "projects/p/presets/urgent.yaml": "kind: Preset\npriority: 50\n",
}
RUN = "run:\n  kind: job\n  container:\n    image: img:1\n"


def _compile(files: dict[str, str]) -> dict[str, tuple[int, str]]:
    compiled = compile_repo(repo({**BASE, **files}))
    assert not compiled.errors, [str(e) for e in compiled.errors]
    return {
        op.name: (op.priority, str(op.provenance.get("priority", ""))) for op in compiled.operations
    }


def test_priority_from_the_operation_a_preset_or_the_project_default_with_provenance() -> None:
    got = _compile(
        {
            "projects/p/project.yaml": "kind: Project\ndefaults:\n  queue: q\n  priority: 20\n",
            "projects/p/operations/own.yaml": f"kind: Operation\npriority: 7\n{RUN}",
            "projects/p/operations/preset.yaml": f"kind: Operation\npresets: [urgent]\n{RUN}",
            "projects/p/operations/default.yaml": f"kind: Operation\n{RUN}",
        }
    )
    assert got["own"] == (7, "operation at projects/p/operations/own.yaml:2")
    assert got["preset"][0] == 50 and "preset urgent" in got["preset"][1]
    assert got["default"] == (20, "project default at projects/p/project.yaml:4")


def test_without_any_the_priority_is_0() -> None:
    got = _compile(
        {
            "projects/p/project.yaml": "kind: Project\ndefaults:\n  queue: q\n",
            "projects/p/operations/plain.yaml": f"kind: Operation\n{RUN}",
        }
    )
    assert got["plain"] == (0, "")


def test_above_the_policy_maximum_is_a_policy_violation() -> None:
    files = {
        **BASE,
        "projects/p/project.yaml": "kind: Project\ndefaults:\n  queue: q\n",
        "projects/p/operations/x.yaml": f"kind: Operation\npriority: 101\n{RUN}",
    }
    compiled = compile_repo(repo(files))
    (rejected,) = compiled.rejected
    assert str(rejected.location) == "projects/p/operations/x.yaml:2:11"
    assert "priority 101 exceeds policy.maxOperationPriority 100" in rejected.message


def test_the_pr_plan_shows_the_position_changes_a_priority_causes() -> None:
    def world(urgent: int) -> World:
        w = World().cluster().queue("q", concurrency=0)
        w.op("p/a", queue="q")
        w.op("p/b", queue="q")
        w.op("p/c", queue="q")
        w.op("p/d", queue="q").priority(urgent)
        return w

    base, head = world(0), world(5)
    diff = diff_plans((base.repo(), base.plan()), (head.repo(), head.plan()))
    assert [(m.operation, m.before, m.after) for m in diff.position_moves] == [
        ("p/d", 4, 1),
        ("p/a", 1, 2),
        ("p/b", 2, 3),
        ("p/c", 3, 4),
    ]
    assert diff.has_changes
    assert diff_to_dict(diff)["positionMoves"][0] == {
        "operation": "p/d",
        "queue": "q",
        "before": 4,
        "after": 1,
    }
    text = diff_to_markdown(diff)
    assert "### Position changes in a queue" in text
    assert "| p/d | q | 4 | 1 |" in text
