"""One decision path (issue 12): every view says what the next cycle does.

Random worlds: queues (some with ``maxPods``) and operations (some distributed, of 2 or 3
replicas), Jobs and Pods in every phase on fake clusters,
superseded generations, workloads deleted by hand, removed operations, unreachable
clusters, fleet queues over clusters with nodes of random shapes (tainted, not Ready,
partly used by pods that are not ours) -- alone or a whole cohort of them, borrowing
fleet-wide -- and a status branch. For each, ``plan --live``,
``queues --live``, ``status --live`` and ``/api/v1`` (a follower's cycle) must report
exactly the plan of the next leader cycle: dispatch list (and each dispatch's cluster),
pending reasons and positions, stops, queue usage, the fleet queues' clusters, and the
start estimates of the pending operations.
"""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from support.builders import NOW, World
from support.clocks import SteppedClock
from support.fake_kube import FakeCluster
from support.harness import manifest as _manifest
from support.scenarios import Scenario, scenarios
from support.scenarios import inline as _inline

from reconciler.cli.plan_cmd import live_planner, recorded_planner, run_plan, run_plan_diff
from reconciler.cli.queues_cmd import live_queues_view
from reconciler.cli.status_cmd import live_status_view
from reconciler.cli.status_cmd import render as render_status_cli
from reconciler.core.decision.cycle import (
    ClusterListing,
    InFlight,
    Memory,
    decide,
    memory_from_status,
)
from reconciler.core.observation.observe import WorkloadState, observe_workloads
from reconciler.core.plan import PendingReason, plan_repo
from reconciler.core.plan.estimate import estimate_decision
from reconciler.core.quantity import format_quantity
from reconciler.core.reporting.status import ClusterStatus, read_status, render_status
from reconciler.core.types import (
    DistributedBackend,
    Phase,
    RepoSnapshot,
)
from reconciler.core.views.plan_render import plan_to_dict
from reconciler.core.views.queue_view import build_queues_view, queues_view_from_status
from reconciler.runtime.cycle import CycleResult, Reconciler
from reconciler.runtime.estimates import EstimateWorker
from reconciler.runtime.live import decide_live
from reconciler.runtime.status import render_cycle_status
from reconciler.runtime.web import WebApp


def _cycle(s: Scenario, *, leading: bool, memory: Memory | None = None) -> CycleResult:
    reconciler = Reconciler(
        lambda: RepoSnapshot(files={}, version=s.compiled.version),
        s.connect,  # type: ignore[arg-type]
        SteppedClock(),
        is_leader=lambda: leading,
        watch=False,
    )
    reconciler.seed(s.memory if memory is None else memory)
    with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: s.compiled):
        try:
            return reconciler.run_once()
        finally:
            reconciler.close()


