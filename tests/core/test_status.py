"""The status files (pure): render, read back, diff and summarise."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from unittest import mock

import yaml
from support.builders import NOW, World

import reconciler.core.reporting.status as status_module
from reconciler.core.decision.render import spec_hash, workload_name
from reconciler.core.observation.observe import ObservedReason, WorkloadState
from reconciler.core.plan import plan_repo
from reconciler.core.plan.ledger import ledger_path
from reconciler.core.reporting.status import (
    CLUSTERS_FILE,
    CONFIG_FILE,
    DECISION_FILE,
    NOTIFY_FILE,
    QUEUES_FILE,
    ConfigStatus,
    OperationStatus,
    PhaseMemo,
    RecordMemo,
    RenderMemo,
    SpecHashMemo,
    StatusReason,
    flat_operation_path,
    is_order_path,
    operation_path,
    order_path,
    parse_status_file,
    path_operation,
    read_status,
    record_bucket,
    record_paths,
    render_status,
    status_changes,
    summarize_cycle,
)
from reconciler.core.types import CompiledRepo, ConfigError, Location, Phase

COMMIT = "c0ffee" * 6 + "abcd"
OLD_COMMIT = "01d" * 13 + "a"


def state(repo: CompiledRepo, op_id: str, phase: Phase, **fields: Any) -> WorkloadState:
    op = next((o for o in repo.operations if o.id == op_id), None)
    project, name = op_id.split("/")
    generation = fields.pop("generation", op.generation if op else 1)
    defaults: dict[str, Any] = {
        "operation": op_id,
        "generation": generation,
        "cluster": op.cluster if op else "local",
        "namespace": op.namespace if op else project,
        "name": workload_name(project, name, generation),
        "uid": f"uid-{op_id}",
        "phase": phase,
        "queue": op.queue if op else "team-a",
        "spec_hash": spec_hash(op, repo.connections) if op else "feedfacefeedface",
        "config_commit": OLD_COMMIT,
        "dispatched_at": "2026-01-01T11:00:00Z",
        "started_at": "2026-01-01T11:00:05Z" if phase is not Phase.DISPATCHED else None,
        "requests": dict(op.requests) if op else {},
    }
    defaults.update(fields)
    return WorkloadState(**defaults)


def seed() -> World:
    world = World().cluster("local").queue("team-a", quota={"nvidia.com/gpu": 2}, priority=10)
    world.ops("vision/train-{}", 5, queue="team-a", gpu=1)
    return world


def cycle(
    world: World, states: dict[str, WorkloadState], **kw: Any
) -> tuple[CompiledRepo, dict[str, bytes]]:
    repo = world.repo(COMMIT)
    plan = plan_repo(repo, [s.to_observed() for s in states.values()], NOW)
    return repo, render_status(repo, plan, states, **kw)


def load(files: dict[str, bytes], path: str) -> dict[str, Any]:
    data = yaml.safe_load(files[path])
    assert isinstance(data, dict)
    return data


def test_seed_example_records_phases_reasons_positions_and_queue_usage() -> None:
    world = seed()
    repo = world.repo(COMMIT)
    states = {
        "vision/train-1": state(repo, "vision/train-1", Phase.RUNNING, outputs={"loss": 0.5}),
        "vision/train-2": state(
            repo,
            "vision/train-2",
            Phase.DISPATCHED,
            reason=ObservedReason.WAITING_FOR_CAPACITY,
            message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        ),
    }
    _, files = cycle(world, states)
    assert set(files) == {
        CONFIG_FILE,
        QUEUES_FILE,
        order_path("team-a"),
        *(operation_path(f"vision/train-{i}") for i in range(1, 6)),
    }
    one = load(files, operation_path("vision/train-1"))
    assert one["phase"] == "Running"
    assert one["configCommit"] == OLD_COMMIT  # the commit that dispatched it
    assert one["outputs"] == {"loss": 0.5}
    assert one["workload"] == "vision-train-1-g1"
    assert one["logs"] == "reconciler logs vision/train-1"
    assert one["sync"] == "Synced"
    assert one["startedAt"] == "2026-01-01T11:00:05Z"
    assert "position" not in one
    two = load(files, operation_path("vision/train-2"))
    assert (two["phase"], two["reason"]) == ("Dispatched", "WaitingForCapacity")
    assert "Insufficient nvidia.com/gpu" in two["message"]
    # the queue's order file holds the positions; the records hold neither the position
    # nor the commit in force (config.yaml's applied), so neither rewrites them
    assert load(files, order_path("team-a")) == {
        "queue": "team-a",
        "first": 1,
        "pending": ["vision/train-3", "vision/train-4", "vision/train-5"],
    }
    view = read_status(files)
    for i, position in ((3, 1), (4, 2), (5, 3)):
        queued = load(files, operation_path(f"vision/train-{i}"))
        assert (queued["phase"], queued["reason"]) == ("Queued", "QuotaExceeded")
        assert "position" not in queued and "configCommit" not in queued
        read = view.operations[f"vision/train-{i}"]
        assert (read.position, read.config_commit) == (position, COMMIT)
        assert queued["queue"] == "team-a" and queued["cluster"] == "local"
        assert queued["workload"] == f"vision-train-{i}-g1"
        assert "uses 2 of 2" in queued["message"]
        assert queued["blockedBy"]["resource"] == "nvidia.com/gpu"
    queues = load(files, QUEUES_FILE)["queues"]
    assert queues == [
        {
            "name": "team-a",
            "cluster": "local",
            "priority": 10,
            "quota": {"nvidia.com/gpu": "2"},
            "active": 2,
            "used": {"nvidia.com/gpu": "2"},
            "pending": 3,
            "headReason": "QuotaExceeded",
            "strategy": "BestEffortFIFO",
            "paused": False,
            "kinds": ["batch", "job", "notebook", "sandbox"],
        }
    ]
    assert load(files, CONFIG_FILE) == {"version": COMMIT, "applied": COMMIT, "valid": True}


def test_dispatched_this_cycle_counts_in_queue_usage() -> None:
    world = seed()
    _, files = cycle(world, {})
    first = load(files, operation_path("vision/train-1"))
    assert (first["phase"], first["reason"]) == ("Dispatched", "WorkloadCreated")
    queue = load(files, QUEUES_FILE)["queues"][0]
    assert (queue["active"], queue["used"], queue["pending"]) == (2, {"nvidia.com/gpu": "2"}, 3)


def test_a_failed_dispatch_stays_queued_with_its_reason() -> None:
    world = seed()
    message = "namespace vision does not exist and the reconciler may not create it"
    _, files = cycle(
        world,
        {},
        failed={
            "vision/train-1": (StatusReason.NAMESPACE_FORBIDDEN, message),
            "vision/train-5": (StatusReason.DISPATCH_FAILED, "not planned: ignored"),
        },
    )
    first = load(files, operation_path("vision/train-1"))
    assert (first["phase"], first["reason"], first["message"]) == (
        "Queued",
        "NamespaceForbidden",
        message,
    )
    assert "dispatchedAt" not in first
    second = load(files, operation_path("vision/train-2"))  # dispatched in the same cycle
    assert (second["phase"], second["reason"]) == ("Dispatched", "WorkloadCreated")
    fifth = load(files, operation_path("vision/train-5"))  # a failure only counts if planned
    assert (fifth["phase"], fifth["reason"]) == ("Queued", "QuotaExceeded")


def test_render_is_deterministic_whatever_the_input_order() -> None:
    world = seed()
    repo = world.repo(COMMIT)
    states = {f"vision/train-{i}": state(repo, f"vision/train-{i}", Phase.RUNNING) for i in (1, 2)}
    _, first = cycle(world, states)
    _, again = cycle(world, dict(reversed(list(states.items()))))
    assert first == again
    shuffled = World().cluster("local").queue("team-a", quota={"nvidia.com/gpu": 2}, priority=10)
    shuffled.builders = list(reversed(world.builders))
    _, other = cycle(shuffled, states)
    assert other == first
    # byte-level: sorted keys, no wrapping of long messages
    text = first[operation_path("vision/train-3")].decode()
    keys = [line.split(":")[0] for line in text.splitlines() if not line.startswith(" ")]
    assert keys == sorted(keys)
    assert all(len(line) < 400 for line in text.splitlines())


def test_out_of_sync_when_an_active_workload_runs_another_spec() -> None:
    world = seed()
    repo = world.repo(COMMIT)
    states = {
        "vision/train-1": state(repo, "vision/train-1", Phase.RUNNING, spec_hash="0123456789ab"),
        "vision/train-2": state(repo, "vision/train-2", Phase.SUCCEEDED, spec_hash="0123"),
    }
    _, files = cycle(world, states)
    one = load(files, operation_path("vision/train-1"))
    assert one["sync"] == "OutOfSync"
    assert one["workloadSpecHash"] == "0123456789ab"
    assert one["specHash"] == spec_hash(repo.operations[0], repo.connections)
    # a finished workload is never interrupted nor re-run: it is not out of sync
    assert load(files, operation_path("vision/train-2"))["sync"] == "Synced"


def test_removed_ops_still_observed_keep_a_file_and_say_why() -> None:
    world = seed()
    repo = world.repo(COMMIT)
    running = state(repo, "vision/train-1", Phase.RUNNING)
    done = state(repo, "vision/train-2", Phase.SUCCEEDED, finished_at="2026-01-01T11:30:00Z")
    world.remove("vision/train-1", "vision/train-2")
    states = {"vision/train-1": running, "vision/train-2": done}
    _, files = cycle(world, states)
    gone = load(files, operation_path("vision/train-1"))
    assert (gone["phase"], gone["reason"], gone["sync"]) == (
        "Running",
        "RemovedFromRepo",
        "OutOfSync",
    )
    assert "prune is off" in gone["message"]
    assert gone["workload"] == "vision-train-1-g1" and gone["queue"] == "team-a"
    finished = load(files, operation_path("vision/train-2"))
    assert (finished["phase"], finished["finishedAt"]) == ("Succeeded", "2026-01-01T11:30:00Z")

    world.with_org(prune=True, allow_mass_prune=True)
    _, pruned = cycle(world, states)
    assert "stopping" in load(pruned, operation_path("vision/train-1"))["message"]

    world.with_org(prune=True, allow_mass_prune=False, max_prune_fraction=0.0)
    _, refused = cycle(world, states)
    record = load(refused, operation_path("vision/train-1"))
    assert record["reason"] == "PruneRefused"
    assert load(refused, CONFIG_FILE)["warnings"] == [record["message"]]


def test_rejected_ops_record_the_policy_violation() -> None:
    world = seed().reject("vision/train-5", "resources.limits.nvidia.com/gpu 9 exceeds 4")
    _, files = cycle(world, {})
    record = load(files, operation_path("vision/train-5"))
    assert (record["phase"], record["reason"]) == ("Rejected", "PolicyViolation")
    assert "exceeds 4" in record["message"]
    assert record["path"] == "vision/operations/train-5.yaml"


def test_workflow_children_and_their_parent() -> None:
    world = World().cluster("local").queue("q", concurrency=1)
    for i in range(3):
        world.op(f"vision/sweep-{i}", queue="q").child_of("vision/sweep", i, concurrency=1)
    repo = world.repo(COMMIT)
    states = {"vision/sweep-0": state(repo, "vision/sweep-0", Phase.SUCCEEDED)}
    _, files = cycle(world, states)
    child = load(files, operation_path("vision/sweep-1"))
    assert child["workflow"] == {"parent": "vision/sweep", "kind": "matrix", "index": 1}
    assert child["phase"] == "Dispatched"
    parent = load(files, operation_path("vision/sweep"))
    assert parent["phase"] == "Running"
    assert parent["kind"] == "matrix"
    assert parent["children"] == ["vision/sweep-0", "vision/sweep-1", "vision/sweep-2"]
    assert parent["message"] == "3 children: 1 dispatched, 1 queued, 1 succeeded"


def test_invalid_config_goes_to_config_status() -> None:
    world = seed()
    errors = (
        ConfigError(Location("queues/b.yaml", 3, 7), "quota: expected a mapping"),
        ConfigError(Location("queues/a.yaml", 1, 1), "unknown key 'prioritty'"),
    )
    _, files = cycle(world, {}, config_error=errors, config_version="bad" * 13 + "b")
    assert load(files, CONFIG_FILE) == {
        "version": "bad" * 13 + "b",
        "applied": COMMIT,
        "valid": False,
        "errors": [
            "queues/a.yaml:1:1: unknown key 'prioritty'",
            "queues/b.yaml:3:7: quota: expected a mapping",
        ],
    }


def test_every_file_reads_back_to_the_same_bytes() -> None:
    world = seed().reject("vision/train-5", "nope")
    repo = world.repo(COMMIT)
    states = {"vision/train-1": state(repo, "vision/train-1", Phase.FAILED, outputs={"a": [1]})}
    _, files = cycle(world, states)
    from reconciler.core.reporting.status import QueueStatus, dump_yaml

    for path, data in files.items():
        parsed = parse_status_file(path, data)
        if isinstance(parsed, tuple):
            back = dump_yaml({"queues": [q.to_dict() for q in parsed]})
            assert all(isinstance(q, QueueStatus) for q in parsed)
        else:
            back = dump_yaml(parsed.to_dict())
        assert back == data, path
    view = read_status(files)
    assert set(view.operations) == {f"vision/train-{i}" for i in range(1, 6)}
    assert view.operations["vision/train-1"].phase == "Failed"
    assert isinstance(view.config, ConfigStatus) and view.config.valid
    assert view.queues[0].name == "team-a"


def test_parse_errors_point_at_the_file() -> None:
    import pytest

    from reconciler.core.reporting.status import StatusFileError

    with pytest.raises(StatusFileError, match=r"^status/a/b.yaml:2:\d+: "):
        parse_status_file("status/a/b.yaml", b"operation: a/b\n  phase: [\n")
    with pytest.raises(StatusFileError, match="not a status file"):
        parse_status_file("status/a/b.yaml", b"phase: Running\n")
    view = read_status({"status/a/b.yaml": b"- 1\n", "status/NOTES.md": b"x"})
    assert view.problems == ("status/a/b.yaml:1:1: expected a mapping",)


def test_status_changes_only_changed_and_deleted_files() -> None:
    world = seed()
    _, before = cycle(world, {})
    assert status_changes(before, before) == {}
    repo = world.repo(COMMIT)
    states = {"vision/train-1": state(repo, "vision/train-1", Phase.RUNNING)}
    _, after = cycle(world, states)
    changes = status_changes(before, after)
    assert set(changes) == {operation_path("vision/train-1")}
    assert changes[operation_path("vision/train-1")] == after[operation_path("vision/train-1")]
    # an op removed from the repo and from every cluster: its file goes; a human's stays
    world.remove("vision/train-5")
    _, later = cycle(world, states)
    human = {**after, "status/NOTES.md": b"hand-written"}
    changes = status_changes(human, later)
    assert changes[operation_path("vision/train-5")] is None
    assert "status/NOTES.md" not in changes


def _flat(files: Mapping[str, bytes]) -> dict[str, bytes]:
    """``files`` as a branch written before the buckets holds them."""
    out: dict[str, bytes] = {}
    for path, data in files.items():
        operation = path_operation(path)
        out[flat_operation_path(operation) if operation else path] = data
    return out


def test_a_record_sits_in_its_projects_bucket_and_no_other_file_takes_a_bucket() -> None:
    for operation in ("p/a", "vision/train-1", "team-a/" + "x" * 63):
        path = operation_path(operation)
        _, project, bucket, name = path.split("/")
        assert (project, name) == (operation.split("/")[0], operation.split("/")[1] + ".yaml")
        assert re.fullmatch(r"[0-9a-f]{3}", bucket)
        assert path_operation(path) == operation
        assert path_operation(flat_operation_path(operation)) == operation
        assert record_paths(operation) == (path, flat_operation_path(operation))
    # 4,096 buckets, the names spread over them
    buckets = Counter(record_bucket(f"train-{i}") for i in range(100_000))
    assert len(buckets) == 4096 and max(buckets.values()) < 60
    # the other status files are none of an operation's
    for path in (
        QUEUES_FILE,
        CONFIG_FILE,
        CLUSTERS_FILE,
        DECISION_FILE,
        NOTIFY_FILE,
        order_path("team-a"),
        order_path("team-a", 2),
        ledger_path("2026-12"),
        "status/NOTES.md",
    ):
        assert path_operation(path) is None, path
    wrong = next(b for b in ("000", "001") if b != record_bucket("a"))
    assert path_operation(f"status/p/{wrong}/a.yaml") is None  # not its name's bucket


def test_records_of_both_layouts_are_read_and_the_bucketed_one_wins() -> None:
    """A branch, or a past commit, written before the buckets reads as it did; where both
    layouts hold a record of one operation, the one in its bucket is its record, whichever
    path sorts first."""
    world = seed()
    repo = world.repo(COMMIT)
    states = {"vision/train-1": state(repo, "vision/train-1", Phase.RUNNING)}
    _, files = cycle(world, states)
    flat = _flat(files)
    assert flat.keys().isdisjoint(files.keys() - {QUEUES_FILE, CONFIG_FILE, order_path("team-a")})
    assert read_status(flat) == read_status(files)
    names = [f"{c}x" for c in "0123456789abcdef"]
    # the flat path sorts before the bucketed one for some, after it for others
    assert {flat_operation_path(f"p/{n}") < operation_path(f"p/{n}") for n in names} == {
        True,
        False,
    }
    both: dict[str, bytes] = {}
    for n in names:
        both[operation_path(f"p/{n}")] = f"operation: p/{n}\nphase: Running\n".encode()
        both[flat_operation_path(f"p/{n}")] = f"operation: p/{n}\nphase: Queued\n".encode()
    view = read_status(both)
    assert {view.operations[f"p/{n}"].phase for n in names} == {Phase.RUNNING}


def test_the_first_write_on_a_flat_branch_moves_every_record_into_its_bucket() -> None:
    """In one commit: each flat record deleted, its bucket's written; a record of an
    operation gone from the repo and every cluster deleted too; a human's file kept."""
    world = seed()
    repo = world.repo(COMMIT)
    states = {"vision/train-1": state(repo, "vision/train-1", Phase.RUNNING)}
    _, before = cycle(world, states)
    branch = {**_flat(before), "status/NOTES.md": b"hand-written"}
    world.remove("vision/train-5")
    _, after = cycle(world, states)
    changes = status_changes(branch, after)
    moved = {**branch, **changes}
    moved = {p: d for p, d in moved.items() if d is not None}
    assert moved == {**after, "status/NOTES.md": b"hand-written"}
    assert changes[flat_operation_path("vision/train-5")] is None
    assert "vision/train-5" not in summarize_cycle(branch, after).split("\n", 1)[0]
    assert summarize_cycle(branch, after) == summarize_cycle(before, after)


