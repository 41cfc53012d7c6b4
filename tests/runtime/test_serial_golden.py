"""Golden bytes of everything that crosses a file or HTTP boundary: the status branch files,
what reading them back tolerates, the /api/v1 JSON and the ``status``/``queues`` JSON.

The formats are contracts (old status branches are read back, scripts parse the JSON): a
change of serializer must not change one byte. The expected outputs are in
``tests/data/golden/``; after an intended format change regenerate them with

    UPDATE_GOLDEN=1 python -m pytest tests/runtime/test_serial_golden.py

and review the diff.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from support.paths import DATA, TEMPLATE
from support.worlds import dispatched_states as _dispatched_states

from reconciler.cli.queues_cmd import render_view
from reconciler.cli.status_cmd import render as render_status_cmd
from reconciler.core.compile import compile_repo
from reconciler.core.decision.schedule import with_ticks
from reconciler.core.observation.capacity import ClusterCapacity, NodeCapacity, Taint
from reconciler.core.observation.observe import ObservedReason, WorkloadState
from reconciler.core.plan import plan_repo
from reconciler.core.reporting.status import (
    CONFIG_FILE,
    CapacityStatus,
    ClusterStatus,
    ConfigStatus,
    OperationStatus,
    QueueStatus,
    StatusFileError,
    StatusReason,
    dump_yaml,
    flat_operation_path,
    operation_path,
    parse_status_file,
    read_status,
    render_status,
)
from reconciler.core.types import (
    CompiledRepo,
    ConfigError,
    Location,
    Phase,
    RejectedOperation,
    RejectReason,
    RepoSnapshot,
)
from reconciler.core.views.queue_view import (
    BlameLine,
    build_queues_view,
    queues_view_from_status,
)
from reconciler.runtime.cycle import CycleResult
from reconciler.runtime.estimates import EstimateWorker
from reconciler.runtime.web import WebApp

GOLDEN = DATA / "golden"
COMMIT = "c0ffee" * 6 + "abcd"
OLD_COMMIT = "01d" * 13 + "a"
BAD_COMMIT = "bad" * 13 + "b"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def check(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden {name}: run with UPDATE_GOLDEN=1"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"{name} changed"


def files_text(files: Mapping[str, bytes]) -> str:
    return "".join(f"=== {path}\n{data.decode()}" for path, data in sorted(files.items()))


def _at_now(repo: CompiledRepo) -> CompiledRepo:
    """``repo`` as a cycle at ``NOW`` decides over it: with the runs its schedules make
    (the template's nightly-embed: last night's)."""
    return with_ticks(repo, {}, NOW)


# --- a world with every kind of record ----------------------------------------------------


def _repo(template: RepoSnapshot) -> CompiledRepo:
    repo = _at_now(compile_repo(replace(template, version=COMMIT)))
    assert repo.valid, repo.errors
    rejected = (
        RejectedOperation(
            "vision/too-big",
            "projects/vision/operations/too-big.yaml",
            RejectReason.POLICY_VIOLATION,
            "run.container.resources.limits.nvidia.com/gpu 9 exceeds 4 (set by operation)",
            Location("projects/vision/operations/too-big.yaml", 12, 9),
        ),
        RejectedOperation(
            "language/root",
            "projects/language/operations/root.yaml",
            RejectReason.POLICY_VIOLATION,
            "runAsUser 0 is not allowed",
        ),
    )
    return replace(repo, rejected=rejected)


def _states(repo: CompiledRepo) -> dict[str, WorkloadState]:
    """The first plan carried out, then: one succeeded, one failed, one running another spec,
    a rejected op still running, and two ops removed from the repo but still observed."""
    states = _dispatched_states(repo, plan_repo(repo, [], NOW))
    ids = sorted(states)
    done, failed, drifted = ids[0], ids[1], ids[2]
    states[done] = replace(
        states[done],
        phase=Phase.SUCCEEDED,
        reason=ObservedReason.COMPLETED,
        finished_at="2026-01-01T01:00:00+00:00",
        outputs={"loss": 0.25, "metrics": {"acc": [0.9, 0.95]}, "note": "ünïcode"},
        outputs_path="s3://ml-results/language/a/language-a-g1/",
        config_commit=OLD_COMMIT,
        node="node-1",
    )
    states[failed] = replace(
        states[failed],
        phase=Phase.FAILED,
        reason=ObservedReason.BACKOFF_LIMIT_EXCEEDED,
        message="Job has reached the specified backoff limit\nsecond line",
        finished_at="2026-01-01T00:30:00+00:00",
    )
    states[drifted] = replace(
        states[drifted], phase=Phase.RUNNING, spec_hash="0123456789abcdef", node="node-2"
    )
    for op_id, phase in (("vision/too-big", Phase.RUNNING), ("vision/gone", Phase.RUNNING)):
        states[op_id] = WorkloadState(
            operation=op_id,
            generation=3,
            cluster="local",
            namespace="vision",
            name=op_id.replace("/", "-") + "-g3",
            uid="u",
            phase=phase,
            queue="team-a",
            spec_hash="feedfacefeedface",
            dispatched_at="2025-12-31T00:00:00+00:00",
            started_at="2025-12-31T00:00:05+00:00",
            pod=op_id.replace("/", "-") + "-g3-xyz",
        )
    states["vision/old"] = WorkloadState(
        operation="vision/old",
        generation=1,
        cluster="local",
        namespace="vision",
        name="vision-old-g1",
        uid="u",
        phase=Phase.SUCCEEDED,
        finished_at="2025-12-30T00:00:00+00:00",
        outputs={},
    )
    return states


CLUSTERS = (
    ClusterStatus(
        name="remote",
        reachable=False,
        error="listing Jobs: <HTTPSConnection object at 0x7f3a2b1c>: Connection refused",
    ),
    ClusterStatus(name="local", reachable=True),
    # every optional field: the backends it served and a fleet cluster's capacity
    ClusterStatus(
        name="gpu",
        reachable=True,
        backends=("pytorchjob",),
        capacity=CapacityStatus.of(
            ClusterCapacity(
                (
                    NodeCapacity(
                        "gpu-0",
                        {"gpu": "h100", "zone": "z1"},
                        (Taint("nvidia.com/gpu", "present", "NoSchedule"),),
                        {"cpu": Decimal(96), "nvidia.com/gpu": Decimal(8), "pods": Decimal(110)},
                        {"cpu": Decimal("2.5"), "nvidia.com/gpu": Decimal(4), "pods": Decimal(3)},
                    ),
                    NodeCapacity("gpu-1", allocatable={"cpu": Decimal(96)}),
                ),
                {"nvidia.com/gpu": Decimal(2)},
                not_ready=1,
                cordoned=2,
            )
        ),
    ),
)


def _files(template: RepoSnapshot) -> dict[str, bytes]:
    repo = _repo(template)
    states = _states(repo)
    plan = plan_repo(repo, [s.to_observed() for s in states.values()], NOW)
    queued = next(p.operation for p in plan.pending)
    return render_status(
        repo,
        plan,
        states,
        config_error=(ConfigError(Location("queues/x.yaml", 3, 7), "quota: expected a mapping"),),
        config_version=BAD_COMMIT,
        failed={
            plan.dispatch[0].operation: (StatusReason.NAMESPACE_FORBIDDEN, "may not create it"),
            queued: (StatusReason.DISPATCH_FAILED, "not planned: ignored"),
        },
        clusters=CLUSTERS,
    )


# --- status files -------------------------------------------------------------------------


def test_status_files_of_the_template_first_cycle(template: RepoSnapshot) -> None:
    repo = _at_now(compile_repo(replace(template, version=COMMIT)))
    files = render_status(repo, plan_repo(repo, [], NOW), {})
    check("status_template_first.txt", files_text(files))


def test_status_files_of_every_kind_of_record(template: RepoSnapshot) -> None:
    files = _files(template)
    check("status_template_world.txt", files_text(files))
    # every file reads back to the same bytes through the record types
    for path, data in files.items():
        parsed = parse_status_file(path, data)
        if isinstance(parsed, tuple):
            key = "clusters" if path.endswith("clusters.yaml") else "queues"
            back = dump_yaml({key: [r.to_dict() for r in parsed]})
        else:
            back = dump_yaml(parsed.to_dict())
        assert back == data, path


def test_status_files_with_the_prune_guard_holding(template: RepoSnapshot) -> None:
    repo = _repo(template)
    repo = replace(
        repo, org=replace(repo.org, prune=True, allow_mass_prune=False, max_prune_fraction=0.0)
    )
    states = _states(repo)
    plan = plan_repo(repo, [s.to_observed() for s in states.values()], NOW)
    files = render_status(repo, plan, states)
    check("status_template_prune_refused.txt", files_text(files))


def test_ledger_files(template: RepoSnapshot) -> None:
    """``status/ledger/<YYYY-MM>.yaml``: the runs the cycle saw finish (a Succeeded and a
    Failed one of the world, costed from their Jobs' times at the template's prices), an
    older month's entry, and a run with memory and no currency; every entry reads back to
    the same bytes."""
    from decimal import Decimal

    from reconciler.core.decision.cycle import finished_runs
    from reconciler.core.plan.ledger import (
        Ledger,
        LedgerEntry,
        LedgerFile,
        entries_from_document,
        is_ledger_path,
    )

    repo = _repo(template)
    states = _states(repo)
    older = LedgerEntry(
        operation="vision/explore",
        generation=3,
        workload="vision-explore-g3",
        queue="notebooks",
        cluster="local",
        phase="Stopped",
        requests={"cpu": Decimal("2"), "memory": Decimal(8 * 2**30)},
        start=datetime(2025, 12, 31, 23, 30, tzinfo=UTC),
        end=datetime(2025, 12, 31, 23, 59, 59, tzinfo=UTC),
        cost=Decimal("0.0583"),
    )
    ledger = Ledger.of([*finished_runs(repo, states.values(), Ledger(), NOW), older])
    assert len(ledger) >= 2
    files = {
        p: d
        for p, d in render_status(repo, plan_repo(repo, [], NOW), states, ledger=ledger).items()
        if is_ledger_path(p)
    }
    check("status_ledger.txt", files_text(files))
    for path, data in files.items():
        parsed = parse_status_file(path, data)
        assert isinstance(parsed, LedgerFile) and not parsed.worst and not parsed.unread
        entries = parsed.entries
        assert parsed == entries_from_document({"entries": [e.to_dict() for e in entries]})
        assert dump_yaml({"entries": [e.to_dict() for e in entries]}) == data, path


def test_config_status_of_an_internal_error_and_of_too_many_errors(
    template: RepoSnapshot,
) -> None:
    repo = _at_now(compile_repo(replace(template, version=COMMIT)))
    plan = plan_repo(repo, [], NOW)
    failing = render_status(
        repo,
        plan,
        {},
        config_version=BAD_COMMIT,
        internal_error="compiling presets/a100.yaml: <Node object at 0x7f00aa>: boom",
    )
    many = tuple(ConfigError(Location(f"q/{i:04}.yaml", i, 1), "bad") for i in range(1002))
    flood = render_status(repo, plan, {}, config_error=many, config_version=BAD_COMMIT)
    check(
        "status_config_internal_and_many.txt",
        files_text(
            {"internal/" + CONFIG_FILE: failing[CONFIG_FILE], CONFIG_FILE: flood[CONFIG_FILE]}
        ),
    )


def _full_operation() -> OperationStatus:
    return OperationStatus(
        operation="p/every-field",
        phase="Running",
        reason="WaitingForCapacity",
        message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        kind="job",
        path="projects/p/operations/every-field.yaml",
        queue="q",
        cluster="c",
        namespace="p",
        workload="p-every-field-g2",
        position=4,
        generation=2,
        config_commit=COMMIT,
        dispatched_at="2026-01-01T00:00:00Z",
        started_at="2026-01-01T00:00:05Z",
        finished_at="2026-01-01T01:00:00Z",
        outputs={"z": 1, "a": {"nested": [1, "two", None, True]}, "f": 0.5},
        spec_hash="0123456789abcdef",
        workload_spec_hash="fedcba9876543210",
        sync="OutOfSync",
        blocked_by={"queue": "q", "releasedBy": ["p/a", "p/b"], "used": "2"},
        workflow={"parent": "p/wf", "kind": "dag", "index": 3},
        children=("p/wf-a", "p/wf-b"),
        logs="reconciler logs p/every-field",
    )


def test_records_with_every_optional_field() -> None:
    full = _full_operation()
    minimal = OperationStatus(operation="p/minimal", phase="Queued")
    queues = (
        QueueStatus(
            name="q",
            cluster="c",
            priority=-5,
            concurrency=0,
            quota={"nvidia.com/gpu": "8", "memory": "512Gi"},
            active=3,
            used={"nvidia.com/gpu": "2500m"},
            pending=7,
            head_reason="QuotaExceeded",
            strategy="StrictFIFO",
            paused=True,
            kinds=("batch", "job"),
        ),
        QueueStatus(
            name="r",
            cluster="c",
            priority=0,
            concurrency=None,
            quota={},
            active=0,
            used={},
            pending=0,
        ),
    )
    configs = (
        ConfigStatus(version=BAD_COMMIT, applied=COMMIT, valid=False, errors=("a", "b")),
        ConfigStatus(version=COMMIT, applied=COMMIT, valid=True, warnings=("prune refused",)),
        ConfigStatus(version="", applied="", valid=True),
        ConfigStatus(
            version=BAD_COMMIT,
            applied=COMMIT,
            valid=False,
            reason="InternalError",
            internal_error="compiling queues/x.yaml: KeyError: 'quota'",
        ),
    )
    out = {
        "status/p/every-field.yaml": dump_yaml(full.to_dict()),
        "status/p/minimal.yaml": dump_yaml(minimal.to_dict()),
        "status/queues.yaml": dump_yaml({"queues": [q.to_dict() for q in queues]}),
        "status/clusters.yaml": dump_yaml({"clusters": [c.to_dict() for c in CLUSTERS]}),
    }
    for i, config in enumerate(configs):
        out[f"status/config-{i}.yaml"] = dump_yaml(config.to_dict())
    check("status_records.txt", files_text(out))
    assert parse_status_file("status/p/every-field.yaml", out["status/p/every-field.yaml"]) == full
    assert parse_status_file("status/p/minimal.yaml", out["status/p/minimal.yaml"]) == minimal
    assert parse_status_file("status/queues.yaml", out["status/queues.yaml"]) == queues
    assert parse_status_file("status/clusters.yaml", out["status/clusters.yaml"]) == CLUSTERS
    for i, config in enumerate(configs):
        assert parse_status_file("status/config.yaml", out[f"status/config-{i}.yaml"]) == config


# --- reading back: what old, partial and hand-edited files give ---------------------------

OPERATION_FIELDS = [
    "operation",
    "phase",
    "reason",
    "message",
    "kind",
    "path",
    "queue",
    "cluster",
    "namespace",
    "workload",
    "position",
    "generation",
    "config_commit",
    "dispatched_at",
    "started_at",
    "finished_at",
    "outputs",
    "outputs_path",
    "spec_hash",
    "workload_spec_hash",
    "sync",
    "blocked_by",
    "workflow",
    "children",
    "logs",
]
QUEUE_FIELDS = [
    "name",
    "cluster",
    "priority",
    "concurrency",
    "quota",
    "active",
    "used",
    "pending",
    "head_reason",
    "strategy",
    "paused",
    "kinds",
]
CONFIG_FIELDS = ["version", "applied", "valid", "errors", "warnings", "reason", "internal_error"]
CLUSTER_FIELDS = ["name", "reachable", "error"]

ODD_FILES: list[tuple[str, str]] = [
    ("status/p/minimal.yaml", "operation: p/minimal\nphase: Queued\n"),
    ("status/p/rejected.yaml", "operation: p/rejected\nphase: Rejected\nreason: PolicyViolation\n"),
    (
        "status/p/mistyped.yaml",
        "operation: p/mistyped\nphase: Running\nposition: '3'\ngeneration: true\n"
        "outputs: [1, 2]\nblockedBy: text\nworkflow: 7\nmessage: 42\nreason: 7\nkind: 1.5\n"
        "queue: null\nsync: ''\nlogs: null\nchildren: [a, 2, null]\nfuture: {a: 1}\n"
        "config_commit: snake\nspecHash: 123\noutputsPath: [s3]\n",
    ),
    ("status/p/numbers.yaml", "operation: 12\nphase: Succeeded\ngeneration: 3\nposition: 1.0\n"),
    ("status/p/empty-children.yaml", "operation: p/e\nphase: Stopped\nchildren: []\nsync: x\n"),
    ("status/p/string-children.yaml", "operation: p/s\nphase: Failed\nchildren: ab\n"),
    ("status/p/no-phase.yaml", "operation: p/no-phase\n"),
    ("status/p/no-operation.yaml", "phase: Running\n"),
    ("status/p/null-operation.yaml", "operation: null\nphase: Running\n"),
    ("status/p/int-children.yaml", "operation: p/i\nphase: Running\nchildren: 5\n"),
    ("status/p/list.yaml", "- 1\n"),
    ("status/p/broken.yaml", "operation: a/b\n  phase: [\n"),
    (
        "status/queues.yaml",
        "queues:\n- name: a\n- name: b\n  cluster: 3\n  priority: '7'\n  concurrency: '2'\n"
        "  quota: {gpu: 2, cpu: 500m}\n  active: 1.9\n  used: null\n  pending: true\n"
        "  headReason: 5\n  strategy: StrictFIFO\n  paused: 'no'\n  kinds: [job, 1]\n"
        "  extra: 1\n- name: c\n  headReason: null\n  concurrency: null\n  kinds: null\n",
    ),
    ("status/queues.yaml#empty", "queues: null\nother: 1\n"),
    ("status/queues.yaml#noname", "queues:\n- cluster: c\n"),
    ("status/queues.yaml#badint", "queues:\n- name: a\n  priority: high\n"),
    ("status/queues.yaml#listint", "queues:\n- name: a\n  active: [1]\n"),
    ("status/queues.yaml#quota", "queues:\n- name: a\n  quota: [a]\n"),
    (
        "status/config.yaml",
        "version: 5\napplied: abc\nvalid: 0\nerrors: [a, 1]\nwarnings: null\nextra: x\n",
    ),
    ("status/config.yaml#empty", "{}\n"),
    (
        "status/config.yaml#internal",
        "version: v\napplied: a\nvalid: false\nreason: InternalError\ninternalError: boom\n",
    ),
    ("status/config.yaml#internal-odd", "reason: 5\ninternalError: 0\n"),
    ("status/config.yaml#internal-null", "reason: null\ninternalError: null\n"),
    ("status/config.yaml#errors", "version: v\nerrors: 3\n"),
    (
        "status/clusters.yaml",
        "clusters:\n- name: a\n- name: 2\n  reachable: 0\n  error: 404\n- name: c\n  error: null\n",
    ),
    ("status/clusters.yaml#noname", "clusters:\n- reachable: false\n"),
    ("status/clusters.yaml#none", "clusters: []\n"),
]


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str):  # tagged, so that 3 and "3" differ (enums hold text)
        return f"str:{value}"
    return value


def _record(obj: Any) -> dict[str, Any]:
    if isinstance(obj, OperationStatus):
        names = OPERATION_FIELDS
    elif isinstance(obj, QueueStatus):
        names = QUEUE_FIELDS
    elif isinstance(obj, ConfigStatus):
        names = CONFIG_FIELDS
    else:
        assert isinstance(obj, ClusterStatus)
        names = CLUSTER_FIELDS
    return {name: _plain(getattr(obj, name)) for name in names}


def _read_back(path: str, text: str) -> Any:
    real = path.split("#")[0]
    try:
        parsed = parse_status_file(real, text.encode())
    except StatusFileError as err:
        return {"error": str(err)}
    if isinstance(parsed, tuple):
        return [_record(r) for r in parsed]
    return _record(parsed)


def test_reading_back_old_partial_and_hand_edited_files() -> None:
    """Unknown keys ignored, missing optional ones defaulted, scalars coerced to text where
    the record holds text, mistyped numbers and mappings dropped; what cannot be a record
    is a ``file:line:col: message`` problem."""
    got = {path: _read_back(path, text) for path, text in ODD_FILES}
    check("status_read_back.txt", json.dumps(got, indent=1, sort_keys=True) + "\n")
    view = read_status({p: t.encode() for p, t in ODD_FILES if "#" not in p})
    check(
        "status_read_back_view.txt",
        json.dumps(
            {
                "operations": sorted(view.operations),
                "problems": list(view.problems),
                "queues": [q.name for q in view.queues],
                "clusters": [c.name for c in view.clusters],
                "config": view.config.version if view.config else None,
            },
            indent=1,
        )
        + "\n",
    )


# --- the CLI's JSON -----------------------------------------------------------------------


def test_status_and_queues_command_output(template: RepoSnapshot) -> None:
    files = _files(template)
    view = read_status(files)
    parts = [
        "=== status -o json\n" + render_status_cmd(view, None, "json"),
        "=== status vision -o json\n" + render_status_cmd(view, "vision", "json"),
        "=== status vision/gone -o json\n" + render_status_cmd(view, "vision/gone", "json"),
        "=== status vision/gone\n" + render_status_cmd(view, "vision/gone", "table"),
        "=== status\n" + render_status_cmd(view, None, "table"),
        "=== queues -o json (status branch)\n" + render_view(queues_view_from_status(view), "json"),
        "=== queues -o wide (status branch)\n" + render_view(queues_view_from_status(view), "wide"),
    ]
    repo = _repo(template)
    states = _states(repo)
    plan = plan_repo(repo, [s.to_observed() for s in states.values()], NOW)
    live = build_queues_view(repo, plan, states, applied=False, source="live")
    parts.append("=== queues --live -o json\n" + render_view(live, "json"))
    check("cli_json.txt", "".join(parts))


# --- /api/v1 ------------------------------------------------------------------------------


def _inline(work: Callable[[], None]) -> None:
    """Run the estimate worker on the caller's thread: the golden files hold the estimates."""
    work()


