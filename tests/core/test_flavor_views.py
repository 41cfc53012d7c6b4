"""A queue with flavors in every view of the queues: ``reconciler queues`` (table, wide,
json), the web pages, ``/api/v1`` rows, ``status/queues.yaml`` and what the views that work
from the status branch read back (``queues``, ``status``, ``serve``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

from support.worlds import cohort_world

from reconciler.cli.queues_cmd import render_view
from reconciler.cli.status_cmd import status_to_table
from reconciler.core.plan import Plan
from reconciler.core.reporting.status import QUEUES_FILE, QueueStatus, read_status, render_status
from reconciler.core.types import CompiledRepo, Phase
from reconciler.core.views.queue_view import (
    build_queue_detail,
    build_queues_view,
    queue_settings,
    queues_to_table,
    queues_view_from_status,
)
from reconciler.core.views.web_html import queue_main, render_queues_page

NOW = datetime(2026, 1, 1, tzinfo=UTC)
GPU = "nvidia.com/gpu"


def planned() -> tuple[CompiledRepo, Plan]:
    w = cohort_world()
    plan = w.plan()
    assert {d.operation: d.flavor for d in plan.dispatch} == {
        "vision/big": "a100",
        "vision/small": "h100",
        "vision/plain": None,
    }
    return w.repo(), plan


def test_a_flavored_queue_row_has_each_flavors_use_in_the_queues_order() -> None:
    repo, plan = planned()
    view = build_queues_view(repo, plan, {}, applied=True)
    a, b, plain = (view.row(n) for n in ("team-a", "team-b", "plain"))
    assert a is not None and b is not None and plain is not None
    assert [f.name for f in a.flavors] == ["h100", "a100"]
    a100 = a.flavors[1].quotas[0]
    assert (a100.resource, a100.used, a100.limit, a100.borrowed) == (GPU, 3, 1, 2)
    assert b.flavors[1].quotas[0].lent == 2 and b.flavors[0].quotas[0].used == 1
    assert plain.flavors == ()
    # the row's own quota is the sum over its flavors
    assert (a.quotas[0].used, a.quotas[0].limit) == (3, 2)
    assert a.quota_text == ("h100: nvidia.com/gpu 0/1; a100: nvidia.com/gpu 3/1 (+2 borrowed)")
    assert b.quota_text == "h100: nvidia.com/gpu 1/4; a100: nvidia.com/gpu 0/4 (2 lent)"
    assert plain.quota_text == "nvidia.com/gpu 1/2"
    # not applied (--live, serve): the plan's dispatches are not counted yet
    live = build_queues_view(repo, plan, {}, applied=False).row("team-a")
    assert live is not None and live.flavors[1].quotas[0].used == 0


def test_the_table_and_json_show_flavors_and_leave_a_flavorless_row_as_it_was() -> None:
    repo, plan = planned()
    view = build_queues_view(repo, plan, {}, applied=True)
    for wide in (False, True):
        lines = queues_to_table(view, wide=wide).splitlines()
        row = next(line for line in lines if line.startswith("team-a "))
        assert "h100: nvidia.com/gpu 0/1; a100: nvidia.com/gpu 3/1 (+2 borrowed)" in row
    data = json.loads(render_view(view, "json"))
    rows = {r["name"]: r for r in data["queues"]}
    assert rows["team-a"]["flavors"] == [
        {
            "name": "h100",
            "quota": [{"resource": GPU, "used": "0", "limit": "1", "borrowed": "0", "lent": "0"}],
        },
        {
            "name": "a100",
            "quota": [{"resource": GPU, "used": "3", "limit": "1", "borrowed": "2", "lent": "0"}],
        },
    ]
    assert "flavors" not in rows["plain"]


def test_the_status_branch_records_each_flavor_and_the_views_read_it_back() -> None:
    repo, plan = planned()
    files = render_status(repo, plan, {})
    text = files[QUEUES_FILE].decode()
    assert "flavors:" in text
    status = read_status(files)
    recorded = {q.name: q for q in status.queues}
    zero = {GPU: "0"}
    assert [f.to_dict() for f in recorded["team-a"].flavors] == [
        {"name": "h100", "quota": {GPU: "1"}, "used": zero, "borrowed": zero, "lent": zero},
        {
            "name": "a100",
            "quota": {GPU: "1"},
            "used": {GPU: "3"},
            "borrowed": {GPU: "2"},
            "lent": zero,
        },
    ]
    assert "flavors" not in recorded["plain"].to_dict()
    from_branch = queues_view_from_status(status)
    from_cycle = build_queues_view(repo, plan, {}, applied=True)
    for name in ("team-a", "team-b", "plain"):
        got, want = from_branch.row(name), from_cycle.row(name)
        assert got is not None and want is not None
        assert got.flavors == want.flavors and got.quota_text == want.quota_text
    # ``reconciler status`` (not --live): the queue table from the same records
    table = status_to_table(status, [], queues=True)
    row = next(line for line in table.splitlines() if line.startswith("team-a "))
    assert "h100: nvidia.com/gpu 0/1; a100: nvidia.com/gpu 3/1" in row


def test_a_hand_edited_flavor_entry_is_skipped_not_the_queue() -> None:
    record = QueueStatus.from_dict(
        {"name": "q", "flavors": [{"name": "h100", "quota": {GPU: "2"}}, "garbage", {"x": 1}]}
    )
    assert [f.name for f in record.flavors] == ["h100"]


def test_the_web_pages_show_a_bar_per_flavor() -> None:
    repo, plan = planned()
    view = build_queues_view(repo, plan, {}, applied=True)
    page = render_queues_page(view)
    assert 'data-flavor="a100" data-resource="nvidia.com/gpu"' in page
    assert "a100 nvidia.com/gpu <b>3/1 (+2 borrowed)</b>" in page
    plain_row = page[page.index('data-queue="plain"') :]
    plain_row = plain_row[: plain_row.index("</tr>")]
    assert "data-flavor" not in plain_row
    detail = build_queue_detail(repo, plan, {}, "team-a", applied=True)
    assert detail is not None
    assert 'data-flavor="h100"' in queue_main(detail)
    assert detail.to_json()["flavors"][1]["name"] == "a100"


def test_a_flavored_queues_settings_list_each_flavor() -> None:
    w = cohort_world()
    w.set_queue("team-a", fair_weight=Decimal(3))
    settings = {s.key: s.value for s in queue_settings(w.repo().queues["team-a"])}
    assert settings["flavors"] == "h100, a100"
    assert settings["flavors.a100.quota.nvidia.com/gpu"] == "1"
    assert settings["flavors.a100.borrowingLimit.nvidia.com/gpu"] == "2"
    assert settings["fairSharing.weight"] == "3"
    assert "quota" not in settings
    plain = {s.key for s in queue_settings(w.repo().queues["plain"])}
    assert not any(k.startswith(("flavors", "fairSharing")) for k in plain)


def test_a_running_flavored_run_counts_in_its_flavor() -> None:
    w = cohort_world()
    w.observe("vision/small", Phase.RUNNING, flavor="a100", queue="team-b")
    plan = w.plan()
    view = build_queues_view(w.repo(), plan, {}, applied=False)
    b = view.row("team-b")
    assert b is not None
    assert [(f.name, f.quotas[0].used) for f in b.flavors] == [("h100", 0), ("a100", 1)]


def test_an_operation_and_an_active_run_name_their_flavor() -> None:
    from reconciler.core.observation.observe import WorkloadState
    from reconciler.core.views.queue_view import build_operation_detail
    from reconciler.core.views.web_html import operation_main

    repo, plan = planned()
    # planned, not created yet (read-only): the flavor the plan assigns
    detail = build_operation_detail(repo, plan, {}, "vision/big", applied=False)
    assert detail is not None and detail.flavor == "a100"
    assert detail.to_json()["flavor"] == "a100"
    assert "<dt>Flavor</dt><dd>a100</dd>" in operation_main(detail)
    plain = build_operation_detail(repo, plan, {}, "vision/plain", applied=False)
    assert plain is not None and "flavor" not in plain.to_json()
    state = WorkloadState(
        operation="vision/small",
        generation=1,
        cluster="local",
        namespace="vision",
        name="vision-small-g1",
        uid="u",
        phase=Phase.RUNNING,
        queue="team-b",
        requests={GPU: Decimal(1)},
        flavor="h100",
    )
    states = {"vision/small": state}
    running = build_operation_detail(repo, plan, states, "vision/small", applied=True)
    assert running is not None and running.flavor == "h100"
    queue = build_queue_detail(repo, plan, states, "team-b", applied=True)
    assert queue is not None
    (active,) = queue.active
    assert active.flavor == "h100" and active.to_json()["flavor"] == "h100"
    assert "nvidia.com/gpu=1 in h100" in queue_main(queue)


def test_each_flavor_setting_has_its_line_in_the_queue_file() -> None:
    source = b"""kind: Queue
name: team-a
cluster: local
flavors:
  - name: h100
    quota:
      nvidia.com/gpu: 1
  - name: a100
    quota:
      nvidia.com/gpu: 1
    borrowingLimit:
      nvidia.com/gpu: 2
cohort: pool
"""
    spec = cohort_world().repo().queues["team-a"]
    lines = {s.key: s.line for s in queue_settings(spec, source)}
    assert lines["flavors"] == 4
    assert lines["flavors.h100.quota.nvidia.com/gpu"] == 7
    assert lines["flavors.a100.quota.nvidia.com/gpu"] == 10
    assert lines["flavors.a100.borrowingLimit.nvidia.com/gpu"] == 12