def test_summarize_cycle_counts_transitions() -> None:
    world = seed()
    repo = world.repo(COMMIT)
    _, start = cycle(world, {})
    # nothing observed yet: the first two are being dispatched
    initial = summarize_cycle({}, start)
    assert initial.splitlines()[0] == f"config {COMMIT[:12]}, dispatched 2, pending 3"
    running = {f"vision/train-{i}": state(repo, f"vision/train-{i}", Phase.RUNNING) for i in (1, 2)}
    _, second = cycle(world, running)
    assert summarize_cycle(start, second).splitlines()[0] == "started 2, pending 3"
    done = {
        "vision/train-1": state(repo, "vision/train-1", Phase.SUCCEEDED),
        "vision/train-2": state(repo, "vision/train-2", Phase.FAILED),
    }
    _, third = cycle(world, done)
    message = summarize_cycle(second, third)
    assert message.splitlines()[0] == "dispatched 2, finished 2 (1 failed), pending 1"
    # with a memo kept between cycles, the same messages; a file is parsed once per content
    memo: PhaseMemo = {}
    assert summarize_cycle({}, start, memo) == initial
    assert summarize_cycle(start, second, memo) == summarize_cycle(start, second)
    with mock.patch(
        "reconciler.core.reporting.status._run_of", wraps=status_module._run_of
    ) as parse:
        assert summarize_cycle(second, third, memo) == message
    changed = {p for p in third if third[p] != second.get(p) and p.endswith(".yaml")}
    assert {c.args[0] for c in parse.call_args_list} <= changed
    assert set(memo) <= set(third.values())
    body = message.splitlines()[2:]
    assert "vision/train-1: Running -> Succeeded" in body
    assert "vision/train-3: Queued -> Dispatched" in body
    # a generation bump re-runs a finished op: a new dispatch
    ops = [replace(o, generation=2) if o.name == "train-1" else o for o in world.operations()]
    bumped_repo = replace(world.repo(COMMIT), operations=tuple(ops))
    kept = {"vision/train-2": done["vision/train-2"]}
    plan = plan_repo(bumped_repo, [s.to_observed() for s in kept.values()], NOW)
    rerun = render_status(bumped_repo, plan, kept)
    assert "vision/train-1: new -> Dispatched" in summarize_cycle(third, rerun)
    # an invalid commit
    errors = (ConfigError(Location("a.yaml", 1, 2), "bad"),)
    plan = plan_repo(repo, [s.to_observed() for s in done.values()], NOW)
    broken = render_status(repo, plan, done, config_error=errors, config_version="f" * 40)
    assert summarize_cycle(third, broken) == "config ffffffffffff invalid (1 errors), pending 1"