def _app(template: RepoSnapshot, *, leading: bool) -> tuple[WebApp, CycleResult]:
    repo = _repo(template)
    states = _states(repo)
    plan = plan_repo(repo, [s.to_observed() for s in states.values()], NOW)
    result = CycleResult(
        at=NOW, version=repo.version, compiled=repo, plan=plan, states=states, leading=leading
    )
    history_files = _files(template)

    def blame(rev: str, path: str) -> list[BlameLine]:
        text = (TEMPLATE / path).read_text()
        return [
            BlameLine(
                i,
                f"{i:x}" * 40,
                "bob",
                datetime(2025, 6, i, 12, 30, tzinfo=UTC) if i % 2 else None,
                f"set line {i}" if i % 3 else "",
                line,
            )
            for i, line in enumerate(text.splitlines(), start=1)
        ]

    def status_history(path: str, flat: str) -> list[tuple[str, datetime, bytes]]:
        data = history_files.get(path)
        if data is None:
            return []
        queued = data.replace(b"phase: Running", b"phase: Queued").replace(
            b"phase: Succeeded", b"phase: Dispatched"
        )
        return [
            ("1" * 40, datetime(2025, 12, 31, 23, 0, 0, 123456, tzinfo=UTC), queued),
            ("2" * 40, datetime(2025, 12, 31, 23, 30, tzinfo=UTC), queued),
            ("3" * 40, datetime(2026, 1, 1, tzinfo=UTC), data),
            ("4" * 40, datetime(2026, 1, 1, 0, 1, tzinfo=UTC), b"not: [valid\n"),
        ]

    app = WebApp(
        lambda: result,
        blame=blame,
        status_history=status_history,
        estimator=EstimateWorker(spawn=_inline),
    )
    return app, result


