"""Red-team audit of "every view is the one decision" (h25a): each test is a case where a
view once said something other than the decision it claims to show."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from decimal import Decimal
from typing import Any
from unittest import mock

from support.builders import NOW, World, node
from support.clocks import SteppedClock
from support.fake_kube import FakeCluster, FakeCycles, FakeKube
from support.harness import manifest as _manifest

from reconciler.adapters.kube import KubeError
from reconciler.cli import status_cmd
from reconciler.cli.logs_cmd import find_target, show_logs_of
from reconciler.cli.plan_cmd import live_planner, recorded_planner, run_plan_diff
from reconciler.core.decision.cycle import (
    ClusterListing,
    Memory,
    decide,
    decide_recorded,
)
from reconciler.core.decision.render import render_operation
from reconciler.core.observation.capacity import ClusterCapacity
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.plan import plan_repo
from reconciler.core.quantity import format_quantity
from reconciler.core.reporting.status import StatusView, read_status, render_status
from reconciler.core.types import ClusterSpec, CompiledRepo, Location, Phase
from reconciler.core.views.diff import diff_plans, diff_to_dict
from reconciler.core.views.plan_render import plan_to_json
from reconciler.core.views.queue_view import (
    build_operation_detail,
    build_queues_view,
    queues_view_from_status,
)
from reconciler.runtime.cycle import CycleResult
from reconciler.runtime.live import ClusterReads
from reconciler.runtime.web import WebApp


def _fleet_world() -> CompiledRepo:
    """A fleet queue that needs capacity over ``a`` and ``b``, and three 2-GPU operations."""
    world = World()
    world.fleet("gpu", ("a", "b"), require_capacity=True, quota={"nvidia.com/gpu": 4})
    for name in ("p/x", "p/y", "p/z"):
        world.op(name, gpu=2).timeout("1h")
    return world.repo()


def _fleet_listing() -> dict[str, ClusterListing]:
    """Both clusters read: ``a`` has no GPU free, ``b`` 8."""
    return {
        "a": ClusterListing(capacity=ClusterCapacity((node("a-1", gpu=0),))),
        "b": ClusterListing(capacity=ClusterCapacity((node("b-1", gpu=8),))),
    }


def _recorded_with_capacity(compiled: CompiledRepo) -> StatusView:
    """The status branch of the leader's cycle that read both clusters' capacity and
    dispatched p/x and p/y to ``b``."""
    decision = decide(compiled, _fleet_listing(), Memory(), NOW)
    files = render_status(
        compiled,
        decision.plan,
        {},
        clusters=decision.cluster_records(),
        ledger=decision.memory.ledger,
    )
    return read_status(files)


def test_status_and_queues_estimate_over_the_recorded_capacity_as_plan_does() -> None:
    """``status`` and ``queues`` (without --live) estimate the next cycle over the status
    branch, as ``plan`` does: with the capacity the last cycle recorded, or a fleet queue
    that requires capacity would wait for ever in one view and start in the other."""
    compiled = _fleet_world()
    view = _recorded_with_capacity(compiled)
    assert {c.name for c in view.clusters if c.capacity is not None} == {"a", "b"}
    planned = recorded_planner(view, NOW)(compiled)
    assert planned.plan.dispatch == ()
    assert [p.operation for p in planned.plan.pending] == ["p/z"]
    # p/z starts on b when p/x or p/y ends, by their timeout (1h) at the latest: no history
    assert planned.estimates.text("p/z") == "no later than 1 h"

    with _config_at_tip(compiled):
        estimates, notes = status_cmd.recorded_estimates("repo", "main", None, view)
    assert notes == []
    assert estimates.json_of("p/z") == planned.estimates.json_of("p/z")
    assert estimates == planned.estimates


@contextmanager
def _config_at_tip(compiled: CompiledRepo) -> Iterator[None]:
    """``status_cmd`` reads ``compiled`` as the config at the branch tip, at ``NOW``."""

    class _Config:
        def __init__(self, *_a: Any, **_k: Any) -> None:
            pass

        def sync(self) -> object:
            return object()

    with (
        mock.patch.object(status_cmd, "ConfigRepo", _Config),
        mock.patch.object(status_cmd, "compile_repo", lambda _snapshot: compiled),
        mock.patch.object(status_cmd, "SystemClock", SteppedClock),
    ):
        yield


def _moved_world() -> tuple[CompiledRepo, WorkloadState]:
    """p/a runs in qa (its Job's queue label) and has since been moved to qb in the repo."""
    world = World()
    world.queue("qa", quota={"nvidia.com/gpu": 2}, priority=1)
    world.queue("qb", quota={"nvidia.com/gpu": 2})
    world.op("p/a", queue="qb", gpu=2)
    world.op("p/b", queue="qa", gpu=2)
    world.op("p/c", queue="qb", gpu=1)
    compiled = world.repo()
    return compiled, _running("p/a", "qa", generation=1)


def _running(op_id: str, queue: str, *, generation: int) -> WorkloadState:
    """The Job of ``op_id`` (generation ``generation``), labelled ``queue``, running 2 GPUs."""
    name = op_id.replace("/", "-")
    return WorkloadState(
        op_id,
        generation,
        "local",
        op_id.split("/")[0],
        f"{name}-g{generation}",
        f"uid-{name}",
        Phase.RUNNING,
        queue=queue,
        requests={"nvidia.com/gpu": Decimal(2)},
        dispatched_at="2026-01-01T11:00:00+00:00",
        started_at="2026-01-01T11:00:05+00:00",
    )


def test_a_run_moved_to_another_queue_counts_where_it_runs_in_every_view() -> None:
    """A running operation whose queue changed in the repo holds its quota in the queue it
    was admitted by (its Job's label), in the cycle. The status branch the cycle writes,
    and ``plan``/``status``/``queues`` read from it, must count it there too."""
    compiled, running = _moved_world()
    cycle = decide(compiled, {"local": ClusterListing((running,))}, Memory(), NOW)
    assert {q.name: q.active for q in cycle.plan.queues} == {"qa": 1, "qb": 0}
    assert [d.operation for d in cycle.plan.dispatch] == ["p/c"]
    view = read_status(
        render_status(compiled, cycle.plan, cycle.states, clusters=cycle.cluster_records())
    )
    # the next cycle over what the branch records: p/a still holds qa's quota
    after = decide_recorded(compiled, view, NOW)
    assert {q.name: (q.active, dict(q.used)) for q in after.plan.queues} == {
        q.name: (q.active + q.dispatching, dict(q.used_after)) for q in cycle.plan.queues
    }
    assert [(p.operation, str(p.reason)) for p in after.plan.pending] == [("p/b", "QuotaExceeded")]
    # the queue view from the branch says what the cycle's view says, row by row (the
    # leader's view counts p/c as created)
    created = replace(running, operation="p/c", name="p-c-g1", phase=Phase.DISPATCHED)
    created = replace(created, queue="qb", started_at=None)
    applied = {**cycle.states, "p/c": created}
    from_cycle = build_queues_view(compiled, cycle.plan, applied, applied=True)
    from_branch = queues_view_from_status(view)
    assert list(from_branch.rows) == [r.model_copy(update={"next": 0}) for r in from_cycle.rows]
    # and its page names the queue that holds it, as its record does
    page = build_operation_detail(compiled, cycle.plan, applied, "p/a", applied=True)
    assert page is not None and page.queue == view.operations["p/a"].queue == "qa"


def test_a_flavored_queues_use_per_flavor_is_the_same_from_the_status_branch() -> None:
    """A queue with flavors: the cycle's view, the status branch it writes, the next cycle
    over that branch (``plan``, ``status``, ``serve`` start from it) and the queue view from
    the branch all count each run in its own flavor."""
    world = World().cluster("local").queue("team-a", priority=10)
    world.flavored("team-a", ("h100", {"gpu": 2}), ("a100", {"gpu": 4}))
    world.op("p/a", queue="team-a", gpu=2)
    world.op("p/b", queue="team-a", gpu=2)
    compiled = world.repo()
    running = replace(_running("p/a", "team-a", generation=1), flavor="a100")
    cycle = decide(compiled, {"local": ClusterListing((running,))}, Memory(), NOW)
    assert [(d.operation, d.flavor) for d in cycle.plan.dispatch] == [("p/b", "h100")]
    view = read_status(
        render_status(compiled, cycle.plan, cycle.states, clusters=cycle.cluster_records())
    )
    assert (view.operations["p/a"].flavor, view.operations["p/b"].flavor) == ("a100", "h100")
    after = decide_recorded(compiled, view, NOW)
    [was], [now] = cycle.plan.queues, after.plan.queues
    assert [(f.name, dict(f.used)) for f in now.flavors] == [
        (f.name, dict(f.used_after)) for f in was.flavors
    ]
    created = replace(running, operation="p/b", name="p-b-g1", phase=Phase.DISPATCHED)
    created = replace(created, flavor="h100", started_at=None)
    applied = {**cycle.states, "p/b": created}
    from_cycle = build_queues_view(compiled, cycle.plan, applied, applied=True)
    from_branch = queues_view_from_status(view)
    assert list(from_branch.rows) == [r.model_copy(update={"next": 0}) for r in from_cycle.rows]
    assert from_branch.rows[0].quota_text == "h100: nvidia.com/gpu 2/2; a100: nvidia.com/gpu 2/4"
    # the view of the next cycle over the branch (not applied: serve, queues --live)
    live = build_queues_view(compiled, after.plan, after.states, applied=False)
    assert live.rows[0].flavors == from_branch.rows[0].flavors


def test_a_superseded_run_is_running_in_the_status_branch_view_too() -> None:
    """After a generation bump, the old run still runs and holds its queue's quota: the
    cycle's queue view counts it running (``Decision.workloads``); the view the status
    branch gives (``reconciler queues``) must too, not an active operation that neither
    runs nor waits."""
    world = World().queue("q", quota={"nvidia.com/gpu": 2})
    world.op("p/t", gpu=2)._fields["generation"] = 2
    compiled = world.repo()
    old = _running("p/t", "q", generation=1)
    cycle = decide(compiled, {"local": ClusterListing((old,))}, Memory(), NOW)
    assert set(cycle.superseded) == {"p/t@g1"}
    from_cycle = build_queues_view(compiled, cycle.plan, cycle.workloads, applied=True)
    [row] = from_cycle.rows
    assert (row.active, row.running, row.waiting, row.pending) == (1, 1, 0, 1)
    view = read_status(
        render_status(
            compiled,
            cycle.plan,
            cycle.states,
            clusters=cycle.cluster_records(),
            superseded=cycle.superseded,
        )
    )
    from_branch = queues_view_from_status(view)
    assert list(from_branch.rows) == [r.model_copy(update={"next": 0}) for r in from_cycle.rows]
    assert from_branch.fleet == from_cycle.fleet


def test_plan_live_base_plans_both_revisions_over_one_read_of_the_clusters() -> None:
    """``plan --live --base``: "compile and plan both revisions against the same observed
    state". A Job that ends between two reads must not show up as a change of the PR: the
    same revision on both sides is no change (exit 0), whatever the clusters do meanwhile."""
    world = World().queue("q", quota={"nvidia.com/gpu": 2})
    world.op("p/a", gpu=2)
    world.op("p/b", gpu=2)
    compiled = world.repo()
    fake = FakeCluster("local")
    job = _manifest(compiled, "p/a", 1)
    fake.add_job(job)
    fake.set_phase(job["metadata"]["namespace"], job["metadata"]["name"], "Running")
    reads = 0

    def connect(spec: ClusterSpec) -> Any:
        nonlocal reads
        reads += 1
        if reads == 2:  # p/a ends while the PR is planned
            fake.set_phase(job["metadata"]["namespace"], job["metadata"]["name"], "Succeeded")
        return FakeKube(fake)

    outcome = run_plan_diff(
        lambda: compiled, lambda: compiled, live_planner(Memory(), NOW, connect), "json"
    )
    diff = json.loads(outcome.stdout)
    assert diff["newlyDispatched"] == [] and diff["pendingCounts"] == [], diff
    assert outcome.exit_code == 0
    assert reads == 1


def test_every_json_view_carries_the_structured_admit_of_a_pending_entry() -> None:
    """``plan -o json``, the PR diff, ``/api/v1/queues/<q>`` and ``/api/v1/operations/<op>``
    give the same structured ``admit`` (and ``blockedBy``) of each pending entry, so no
    client has to parse the English ``admittedWhen``/``message`` to know whom it waits for."""
    world = World().queue("q", quota={"nvidia.com/gpu": 2})
    world.op("p/a", gpu=2)
    world.op("p/b", gpu=1)
    compiled = world.repo()
    decision = decide(compiled, {"local": ClusterListing()}, Memory(), NOW)
    [pending] = decision.plan.pending
    expected = {
        "when": "ResourcesReleased",
        "text": "admitted when 1 GPU is released by p/a",
        "operations": ["p/a"],
        "count": 1,
        "resource": "nvidia.com/gpu",
        "amount": "1",
        "at": None,
    }

    plan_json = json.loads(plan_to_json(decision.plan))
    [entry] = plan_json["pending"]
    assert entry["admit"] == expected
    assert entry["admitWhen"] == expected["when"]

    diff = diff_to_dict(
        diff_plans((World().repo(), plan_repo(World().repo(), [], NOW)), (compiled, decision.plan))
    )
    [newly] = [t for t in diff["newlyPending"] if t["operation"] == "p/b"]
    assert newly["admit"] == expected and newly["blockedBy"] == entry["blockedBy"]

    result = CycleResult(
        at=NOW,
        version=compiled.version,
        compiled=compiled,
        plan=decision.plan,
        states=decision.states,
        clusters=decision.clusters,
        leading=False,
        decision=decision,
    )
    web = WebApp(lambda: result)
    got = web("/api/v1/queues/q")
    assert got is not None and got[0] == 200
    [api_entry] = json.loads(got[1])["pendingOperations"]
    assert api_entry["admit"] == expected
    assert api_entry["blockedBy"] == entry["blockedBy"]
    assert api_entry["admittedWhen"] == pending.admit.text
    got = web("/api/v1/operations/p/b")
    assert got is not None and got[0] == 200
    detail = json.loads(got[1])
    assert detail["admit"] == expected and detail["blockedBy"] == entry["blockedBy"]


class _FailingKube(FakeKube):
    """A cluster whose apiserver refuses the create of one workload."""

    refuse = "p-b-g1"

    def create_or_adopt(self, manifest: dict[str, Any]) -> Any:
        if manifest["metadata"]["name"] == self.refuse:
            raise KubeError("jobs.batch is forbidden: exceeded quota", 403)
        return super().create_or_adopt(manifest)


class _FailingCycles(FakeCycles):
    def _connect(self, spec: ClusterSpec) -> Any:
        return _FailingKube(self.cluster)


def test_a_failed_create_is_not_counted_by_the_leaders_views() -> None:
    """The leader's cycle plans p/a and p/b; the create of p/b fails (it stays Queued,
    ``DispatchFailed``). What the leader's pages and status branch say a queue holds is what
    the next cycle counts: p/a only, not the failed p/b."""
    world = World().queue("q", quota={"nvidia.com/gpu": 4})
    world.op("p/a", gpu=2)
    world.op("p/b", gpu=2)
    compiled = world.repo()
    cycles = _FailingCycles(compiled)
    result = cycles.cycle()
    assert result.plan is not None
    assert [d.operation for d in result.plan.dispatch] == ["p/a", "p/b"]
    assert set(result.failed) == {"p/b"} and result.dispatched == ("p/a",)
    # the next cycle counts what exists: p/a
    following = cycles.cycle(after=1)
    assert following.plan is not None
    [q] = following.plan.queues
    held = (q.active, format_quantity(q.used["nvidia.com/gpu"]))
    assert held == (1, "2")
    # the leader's page and API say the same of the cycle that failed
    _, body, _ = WebApp(lambda: result)("/api/v1/queues/q") or (0, b"", "")
    row = json.loads(body)
    assert (row["active"], row["quota"][0]["used"]) == held
    assert [a["operation"] for a in row["activeOperations"]] == ["p/a"]
    assert row["running"] + row["waiting"] == row["active"]
    page = WebApp(lambda: result)("/api/v1/operations/p/b")
    assert page is not None and json.loads(page[1])["phase"] == "Queued"
    # and so does the status branch it writes (read by `queues` and `plan`)
    view = read_status(cycles.status_of(result))
    [recorded] = view.queues
    assert (recorded.active, recorded.used["nvidia.com/gpu"]) == held
    assert view.operations["p/b"].phase == "Queued"


def test_a_cluster_observed_with_nothing_free_is_not_not_observed_on_the_branch() -> None:
    """A fleet queue's cluster whose Nodes were read but give nothing free (``free: {}``)
    is not a cluster whose capacity was not observed (``free: null``, "not observed"):
    the status branch (``reconciler queues``) must keep the difference the cycle's pages
    show."""
    world = World()
    world.fleet("gpu", ("a", "b"), quota={"nvidia.com/gpu": 4})
    world.op("p/x", gpu=1)
    compiled = world.repo()
    empty = ClusterCapacity()  # read: no usable node
    cycle = decide(
        compiled, {"a": ClusterListing(capacity=empty), "b": ClusterListing()}, Memory(), NOW
    )
    from_cycle = build_queues_view(compiled, cycle.plan, cycle.workloads, applied=True)
    [row] = from_cycle.rows
    assert [(c.cluster, c.free) for c in row.clusters] == [("a", {}), ("b", None)]
    view = read_status(
        render_status(compiled, cycle.plan, cycle.states, clusters=cycle.cluster_records())
    )
    [branch_row] = queues_view_from_status(view).rows
    assert [(c.cluster, c.free) for c in branch_row.clusters] == [("a", {}), ("b", None)]
    assert [c.free_text for c in branch_row.clusters] == ["-", "not observed"]


def test_a_workflow_parent_has_one_phase_in_status_and_on_its_page() -> None:
    """A matrix parent with one child running and one waiting: ``reconciler status`` (its
    record aggregates the children's) and its web page / API say the same phase and
    message."""
    world = World().queue("q", concurrency=1)
    world.op("p/sweep-0").child_of("p/sweep", 0)
    world.op("p/sweep-1").child_of("p/sweep", 1)
    compiled = world.repo()
    cycle = decide(compiled, {"local": ClusterListing()}, Memory(), NOW)
    assert [d.operation for d in cycle.plan.dispatch] == ["p/sweep-0"]
    created = WorkloadState(
        "p/sweep-0", 1, "local", "p", "p-sweep-0-g1", "u0", Phase.DISPATCHED, queue="q"
    )
    applied = {**cycle.states, "p/sweep-0": created}
    record = read_status(render_status(compiled, cycle.plan, applied)).operations["p/sweep"]
    page = build_operation_detail(compiled, cycle.plan, applied, "p/sweep", applied=True)
    assert page is not None
    assert (page.phase, page.message) == (record.phase, record.message)
    assert page.children == record.children == ("p/sweep-0", "p/sweep-1")


def test_a_rejected_operation_reads_the_same_in_status_and_on_its_page() -> None:
    """An operation refused by policy: ``reconciler status`` and its page / API give the
    same phase, reason and message (with the file:line:col of the violation), also while
    a workload of it dispatched before the refusal still runs."""
    world = World().queue("q")
    world.op("p/ok")
    world.op("p/bad")
    world.op("p/old")
    world.reject("p/bad", "run.privileged: not allowed")
    world.reject("p/old", "run.privileged: not allowed")
    where = Location("projects/p/operations/bad.yaml", 3, 5)
    world.rejected = [replace(r, location=where) for r in world.rejected]
    compiled = world.repo()
    running = WorkloadState("p/old", 1, "local", "p", "p-old-g1", "u", Phase.RUNNING, queue="q")
    cycle = decide(compiled, {"local": ClusterListing((running,))}, Memory(), NOW)
    records = read_status(render_status(compiled, cycle.plan, cycle.states)).operations
    for op_id in ("p/bad", "p/old"):
        page = build_operation_detail(compiled, cycle.plan, cycle.states, op_id, applied=True)
        record = records[op_id]
        assert page is not None
        assert (page.phase, page.reason, page.message) == (
            record.phase,
            record.reason,
            record.message,
        ), op_id
    assert records["p/bad"].message.startswith("projects/p/operations/bad.yaml:3:5: ")


def test_a_fleet_operation_dispatched_next_shows_the_cluster_chosen() -> None:
    """On a read-only server (``serve``, a follower), a fleet queue's operation the plan
    dispatches next goes to the cluster check 10 chose: its page says that cluster, as
    ``status --live`` records it, not the queue's first cluster."""
    compiled = _fleet_world()
    cycle = decide(compiled, _fleet_listing(), Memory(), NOW)
    assert [(d.operation, d.cluster) for d in cycle.plan.dispatch] == [("p/x", "b"), ("p/y", "b")]
    page = build_operation_detail(compiled, cycle.plan, cycle.states, "p/x", applied=False)
    assert page is not None and page.phase == "Queued"
    record = read_status(render_status(compiled, cycle.plan, cycle.states)).operations["p/x"]
    assert page.cluster == record.cluster == "b"


def test_an_operation_removed_from_the_repo_reads_the_same_in_status_and_on_its_page() -> None:
    """Removed from the repo while it runs (prune off): its page says RemovedFromRepo,
    "left running", as its status record does."""
    world = World().queue("q")
    world.op("p/kept")
    compiled = world.repo()
    running = WorkloadState("p/gone", 1, "local", "p", "p-gone-g1", "u", Phase.RUNNING, queue="q")
    cycle = decide(compiled, {"local": ClusterListing((running,))}, Memory(), NOW)
    record = read_status(render_status(compiled, cycle.plan, cycle.states)).operations["p/gone"]
    page = build_operation_detail(compiled, cycle.plan, cycle.states, "p/gone", applied=True)
    assert page is not None
    assert (page.phase, page.reason, page.message) == (record.phase, record.reason, record.message)
    assert page.message == "removed from the repo; left running (prune is off)"


def test_cluster_reads_read_only_what_another_revision_adds() -> None:
    """A PR that makes a queue a fleet queue: its revision needs the cluster's capacity too,
    which is read then, without listing the cluster's workloads again."""
    base_world = World().queue("q", quota={"nvidia.com/gpu": 2})
    base_world.op("p/a", gpu=1)
    head_world = World()
    head_world.fleet("q", ("local",), quota={"nvidia.com/gpu": 2})
    head_world.op("p/a", gpu=1)
    fake = FakeCluster("local")
    fake.add_node("gpu-node-0", gpu="4")
    connects = 0

    def connect(spec: ClusterSpec) -> Any:
        nonlocal connects
        connects += 1
        return FakeKube(fake)

    reads = ClusterReads(connect)
    base = reads(base_world.repo())
    head = reads(head_world.repo())
    assert connects == 1
    assert base["local"].capacity is None
    capacity = head["local"].capacity
    assert capacity is not None and capacity.free()["nvidia.com/gpu"] == 4
    assert head["local"].workloads is base["local"].workloads


def test_logs_of_a_fleet_operation_come_from_the_cluster_it_was_dispatched_to() -> None:
    """``reconciler logs`` reads "the cluster that ran it": for a fleet queue's operation,
    the cluster check 10 chose (b: a has no GPU free), not the queue's first cluster."""
    compiled = _fleet_world()
    cycle = decide(compiled, _fleet_listing(), Memory(), NOW)
    [create, _] = cycle.actions.creates
    assert (create.operation.id, create.cluster) == ("p/x", "b")
    fakes = {"a": FakeCluster("a"), "b": FakeCluster("b")}
    rendered = render_operation(create.operation, {}, config_version="c1", dispatched_at=NOW)
    fakes["b"].add_job(dict(rendered.job))
    fakes["b"].set_gang(create.operation.namespace, rendered.name, replicas=1, placed=1, running=1)
    target = find_target(compiled, "p/x", have_kubeconfig=False)
    out: list[str] = []
    show_logs_of(
        target,
        lambda spec: FakeKube(fakes[spec.name]),
        False,
        None,
        echo=lambda s, nl=True: out.append(s),
    )
    assert "".join(out) == "log of replica 0\n"  # the pod on b


def test_queues_and_status_from_the_branch_show_rows_and_estimates_of_one_decision() -> None:
    """The branch recorded team-a full (p/a runs, p/b waits); the config at the tip has
    raised its quota since. ``queues`` and ``status`` without --live show the rows of the
    decision their STARTS come from: the tip's quota, p/b as the next cycle's dispatch, not
    the recorded rows beside the next cycle's estimates."""
    from click.testing import CliRunner

    from reconciler.cli import queues_cmd

    world = World().queue("team-a", quota={"nvidia.com/gpu": 2})
    world.op("p/a", gpu=2)
    world.op("p/b", gpu=2)
    recorded_with = world.repo()
    running = _running("p/a", "team-a", generation=1)
    cycle = decide(recorded_with, {"local": ClusterListing((running,))}, Memory(), NOW)
    view = read_status(
        render_status(recorded_with, cycle.plan, cycle.states, clusters=cycle.cluster_records())
    )
    assert [q.quota for q in view.queues] == [{"nvidia.com/gpu": "2"}]
    tip = World().queue("team-a", quota={"nvidia.com/gpu": 4})
    tip.op("p/a", gpu=2)
    tip.op("p/b", gpu=2)
    compiled = tip.repo()

    with (
        _config_at_tip(compiled),
        mock.patch.object(status_cmd, "read_branch", lambda *_a, **_k: view),
        mock.patch.object(queues_cmd, "read_branch", lambda *_a, **_k: view),
    ):
        queues = CliRunner().invoke(queues_cmd.queues, ["--repo", "r", "-o", "json"])
        status = CliRunner().invoke(status_cmd.status, ["--repo", "r", "-o", "json"])
    assert queues.exit_code == 0, queues.output
    [row] = json.loads(queues.stdout)["queues"]
    assert (row["quota"][0]["limit"], row["active"], row["next"]) == ("4", 1, 1)
    assert status.exit_code == 0, status.output
    recorded = json.loads(status.stdout)
    [queue] = recorded["queues"]
    assert (queue["quota"], queue["active"]) == ({"nvidia.com/gpu": "4"}, 1)
    # p/b is the next cycle's dispatch (the row's next), so it has no start estimate: the
    # same decision says both
    [b] = [o for o in recorded["operations"] if o["operation"] == "p/b"]
    assert "estimate" not in b