def test_operation_status_ignores_unknown_and_mistyped_fields() -> None:
    record = OperationStatus.from_dict(
        {"operation": "a/b", "phase": "Queued", "position": "x", "future": 1}
    )
    assert record.position is None and record.phase == "Queued"


def test_cluster_health_is_recorded_stably_and_reads_back() -> None:
    from reconciler.core.reporting.status import CLUSTERS_FILE, ClusterStatus

    def outage(address: str) -> dict[str, bytes]:
        error = (
            f"listing Jobs: (Caused by NewConnectionError('<HTTPSConnection object at "
            f"{address}>: Failed to establish a new connection: [Errno 111] Connection refused'))"
        )
        down = (
            ClusterStatus(name="remote", reachable=False, error=error),
            ClusterStatus(name="local", reachable=True),
        )
        return cycle(seed(), {}, clusters=down)[1]

    first, second = outage("0x7f3a2b1c"), outage("0x7f99e0d4")
    assert status_changes(first, second) == {}  # no commit per cycle during an outage
    assert load(first, CLUSTERS_FILE) == {
        "clusters": [
            {"name": "local", "reachable": True},
            {
                "name": "remote",
                "reachable": False,
                "error": "listing Jobs: (Caused by NewConnectionError('<HTTPSConnection "
                "object>: Failed to establish a new connection: [Errno 111] Connection "
                "refused'))",
            },
        ]
    }
    view = read_status(first)
    assert [(c.name, c.reachable) for c in view.clusters] == [("local", True), ("remote", False)]
    assert view.queues and view.queues[0].name == "team-a"  # not mistaken for the queues
    assert CLUSTERS_FILE not in cycle(seed(), {})[1]  # nothing when no cluster was read