def _get(app: WebApp, path: str) -> str:
    reply = app(path, "")
    assert reply is not None
    status, body, ctype = reply
    return f"=== GET {path} -> {status} {ctype}\n{body.decode()}"


@pytest.mark.parametrize("leading", [True, False], ids=["leader", "follower"])
def test_json_api(template: RepoSnapshot, leading: bool) -> None:
    app, result = _app(template, leading=leading)
    assert result.compiled is not None
    paths = ["/api/v1/queues", "/api/v1/fleet"]
    paths += [f"/api/v1/queues/{q}" for q in sorted(result.compiled.queues)]
    ops = {o.id for o in result.compiled.operations} | set(result.states)
    ops |= {"vision/sweep-lr", "vision/nightly-embed", "vision/too-big", "language/root"}
    paths += [f"/api/v1/operations/{op}" for op in sorted(ops)]
    paths += ["/api/v1/queues/nope", "/api/v1/operations/p/nope", "/api/v1/nothing"]
    suffix = "leader" if leading else "follower"
    check(f"api_v1_{suffix}.txt", "".join(_get(app, p) for p in paths))


def test_json_api_of_a_built_world() -> None:
    """Paused and quota-less queues, never-runs blockers (quota, failed upstream)."""
    from support.builders import World

    w = World().queue("gpu", quota={"nvidia.com/gpu": 1}).queue("off", paused=True)
    w.queue("free", strict=True)
    w.op("p/big", queue="gpu", gpu=2)
    w.op("p/small", queue="gpu", gpu=1)
    w.op("p/idle", queue="off")
    w.op("p/a", queue="free").child_of("p/dag", 0, kind="dag")
    w.op("p/b", queue="free").child_of("p/dag", 1, kind="dag").after("p/a")
    repo = w.repo(COMMIT)
    failed = WorkloadState(
        operation="p/a",
        generation=1,
        cluster="local",
        namespace="p",
        name="p-a-g1",
        uid="u",
        phase=Phase.FAILED,
        reason=ObservedReason.JOB_FAILED,
        queue="free",
    )
    states = {"p/a": failed}
    plan = plan_repo(repo, [s.to_observed() for s in states.values()], NOW)
    result = CycleResult(at=NOW, version=COMMIT, compiled=repo, plan=plan, states=states)
    app = WebApp(lambda: result, estimator=EstimateWorker(spawn=_inline))
    paths = ["/api/v1/queues", "/api/v1/fleet"]
    paths += [f"/api/v1/queues/{q}" for q in ("gpu", "off", "free")]
    paths += [f"/api/v1/operations/{op}" for op in ("p/big", "p/small", "p/idle", "p/b", "p/dag")]
    body = "".join(_get(app, p) for p in paths)
    assert '"neverRuns": true' in body
    files = render_status(repo, plan, states)
    check("api_v1_world.txt", body + files_text(files))