def _units(text: str) -> Decimal:
    return Decimal(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
@pytest.mark.slow
def test_every_view_says_what_the_next_cycle_does(s: Scenario) -> None:
    connect: Any = s.connect
    # The views, before the cycle: nothing they do changes a cluster.
    planned = run_plan(lambda: s.compiled, live_planner(s.memory, NOW, connect), "json")
    assert planned.exit_code == 0, planned.stderr
    plan_json = json.loads(planned.stdout)
    # a PR that changes nothing changes nothing, whatever the clusters hold
    unchanged = run_plan_diff(
        lambda: s.compiled, lambda: s.compiled, live_planner(s.memory, NOW, connect), "json"
    )
    assert unchanged.exit_code == 0 and not json.loads(unchanged.stdout)["changed"]
    decision = decide_live(s.compiled, s.memory, NOW, connect)
    queues_json = live_queues_view(s.compiled, decision).to_json()
    status_view = live_status_view(s.compiled, decision)
    follower = _cycle(s, leading=False)
    api_status, api_body, _ = WebApp(lambda: follower, estimator=EstimateWorker(spawn=_inline))(
        "/api/v1/queues"
    ) or (0, b"", "")
    assert api_status == 200
    api_json = json.loads(api_body)
    assert not any(f.calls for f in s.clusters.values()), "a view changed a cluster"

    # The next cycle, carried out.
    result = _cycle(s, leading=True)
    plan = result.plan
    assert plan is not None

    # the ledger the views counted is the one the cycle writes, and so are the budgets
    assert result.decision is not None
    assert decision.memory.ledger == result.decision.memory.ledger
    assert follower.decision is not None
    assert follower.decision.memory.ledger == result.decision.memory.ledger
    assert [q.budget for q in decision.plan.queues] == [q.budget for q in plan.queues]
    assert [p.admit for p in decision.plan.pending] == [p.admit for p in plan.pending]
    # no budget is committed beyond its limit by this plan's dispatches
    for q in plan.queues:
        if q.budget is not None and q.dispatching:
            assert q.budget.spent + q.budget.committed_after <= q.budget.limit
    # plan --live (a fleet queue's operation: to the same cluster)
    _assert_plan_json_is(plan_json, plan)
    # queues --live and /api/v1 (a follower runs the same cycle and carries out nothing),
    # with each fleet queue's clusters and their free capacity
    assert api_json["queues"] == queues_json["queues"]
    assert [r["clusters"] for r in queues_json["queues"]] == [
        [
            {
                "cluster": m.cluster,
                "reachable": m.reachable,
                "active": m.active,
                "used": {r: format_quantity(v) for r, v in m.used.items()},
                "clusterQuota": {r: format_quantity(v) for r, v in m.quota.items()},
                "free": None
                if m.free is None
                else {r: format_quantity(v) for r, v in m.free.items()},
                "nodes": m.nodes,
            }
            for m in q.members
        ]
        for q in plan.queues
    ]
    assert api_json["fleet"] == queues_json["fleet"]
    assert [
        (
            r["name"],
            r["active"],
            r["pods"],
            r["maxPods"],
            r["next"],
            r["pending"],
            r["headReason"],
            r["quota"],
        )
        for r in queues_json["queues"]
    ] == [
        (
            q.name,
            q.active,
            q.pods,
            q.max_pods,
            q.dispatching,
            q.pending,
            str(q.head_reason) if q.head_reason else None,
            [
                {
                    "resource": r,
                    "used": format_quantity(q.used[r]),
                    "limit": format_quantity(v),
                    "borrowed": format_quantity(q.borrowed.get(r, Decimal(0))),
                    "lent": format_quantity(q.lent.get(r, Decimal(0))),
                }
                for r, v in sorted(q.quota.items())
            ],
        )
        for q in plan.queues
    ]
    # status --live: what the status branch says after the cycle
    assert [
        (
            q.name,
            q.active,
            dict(q.used),
            q.pending,
            q.active if q.pods is None else q.pods,
            dict(q.borrowed),
            dict(q.lent),
        )
        for q in status_view.queues
    ] == [
        (
            q.name,
            q.active + q.dispatching,
            {r: format_quantity(v) for r, v in sorted(q.used_after.items())},
            q.pending,
            q.pods_after,
            {r: format_quantity(v) for r, v in sorted(q.borrowed_after.items())},
            {r: format_quantity(v) for r, v in sorted(q.lent_after.items())},
        )
        for q in plan.queues
    ]
    at = plan.positions()
    for p in plan.pending:
        record = status_view.operations[p.operation]
        assert (record.phase, record.reason, record.position) == (
            "Queued",
            str(p.reason),
            at[p.operation],
        )
    for d in plan.dispatch:
        record = status_view.operations[d.operation]
        assert (record.phase, record.cluster) == ("Dispatched", d.cluster)
    assert [[f.cluster for f in q.fleet] for q in status_view.queues] == [
        [m.cluster for m in q.members] for q in plan.queues
    ]
    # the capacity each cluster was chosen by, as the status branch records it
    recorded_capacity = {c.name: c.capacity for c in status_view.clusters if c.capacity}
    assert {n: c.value() for n, c in recorded_capacity.items()} == dict(
        result.decision.capacity  # type: ignore[union-attr]
    )

    # Start estimates (issue 16): one function of the decision, the same in every view,
    # and the same as the next cycle's own decision gives.
    estimates = estimate_decision(s.compiled, decision)
    assert result.compiled is not None and result.decision is not None
    assert estimate_decision(result.compiled, result.decision) == estimates
    assert {p["operation"]: p["estimate"] for p in plan_json["pending"]} == {
        p.operation: estimates.json_of(p.operation) for p in plan.pending
    }
    assert all(p["estimate"] is not None for p in plan_json["pending"])
    heads = {p.queue: p.operation for p in plan.pending if at[p.operation] == 1}
    for row in queues_json["queues"]:
        head = heads.get(row["name"])
        assert row["headEstimate"] == (estimates.json_of(head) if head else None), row
    status_json = json.loads(render_status_cli(status_view, None, "json", estimates))
    said = {o["operation"]: o.get("estimate") for o in status_json["operations"]}
    assert {p.operation: said[p.operation] for p in plan.pending} == {
        p.operation: estimates.json_of(p.operation) for p in plan.pending
    }
    for p in plan.pending:
        detail = WebApp(lambda: follower, estimator=EstimateWorker(spawn=_inline))(
            f"/api/v1/operations/{p.operation}"
        )
        assert detail is not None and json.loads(detail[1])["estimate"] == estimates.json_of(
            p.operation
        )
    # each operation's page (a follower's) says what status --live records of it; an
    # operation the plan dispatches is Queued there ("next"), to the same cluster
    record_keys = ("phase", "reason", "message", "queue", "cluster", "position")
    dispatching = {d.operation for d in plan.dispatch}
    for op_id, record in status_view.operations.items():
        got = WebApp(lambda: follower, estimator=EstimateWorker(spawn=_inline))(
            f"/api/v1/operations/{op_id}"
        )
        assert got is not None and got[0] == 200, op_id
        page = json.loads(got[1])
        said = {k: getattr(record, k) for k in record_keys}
        said["message"] = said["message"] or None
        if op_id in dispatching:
            said.update(phase="Queued", reason=None, message=page["message"])
        assert {k: page[k] for k in record_keys} == said, op_id

    # The cycle did what the views said, and nothing else.
    created = {
        c.split(" ", 1)[1]
        for f in s.clusters.values()
        for c in f.calls
        if c.startswith(("create p/", "adopt p/"))
    }
    pytorchjobs = {
        op.id
        for op in s.compiled.operations
        if op.distributed is not None and op.distributed.backend is DistributedBackend.PYTORCHJOB
    }
    expected = {
        f"{c.operation.namespace}/{c.operation.project}-{c.operation.name}-g{c.operation.generation}"
        for c in result.decision.actions.creates  # type: ignore[union-attr]
        if c.operation.id not in pytorchjobs
    }
    assert {c.split("/", 1)[1] for c in created} == {e.split("/", 1)[1] for e in expected}
    refused = {op for op in result.failed if op in pytorchjobs}
    assert set(result.dispatched) | set(result.adopted) | refused == {
        d.operation for d in plan.dispatch
    }
    for p in plan.pending:  # BackendUnavailable exactly where the cluster lacks the CRD
        if p.operation in pytorchjobs and p.reason is PendingReason.BACKEND_UNAVAILABLE:
            # a fleet queue's: each of its readable clusters lacks it
            for name in p.blocked_by.to_json()["cluster"].split(", "):
                assert "pytorchjob" not in s.clusters[name].backends
    assert set(result.stopped) == {x.operation for x in plan.stop}

    # No view shows a queue over its quota (or maxPods) because of a dispatch, nor
    # contradicts itself.
    for q in plan.queues:
        spec = s.compiled.queues[q.name]
        for r, limit in q.quota.items():
            most = limit + spec.borrowing_limit.get(r, Decimal(0))
            assert q.used_after.get(r, Decimal(0)) <= max(most, q.used.get(r, Decimal(0)))
        if q.max_pods is not None and q.dispatching:
            assert q.pods_after <= max(q.max_pods, q.pods)
    web = WebApp(lambda: follower, estimator=EstimateWorker(spawn=_inline))
    for row in api_json["queues"]:
        if any(_units(u["used"]) > 0 for u in row["quota"]):
            assert row["active"] > 0, row
            # the queue page lists who holds it: never a full bar and no active operation
            _, body, _ = web(f"/api/v1/queues/{row['name']}") or (0, b"", "")
            assert json.loads(body)["activeOperations"], row
    # each queue page's pending entries are plan --live's, field for field
    keys = ("operation", "position", "reason", "message", "admit", "blockedBy", "estimate")
    for row in api_json["queues"]:
        _, body, _ = web(f"/api/v1/queues/{row['name']}") or (0, b"", "")
        assert [{k: p[k] for k in keys} for p in json.loads(body)["pendingOperations"]] == [
            {k: p[k] for k in keys} for p in plan_json["pending"] if p["queue"] == row["name"]
        ]
    down = {name for name, f in s.clusters.items() if not f.reachable}
    assert not {d.cluster for d in plan.dispatch} & down
    for d in plan.dispatch:  # a fleet queue dispatches only to its own clusters
        assert d.cluster in s.compiled.queues[d.queue].members
    assert not {x.cluster for x in plan.stop} & down

    # plan (no --live) from the status branch this cycle wrote says what the cycle after it
    # does (a leader restarted from that branch), the clusters being as it recorded them.
    assert result.compiled is not None
    written = read_status(render_cycle_status(result, result.compiled, plan))
    # the branch's positions (its queues' order files, not the records) are the cycle's
    for p in plan.pending:
        assert written.operations[p.operation].position == at[p.operation]
    assert {q: len(ids) for q, ids in written.order.items()} == {
        q.name: q.pending for q in plan.queues if q.pending
    }
    # `reconciler queues` (the status branch) shows the rows the leader's pages show
    if not result.failed:
        leader_rows = build_queues_view(result.compiled, plan, result.workloads, applied=True)
        got = [r.model_dump() for r in queues_view_from_status(written).rows]
        want = [r.model_copy(update={"next": 0}).model_dump() for r in leader_rows.rows]
        assert [
            {k: (a[k], b[k]) for k in a if a[k] != b[k]} for a, b in zip(got, want, strict=True)
        ] == [{}] * len(got)
    # and each operation's page on the leader says what the branch records of it
    leader_web = WebApp(lambda: result, estimator=EstimateWorker(spawn=_inline))
    for op_id, record in written.operations.items():
        if op_id in result.failed:
            continue  # see test_view_audit: a failed create is counted as held
        got = leader_web(f"/api/v1/operations/{op_id}")
        assert got is not None and got[0] == 200, op_id
        page = json.loads(got[1])
        said = {k: getattr(record, k) for k in record_keys}
        said["message"] = said["message"] or None
        assert {k: page[k] for k in record_keys} == said, op_id
    recorded = run_plan(lambda: s.compiled, recorded_planner(written, NOW), "json")
    assert recorded.exit_code == 0, recorded.stderr
    _assert_plan_json_is(json.loads(recorded.stdout), _cycle_after(s, written))


def _cycle_after(s: Scenario, written: Any) -> Any:
    """The next leader cycle, restarted from the status branch ``written``."""
    for fake in s.clusters.values():
        fake.calls.clear()
    nxt = _cycle(s, leading=True, memory=memory_from_status(written)).plan
    assert nxt is not None
    return nxt


def _assert_plan_json_is(plan_json: dict[str, Any], plan: Any) -> None:
    # every field of the contract but the estimates (compared on their own): messages,
    # blockedBy and the structured admit of each pending entry, each queue's usage
    expected = plan_to_dict(plan)
    assert [{k: v for k, v in p.items() if k != "estimate"} for p in plan_json["pending"]] == [
        {k: v for k, v in p.items() if k != "estimate"} for p in expected["pending"]
    ]
    assert plan_json["dispatch"] == expected["dispatch"]
    assert plan_json["stop"] == expected["stop"]
    assert plan_json["queues"] == expected["queues"]
    assert [(d["operation"], d["cluster"]) for d in plan_json["dispatch"]] == [
        (d.operation, d.cluster) for d in plan.dispatch
    ]
    assert [(p["operation"], p["reason"], p["position"]) for p in plan_json["pending"]] == [
        (p.operation, str(p.reason), plan.positions()[p.operation]) for p in plan.pending
    ]
    assert [x["operation"] for x in plan_json["stop"]] == [x.operation for x in plan.stop]
    assert [
        (q["name"], q["active"], q["used"], q["dispatching"], q["pending"])
        for q in plan_json["queues"]
    ] == [
        (
            q.name,
            q.active,
            {r: format_quantity(v) for r, v in sorted(q.used.items())},
            q.dispatching,
            q.pending,
        )
        for q in plan.queues
    ]


def test_a_lagging_watch_and_a_fresh_list_decide_the_same() -> None:
    """An in-flight create (its response back, the watch behind) counts exactly as the same
    Job seen by a fresh list: the leader and a --live view agree."""
    world = World().queue("q", quota={"nvidia.com/gpu": 2})
    world.op("p/a", gpu=2)
    world.op("p/b", gpu=2)
    compiled = world.repo()
    manifest = _manifest(compiled, "p/a", 1)
    fake = FakeCluster("local")
    job = fake.add_job(manifest)
    [state] = observe_workloads("local", [job], [])
    rv = job["metadata"]["resourceVersion"]
    lagging = {"local": ClusterListing((), version=str(int(rv) - 1))}
    leader = decide(compiled, lagging, Memory({"p/a": state}, {"p/a": InFlight(state, rv)}), NOW)
    fresh = {"local": ClusterListing((state,))}
    view = decide(compiled, fresh, Memory({"p/a": state}), NOW)
    assert leader.plan == view.plan
    assert [p.operation for p in leader.plan.pending] == ["p/b"]
    assert leader.memory.inflight  # still in flight until the watch catches up
    caught_up = {"local": ClusterListing((state,), version=rv)}
    assert not decide(compiled, caught_up, leader.memory, NOW).memory.inflight


def test_a_superseded_run_holds_its_quota_in_every_view() -> None:
    """Issue 12 item 2: after a generation bump of a running GPU operation, plan --live
    and the cycle both hold the next operation, because the old run still uses the quota."""
    world = World().queue("q", quota={"nvidia.com/gpu": 2})
    world.op("p/train", gpu=2)._fields["generation"] = 2
    world.op("p/next", gpu=2)
    compiled = world.repo()
    fake = FakeCluster("local")
    old = _manifest(compiled, "p/train", 1)
    fake.add_job(old)
    fake.set_phase(old["metadata"]["namespace"], old["metadata"]["name"], "Running")
    s = Scenario(compiled, {"local": fake}, Memory())
    planned = json.loads(
        run_plan(lambda: compiled, live_planner(Memory(), NOW, s.connect), "json").stdout  # type: ignore[arg-type]
    )
    result = _cycle(s, leading=True)
    assert planned["dispatch"] == [] and result.plan is not None and result.plan.dispatch == ()
    assert {p["operation"]: p["reason"] for p in planned["pending"]} == {
        "p/train": "QuotaExceeded",
        "p/next": "QuotaExceeded",
    }
    assert planned["pending"][0]["admitWhen"] == "ResourcesReleased"
    assert planned["pending"][0]["blockedBy"]["releasedBy"] == ["p/train@g1"]


def test_a_replica_with_a_cluster_down_shows_the_last_known_phases() -> None:
    """Issue 12 item 4: every operation Succeeded on the status branch, the cluster down: a
    read-only replica shows no usage (not every op counted as Dispatched)."""
    world = World().queue("team-a", quota={"nvidia.com/gpu": 2})
    world.op("p/a", gpu=2)
    world.op("p/b", gpu=2)
    compiled = world.repo()
    done = {
        op.id: WorkloadState(
            op.id, 1, "local", "p", f"p-{op.name}-g1", "", Phase.SUCCEEDED, queue="team-a"
        )
        for op in compiled.operations
    }
    memory = memory_from_status(
        read_status(render_status(compiled, plan_repo(compiled, [], NOW), done))
    )
    s = Scenario(compiled, {"local": FakeCluster("local", reachable=False)}, memory)
    result = _cycle(s, leading=False)
    assert result.plan is not None
    [q] = result.plan.queues
    assert (q.active, q.used_after) == (0, {"nvidia.com/gpu": Decimal(0)})
    assert {op: st.phase for op, st in result.states.items()} == {
        "p/a": Phase.SUCCEEDED,
        "p/b": Phase.SUCCEEDED,
    }
    assert [(c.name, c.reachable) for c in result.clusters] == [("local", False)]


def test_the_plan_is_never_edited_after_planning() -> None:
    """Issue 12 item 3: with a cluster down its queues wait with ClusterUnreachable (check
    0), and the queue summary counts only what is known: no record Queued without reason
    while its queue counts it active."""
    world = World().queue("team-a", quota={"nvidia.com/gpu": 2})
    world.op("p/a", gpu=1)
    world.op("p/b", gpu=1)
    compiled = world.repo()
    s = Scenario(compiled, {"local": FakeCluster("local", reachable=False)}, Memory())
    decision = decide_live(compiled, s.memory, NOW, s.connect)  # type: ignore[arg-type]
    view = live_status_view(compiled, decision)
    assert [(o.operation, o.phase, o.reason) for o in view.operations.values()] == [
        ("p/a", "Queued", "ClusterUnreachable"),
        ("p/b", "Queued", "ClusterUnreachable"),
    ]
    [q] = view.queues
    assert (q.active, dict(q.used)) == (0, {"nvidia.com/gpu": "0"})
    assert decision.plan.pending[0].admit.text == "admitted when it can be read again"


def test_plan_from_the_status_branch_counts_a_superseded_run() -> None:
    """After a generation bump of a running GPU operation, the status branch records the old
    run (on the operation's record, with what it requests), so ``plan`` without --live holds
    the next operation as the cycle does; with the cluster down, its quota stays held."""
    world = World().queue("q", quota={"nvidia.com/gpu": 2})
    world.op("p/train", gpu=2)._fields["generation"] = 2
    world.op("p/next", gpu=2)
    compiled = world.repo()
    fake = FakeCluster("local")
    old = _manifest(compiled, "p/train", 1)
    fake.add_job(old)
    fake.set_phase(old["metadata"]["namespace"], old["metadata"]["name"], "Running")
    s = Scenario(compiled, {"local": fake}, Memory())
    result = _cycle(s, leading=True)
    assert result.compiled is not None and result.plan is not None
    written = read_status(render_cycle_status(result, result.compiled, result.plan))
    [run] = written.operations["p/train"].superseded
    assert (run.generation, run.phase, dict(run.requests)) == (
        1,
        Phase.RUNNING,
        {"nvidia.com/gpu": "2"},
    )
    assert written.operations["p/train"].phase == "Queued"
    down = (ClusterStatus(name="local", reachable=False, error="connection refused"),)
    for view, why in (
        (written, "QuotaExceeded"),
        (replace(written, clusters=down), "ClusterUnreachable"),
    ):
        planned = json.loads(run_plan(lambda: compiled, recorded_planner(view, NOW), "json").stdout)
        assert planned["dispatch"] == [], view.clusters
        assert {p["operation"]: p["reason"] for p in planned["pending"]}["p/next"] == why
        [q] = planned["queues"]
        assert q["used"] == {"nvidia.com/gpu": "2"}
    # the cluster down at the last cycle: the run is remembered, its quota still held
    fake.reachable = False
    down_cycle = _cycle(s, leading=True, memory=memory_from_status(written))
    assert down_cycle.decision is not None
    assert set(down_cycle.decision.superseded) == {"p/train@g1"}
    assert down_cycle.plan is not None and down_cycle.plan.dispatch == ()