def test_a_record_phase_is_typed_and_an_unknown_one_is_a_problem() -> None:
    from reconciler.core.reporting.status import REJECTED, StatusPhase

    running = parse_status_file("status/p/a.yaml", b"operation: p/a\nphase: Running\n")
    assert isinstance(running, OperationStatus) and running.phase is Phase.RUNNING
    rejected = parse_status_file("status/p/r.yaml", b"operation: p/r\nphase: Rejected\n")
    assert isinstance(rejected, OperationStatus) and rejected.phase is StatusPhase.REJECTED
    assert REJECTED is StatusPhase.REJECTED
    view = read_status({"status/p/x.yaml": b"operation: p/x\nphase: Paused\n"})
    assert view.problems == ("status/p/x.yaml:1:1: not a status file (unknown phase 'Paused')",)


def test_only_the_camel_case_keys_of_a_file_count() -> None:
    """The records are built in code by field name, but a file's snake_case key is an
    unknown key, as it always was."""
    record = parse_status_file(
        "status/p/a.yaml",
        b"operation: p/a\nphase: Queued\nconfig_commit: x\nconfigCommit: y\nspec_hash: z\n",
    )
    assert isinstance(record, OperationStatus)
    assert (record.config_commit, record.spec_hash) == ("y", None)
    queues = parse_status_file("status/queues.yaml", b"queues:\n- name: a\n  head_reason: X\n")
    assert isinstance(queues, tuple) and queues[0].head_reason is None