def test_json_api_before_the_first_cycle() -> None:
    app = WebApp(lambda: None)
    check("api_v1_not_ready.txt", _get(app, "/api/v1/queues"))


def test_status_record_paths() -> None:
    """A record's bucket is a hash of its name that no process or Python version changes:
    a branch written by one is read by another."""
    assert operation_path("a/b") == "status/a/7a5/b.yaml"
    assert operation_path("vision/train-resnet") == "status/vision/0c1/train-resnet.yaml"
    assert flat_operation_path("a/b") == "status/a/b.yaml"


def _native(value: Any) -> bool:
    """Only what ``json.loads`` gives: dicts, lists, text, numbers, booleans, null."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _native(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_native(v) for v in value)
    return value is None or type(value) in (str, int, float, bool)


def test_the_dumps_hold_what_json_loads_gives(template: RepoSnapshot) -> None:
    """``to_json`` gives only JSON's types (lists, not tuples) and ``to_dict`` equals its
    JSON, so a caller may compare either with the JSON it parsed."""
    from reconciler.core.views.queue_view import build_operation_detail, build_queue_detail

    repo = _repo(template)
    states = _states(repo)
    plan = plan_repo(repo, [s.to_observed() for s in states.values()], NOW)
    view = build_queues_view(repo, plan, states, applied=True)
    detail = build_queue_detail(repo, plan, states, "team-a", applied=True)
    op = build_operation_detail(repo, plan, states, sorted(states)[0], applied=True)
    assert detail is not None and op is not None
    for dumped in (view.to_json(), detail.to_json(), op.to_json()):
        assert _native(dumped) and dumped == json.loads(json.dumps(dumped))
    for path, data in _files(template).items():
        parsed = parse_status_file(path, data)
        for record in parsed if isinstance(parsed, tuple) else (parsed,):
            dumped = record.to_dict()
            assert dumped == json.loads(json.dumps(dumped)), path