def test_a_render_memo_dumps_only_the_records_that_changed() -> None:
    world = seed()
    repo = world.repo(COMMIT)
    memo: RenderMemo = {}
    _, first = cycle(world, {}, memo=memo)
    assert first == cycle(world, {})[1]
    running = {"vision/train-1": state(repo, "vision/train-1", Phase.RUNNING)}
    with mock.patch(
        "reconciler.core.reporting.status.dump_yaml", wraps=status_module.dump_yaml
    ) as dump:
        _, second = cycle(world, running, memo=memo)
    assert second == cycle(world, running)[1]
    changed = {p for p in second if second[p] != first.get(p)}
    # the changed operation files, plus queues.yaml and config.yaml (always dumped)
    assert dump.call_count == len(changed - {QUEUES_FILE, CONFIG_FILE}) + 2
    world.remove("vision/train-5")
    _, third = cycle(world, running, memo=memo)
    assert operation_path("vision/train-5") not in memo and set(memo) <= set(third)


# --- what a commit and a dispatch rewrite ----------------------------------------------


def _many_pending(n: int) -> World:
    world = World().cluster("local").queue("team-a", quota={"nvidia.com/gpu": 1}, priority=10)
    world.ops("vision/train-{}", n, queue="team-a", gpu=1)
    return world


def test_a_new_config_commit_rewrites_no_pending_record() -> None:
    """The commit in force is config.yaml's; a Queued record does not hold it, so a commit
    that changes no operation rewrites config.yaml alone."""
    world = _many_pending(6)
    running = {"vision/train-1": None}
    repo = world.repo(COMMIT)
    states = {op: state(repo, op, Phase.RUNNING) for op in running}
    observed = [s.to_observed() for s in states.values()]
    before = render_status(repo, plan_repo(repo, observed, NOW), states)
    later = world.repo(OLD_COMMIT[::-1])
    after = render_status(later, plan_repo(later, observed, NOW), states)
    assert list(status_changes(before, after)) == [CONFIG_FILE]
    assert read_status(after).operations["vision/train-2"].config_commit == OLD_COMMIT[::-1]


def test_a_dispatch_from_the_head_rewrites_the_order_not_every_pending_record() -> None:
    world = _many_pending(6)
    repo = world.repo(COMMIT)
    first = {"vision/train-1": state(repo, "vision/train-1", Phase.RUNNING)}
    before = render_status(
        repo, plan_repo(repo, [s.to_observed() for s in first.values()], NOW), first
    )
    # train-1 finished, train-2 (the head) is dispatched: every other one moves up by one
    done = {"vision/train-1": state(repo, "vision/train-1", Phase.SUCCEEDED, finished_at="x")}
    after = render_status(
        repo, plan_repo(repo, [s.to_observed() for s in done.values()], NOW), done
    )
    changed = set(status_changes(before, after))
    assert {order_path("team-a"), QUEUES_FILE, operation_path("vision/train-2")} <= changed
    # the others changed only in what they wait for (train-2 now holds the GPU), not in
    # where they stand
    for i in range(3, 7):
        path = operation_path(f"vision/train-{i}")
        was, now = load(before, path), load(after, path)
        assert {k for k in was.keys() | now.keys() if was.get(k) != now.get(k)} == {
            "message",
            "blockedBy",
        }
        assert "vision/train-2" in now["message"]
    view = read_status(after)
    assert [view.operations[f"vision/train-{i}"].position for i in range(3, 7)] == [1, 2, 3, 4]
    assert view.operations["vision/train-2"].position is None
    assert view.order == {"team-a": tuple(f"vision/train-{i}" for i in range(3, 7))}


def test_a_long_queue_order_is_split_and_read_back_whole() -> None:
    world = _many_pending(6)
    repo = world.repo(COMMIT)
    with mock.patch.object(status_module, "ORDER_PER_FILE", 2):
        files = render_status(repo, plan_repo(repo, [], NOW), {})
    # train-1 is dispatched; 5 pending: 2 + 2 + 1
    parts = sorted(p for p in files if is_order_path(p))
    assert parts == [order_path("team-a", 2), order_path("team-a", 3), order_path("team-a")]
    assert load(files, order_path("team-a", 3)) == {
        "queue": "team-a",
        "first": 5,
        "pending": ["vision/train-6"],
    }
    view = read_status(files)
    assert view.order["team-a"] == tuple(f"vision/train-{i}" for i in range(2, 7))
    assert [view.operations[f"vision/train-{i}"].position for i in range(2, 7)] == [1, 2, 3, 4, 5]
    # a part that cannot be read shifts no other part's positions
    damaged = {**files, order_path("team-a", 2): b"queue: [\n"}
    shown = read_status(damaged)
    assert [shown.operations[f"vision/train-{i}"].position for i in (2, 3, 6)] == [1, 2, 5]
    assert shown.operations["vision/train-4"].position is None
    assert len(shown.problems) == 1
    # the commit message counts operations, not order files
    assert summarize_cycle({}, files).endswith(
        "pending 5\n\n"
        + "\n".join(
            ["vision/train-1: new -> Dispatched"]
            + [f"vision/train-{i}: new -> Queued" for i in range(2, 7)]
        )
        + "\n"
    )
    # a queue with nothing pending any more: its order files are deleted
    gone = render_status(repo, plan_repo(repo, [], NOW), {}, memo={})
    emptied = {p: d for p, d in gone.items() if not is_order_path(p)}
    changes = status_changes(files, emptied)
    assert {p for p, d in changes.items() if d is None} == set(parts)


def test_an_old_format_branch_keeps_its_positions_and_commits() -> None:
    """Records written before the order files: each holds its position and configCommit."""
    files = {
        CONFIG_FILE: b"version: new\napplied: new\nvalid: true\n",
        "status/p/a.yaml": b"operation: p/a\nphase: Queued\nposition: 2\nconfigCommit: old\n",
        "status/p/b.yaml": b"operation: p/b\nphase: Queued\nposition: 1\n",
        "status/p/c.yaml": b"operation: p/c\nphase: Rejected\n",
    }
    view = read_status(files)
    assert (view.operations["p/a"].position, view.operations["p/a"].config_commit) == (2, "old")
    assert (view.operations["p/b"].position, view.operations["p/b"].config_commit) == (1, "new")
    assert view.operations["p/c"].config_commit == "new"
    assert view.order == {}
    # an order file, where there is one, is what says the position
    files[order_path("q")] = b"queue: q\npending: [p/a]\n"
    assert read_status(files).operations["p/a"].position == 1


def test_the_render_memo_reuses_an_unchanged_order_file() -> None:
    world = _many_pending(4)
    repo = world.repo(COMMIT)
    plan = plan_repo(repo, [], NOW)
    memo: RenderMemo = {}
    first = render_status(repo, plan, {}, memo=memo)
    again = render_status(repo, plan, {}, memo=memo)
    assert again[order_path("team-a")] is first[order_path("team-a")]
    assert again == render_status(repo, plan, {})


def test_the_spec_hash_memo_gives_the_hash_a_fresh_render_gives() -> None:
    world = _many_pending(3)
    repo = world.repo(COMMIT)
    plan = plan_repo(repo, [], NOW)
    hashes: SpecHashMemo = {}
    first = render_status(repo, plan, {}, hashes=hashes)
    assert set(hashes) == {f"vision/train-{i}" for i in range(1, 4)}
    assert render_status(repo, plan, {}, hashes=hashes) == first
    # a new compile (other objects, another spec): hashed again, never the old hash
    other = World().cluster("local").queue("team-b", quota={"nvidia.com/gpu": 1}, priority=10)
    other.ops("vision/train-{}", 2, queue="team-b", gpu=1)
    changed = other.repo(COMMIT)
    again = render_status(changed, plan_repo(changed, [], NOW), {}, hashes=hashes)
    assert again == render_status(changed, plan_repo(changed, [], NOW), {})
    assert (
        load(again, operation_path("vision/train-1"))["specHash"]
        != load(first, operation_path("vision/train-1"))["specHash"]
    )
    assert set(hashes) == {"vision/train-1", "vision/train-2"}  # the gone one forgotten


def test_the_record_memo_gives_the_files_a_fresh_render_gives() -> None:
    """With every memo kept between cycles, as the status writer keeps them, each cycle of
    a dispatch renders the very files a render without memos does; a record whose inputs
    did not change is the one built before."""
    world = _many_pending(4)
    repo = world.repo(COMMIT)
    built: RecordMemo = {}
    memos: dict[str, Any] = {"memo": {}, "hashes": {}, "phases": {}, "built": built}
    op = "vision/train-1"
    running = {op: state(repo, op, Phase.RUNNING)}
    steps: list[tuple[CompiledRepo, dict[str, WorkloadState], dict[str, Any]]] = [
        (repo, {}, {}),  # train-1 dispatched, the rest wait
        (repo, {}, {}),  # the same cycle again
        (repo, {}, {"failed": {op: (StatusReason.DISPATCH_FAILED, "boom")}}),
        (repo, running, {}),
        (repo, {op: state(repo, op, Phase.SUCCEEDED)}, {}),  # train-2 dispatched
        (world.repo(OLD_COMMIT), {op: state(repo, op, Phase.SUCCEEDED)}, {}),  # a new commit
    ]
    records: dict[str, Any] = {}
    for i, (compiled, states, kw) in enumerate(steps):
        plan = plan_repo(compiled, [s.to_observed() for s in states.values()], NOW)
        fresh = render_status(compiled, plan, states, **kw)
        assert render_status(compiled, plan, states, **kw, **memos) == fresh, i
        if i == 1:  # nothing changed: no record built again
            assert all(built[k][1] is records[k] for k in records)
        records = {k: v[1] for k, v in built.items()}
    assert set(built) == {f"vision/train-{i}" for i in range(1, 5)}
    # train-2, dispatched again under the new commit, says that commit (the same operation)
    assert load(fresh, operation_path("vision/train-2"))["configCommit"] == OLD_COMMIT


def test_the_phases_given_by_the_render_are_those_parsed_back() -> None:
    """``render_status(phases=...)`` fills ``summarize_cycle``'s memo with each operation
    file's run as rendered: the same as parsing the file back, workflow parents and rejected
    operations included; the commit message then parses nothing."""
    world = seed().reject("vision/train-5", "nope")
    for i in range(2):
        world.op(f"vision/sweep-{i}", queue="team-a").child_of("vision/sweep", i, concurrency=1)
    repo = world.repo(COMMIT)
    states = {
        "vision/train-1": state(repo, "vision/train-1", Phase.RUNNING),
        "vision/sweep-0": state(repo, "vision/sweep-0", Phase.SUCCEEDED),
    }
    phases: PhaseMemo = {}
    _, files = cycle(world, states, phases=phases)
    operations = {p for p in files if p.startswith("status/vision/")}
    assert len(operations) == 8 and set(phases) == {files[p] for p in operations}
    for path in operations:
        assert phases[files[path]] == status_module._run_of(path, files[path]), path
    assert phases[files[operation_path("vision/sweep")]] is None  # a workflow parent
    with mock.patch(
        "reconciler.core.reporting.status._run_of", wraps=status_module._run_of
    ) as parse:
        message = summarize_cycle({}, files, phases)
    assert message == summarize_cycle({}, files)
    assert parse.call_count == 0
    # the next write: the files that changed are known by their old content as well, so
    # the commit message of a dispatch parses nothing back either
    later = {
        **states,
        "vision/train-1": state(repo, "vision/train-1", Phase.SUCCEEDED),
        "vision/train-2": state(repo, "vision/train-2", Phase.RUNNING),
    }
    _, after = cycle(world, later, phases=phases)
    changed = [p for p in operations if after[p] != files[p]]
    assert len(changed) >= 2
    with mock.patch(
        "reconciler.core.reporting.status._run_of", wraps=status_module._run_of
    ) as parse:
        message = summarize_cycle(files, after, phases)
    assert message == summarize_cycle(files, after)
    assert "vision/train-1: Running -> Succeeded" in message
    assert parse.call_count == 0
    assert set(phases) <= set(after.values())  # the old contents forgotten
