"""Outputs: ``run.outputs`` (and ``defaults.outputs``) give each run its own path under a
bucket or a volume, in ``RECONCILER_OUTPUTS`` and on its status record; a run's JSON result
is read as bounded named outputs, and a workflow's children sort by any of them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import pytest
from support.snapshots import repo

from reconciler.cli.status_cmd import status_to_table
from reconciler.core.compile import CompileCache, compile_repo
from reconciler.core.decision.render import (
    ANNOTATION_OUTPUTS,
    ENV_OUTPUTS,
    outputs_path,
    render_operation,
    spec_hash,
)
from reconciler.core.observation.observe import WorkloadState, observe_workloads
from reconciler.core.observation.outputs import (
    MAX_COLUMNS,
    MAX_NAME_CHARS,
    MAX_NAMED,
    MAX_TEXT_CHARS,
    named_outputs,
    output_names,
    outputs_line,
    sort_problem,
    sort_rows,
)
from reconciler.core.reporting.status import OperationStatus, StatusView
from reconciler.core.types import CompiledRepo

NOW = datetime(2026, 1, 1, tzinfo=UTC)

BASE = {
    "reconciler.yaml": "kind: Org\ndefaults:\n  queue: q\n",
    "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
    "queues/q.yaml": "kind: Queue\ncluster: local\n",
    "connections/results.yaml": (
        "kind: Connection\nbucket:\n  url: s3://ml-results/runs/\n  urlEnv: RESULTS_URL\n"
        "  secret: s3-creds\n"
    ),
    "connections/scratch.yaml": (
        "kind: Connection\nvolume:\n  claimName: scratch\n  mountPath: /scratch\n"
    ),
    "connections/datasets.yaml": (
        "kind: Connection\nvolume:\n  claimName: data\n  mountPath: /data\n  readOnly: true\n"
    ),
    "connections/token.yaml": "kind: Connection\nsecret:\n  name: token\n  envFrom: true\n",
    "connections/data-bucket.yaml": "kind: Connection\nbucket:\n  url: s3://data/\n",
    "connections/other-bucket.yaml": "kind: Connection\nbucket:\n  url: gs://other/\n",
    "projects/p/project.yaml": "kind: Project\n",
}


def op_yaml(run_extra: str = "", top: str = "") -> str:
    return (
        f"kind: Operation\n{top}run:\n  kind: job\n  container:\n    image: busybox\n"
        f"    command: [go]\n{run_extra}"
    )


def compiled(files: dict[str, str]) -> CompiledRepo:
    return compile_repo(repo({**BASE, **files}))


def main_env(job: Any) -> dict[str, str]:
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    return {e["name"]: e.get("value", "") for e in env}


def rendered(result: CompiledRepo, op_id: str) -> Any:
    op = next(o for o in result.operations if o.id == op_id)
    return render_operation(op, result.connections, config_version="c", dispatched_at=NOW).job


def errors_of(files: dict[str, str]) -> list[str]:
    return [str(e) for e in compiled(files).errors]


def test_bucket_outputs_give_each_run_its_own_path_in_env_and_annotation() -> None:
    result = compiled({"projects/p/operations/train.yaml": op_yaml("  outputs: results\n")})
    assert result.errors == ()
    (op,) = result.operations
    assert op.connections == ("results",)  # its credentials and URL come with it
    job = rendered(result, "p/train")
    env = main_env(job)
    assert env[ENV_OUTPUTS] == "s3://ml-results/runs/p/train/p-train-g1/"
    assert env["RESULTS_URL"] == "s3://ml-results/runs/"
    assert job["metadata"]["annotations"][ANNOTATION_OUTPUTS] == env[ENV_OUTPUTS]
    main = job["spec"]["template"]["spec"]["containers"][0]
    assert main["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]


def test_a_new_generation_writes_to_a_new_path() -> None:
    files = {"projects/p/operations/train.yaml": op_yaml("  outputs: results\n", "generation: 2\n")}
    env = main_env(rendered(compiled(files), "p/train"))
    assert env[ENV_OUTPUTS] == "s3://ml-results/runs/p/train/p-train-g2/"


def test_volume_outputs_are_mounted_and_the_path_is_under_the_mount() -> None:
    result = compiled({"projects/p/operations/train.yaml": op_yaml("  outputs: scratch\n")})
    assert result.errors == ()
    job = rendered(result, "p/train")
    assert main_env(job)[ENV_OUTPUTS] == "/scratch/p/train/p-train-g1/"
    mounts = job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "conn-scratch", "mountPath": "/scratch", "readOnly": False} in mounts


def test_listed_connection_is_not_added_twice() -> None:
    body = op_yaml("  connections: [results]\n  outputs: results\n")
    result = compiled({"projects/p/operations/train.yaml": body})
    assert result.errors == ()
    assert result.operations[0].connections == ("results",)


def test_project_default_then_org_default_and_the_operation_wins() -> None:
    files = {
        "reconciler.yaml": "kind: Org\ndefaults:\n  queue: q\n  outputs: scratch\n",
        "projects/p/project.yaml": "kind: Project\ndefaults:\n  outputs: results\n",
        "projects/o/project.yaml": "kind: Project\n",
        "projects/p/operations/a.yaml": op_yaml(),
        "projects/p/operations/b.yaml": op_yaml("  outputs: scratch\n"),
        "projects/o/operations/c.yaml": op_yaml(),
    }
    result = compiled(files)
    assert result.errors == ()
    ops = {o.id: o for o in result.operations}
    assert ops["p/a"].spec["run"]["outputs"] == "results"
    assert ops["p/a"].provenance["run.outputs"].step == "project default"
    assert ops["p/a"].provenance["run.outputs"].file == "projects/p/project.yaml"
    assert ops["p/b"].spec["run"]["outputs"] == "scratch"
    assert ops["p/b"].provenance["run.outputs"].step == "operation"
    assert ops["o/c"].spec["run"]["outputs"] == "scratch"
    assert ops["o/c"].provenance["run.outputs"].step == "org default"


def test_a_preset_may_set_outputs() -> None:
    files = {
        "presets/keep.yaml": "kind: Preset\nrun:\n  outputs: results\n",
        "projects/p/operations/a.yaml": op_yaml("", "presets: [keep]\n"),
    }
    result = compiled(files)
    assert result.errors == ()
    assert main_env(rendered(result, "p/a"))[ENV_OUTPUTS].endswith("/p/a/p-a-g1/")


def test_each_matrix_child_gets_its_own_path() -> None:
    body = op_yaml(
        "  outputs: results\n",
        "matrix:\n  kind: grid\n  params:\n    lr: [0.1, 0.01]\n",
    )
    result = compiled({"projects/p/operations/sweep.yaml": body})
    assert result.errors == ()
    paths = {o.id: outputs_path(o, result.connections) for o in result.operations if o.workflow}
    assert len(paths) == 2 and len(set(paths.values())) == 2
    for op_id, path in paths.items():
        name = op_id.split("/")[1]
        assert path == f"s3://ml-results/runs/p/{name}/p-{name}-g1/"


def test_operations_without_outputs_render_and_hash_as_before() -> None:
    plain = {"projects/p/operations/a.yaml": op_yaml()}
    before = compiled(plain)
    # another project taking a default changes nothing of this operation
    after = compiled(
        {
            **plain,
            "projects/o/project.yaml": "kind: Project\ndefaults:\n  outputs: results\n",
            "projects/o/operations/b.yaml": op_yaml(),
        }
    )
    op_before = next(o for o in before.operations if o.id == "p/a")
    op_after = next(o for o in after.operations if o.id == "p/a")
    assert spec_hash(op_before, before.connections) == spec_hash(op_after, after.connections)
    job = rendered(after, "p/a")
    assert ENV_OUTPUTS not in main_env(job)
    assert ANNOTATION_OUTPUTS not in job["metadata"]["annotations"]
    assert "outputs" not in op_after.spec["run"]


@pytest.mark.parametrize(
    ("files", "said"),
    [
        (
            {"projects/p/operations/a.yaml": op_yaml("  outputs: reslts\n")},
            "projects/p/operations/a.yaml:7:12: unknown outputs connection 'reslts': no "
            "connections/reslts.yaml (did you mean 'results'?)",
        ),
        (
            {"projects/p/operations/a.yaml": op_yaml("  outputs: token\n")},
            "projects/p/operations/a.yaml:7:12: outputs connection 'token' is a secret "
            "connection: outputs go to a bucket or a volume",
        ),
        (
            {"projects/p/operations/a.yaml": op_yaml("  outputs: datasets\n")},
            "projects/p/operations/a.yaml:7:12: outputs connection 'datasets' is mounted "
            "readOnly: runs could not write to it",
        ),
        (
            {"projects/p/project.yaml": "kind: Project\ndefaults:\n  outputs: token\n"},
            "projects/p/project.yaml:3:12: outputs connection 'token' is a secret connection",
        ),
        (
            {"reconciler.yaml": "kind: Org\ndefaults:\n  queue: q\n  outputs: nope\n"},
            "reconciler.yaml:4:12: unknown outputs connection 'nope'",
        ),
        (
            {"presets/keep.yaml": "kind: Preset\nrun:\n  outputs: datasets\n"},
            "presets/keep.yaml:3:12: outputs connection 'datasets' is mounted readOnly",
        ),
        (
            # both buckets set BUCKET_URL: the clash is at run.outputs
            {
                "projects/p/operations/a.yaml": op_yaml(
                    "  connections: [data-bucket]\n  outputs: other-bucket\n"
                )
            },
            "projects/p/operations/a.yaml:8:12: environment variable 'BUCKET_URL' is set "
            "twice in the container: by connection 'data-bucket' and by connection "
            "'other-bucket'",
        ),
    ],
)
def test_bad_outputs_are_errors_at_their_line(files: dict[str, str], said: str) -> None:
    errors = errors_of(files)
    assert any(e.startswith(said) for e in errors), errors


def test_outputs_must_be_a_name() -> None:
    errors = errors_of({"projects/p/operations/a.yaml": op_yaml("  outputs: [results]\n")})
    assert any(e.startswith("projects/p/operations/a.yaml:7:12:") for e in errors), errors


# --- observed, recorded ----------------------------------------------------------------


def _state(annotations: dict[str, str], message: str | None) -> WorkloadState:
    job = {
        "metadata": {
            "name": "p-train-g1",
            "namespace": "p",
            "uid": "u1",
            "annotations": {
                "reconciler.dev/operation-id": "p/train",
                "reconciler.dev/generation": "1",
                **annotations,
            },
        },
        "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]},
    }
    terminated = {"exitCode": 0, **({"message": message} if message is not None else {})}
    pod = {
        "metadata": {
            "name": "p-train-g1-abc",
            "namespace": "p",
            "labels": {"job-name": "p-train-g1"},
        },
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [{"state": {"terminated": terminated}}],
        },
    }
    (state,) = observe_workloads("local", [job], [pod])
    return state


def test_observed_path_and_named_outputs_reach_the_status_record() -> None:
    path = "s3://ml-results/runs/p/train/p-train-g1/"
    state = _state({ANNOTATION_OUTPUTS: path}, '{"accuracy": 0.93, "curve": [1, 2]}')
    assert state.outputs_path == path
    record = OperationStatus.from_dict(
        {
            "operation": "p/train",
            "phase": "Succeeded",
            "outputs": dict(state.outputs or {}),
            "outputsPath": state.outputs_path,
        }
    )
    again = OperationStatus.from_dict(record.to_dict())
    assert again.outputs_path == path
    assert again.named_outputs == {"accuracy": 0.93}


def test_text_that_is_not_json_is_shown_as_text() -> None:
    state = _state({}, "done: 93% <b>")
    assert state.outputs_path is None
    assert named_outputs(state.outputs) == {"message": "done: 93% <b>"}


# --- named outputs, bounded ------------------------------------------------------------


def test_named_outputs_are_bounded() -> None:
    many = {f"m{i:03}": i for i in range(MAX_NAMED + 10)}
    assert len(named_outputs(many)) == MAX_NAMED
    long_name = "n" * (MAX_NAME_CHARS + 1)
    text = "x" * (MAX_TEXT_CHARS + 50)
    named = named_outputs({long_name: 1, "text": text, "ok": True, "nested": {"a": 1}})
    assert long_name not in named and "nested" not in named and named["ok"] is True
    assert len(str(named["text"])) == MAX_TEXT_CHARS and str(named["text"]).endswith("…")
    assert named_outputs(None) == {} and named_outputs({"": 1}) == {}
    assert outputs_line({"a": 1, "b": False, "c": "x\ny"}) == "a=1 b=false c=x y"


@dataclass(frozen=True)
class Row:
    operation: str
    outputs: dict[str, Any]


ROWS = [
    Row("p/s-0", {"accuracy": 0.5, "loss": 0.9}),
    Row("p/s-1", {"loss": 0.2}),
    Row("p/s-2", {"accuracy": 0.93, "loss": 0.4}),
    Row("p/s-3", {"accuracy": 0.7}),
]


def test_rows_sort_by_any_output_and_those_without_it_come_last() -> None:
    ids = [r.operation[-1] for r in sort_rows(ROWS, "accuracy", "desc")]
    assert ids == ["2", "3", "0", "1"]
    assert [r.operation[-1] for r in sort_rows(ROWS, "accuracy", "asc")] == ["0", "3", "2", "1"]
    assert [r.operation[-1] for r in sort_rows(ROWS, "loss", None)] == ["1", "2", "0", "3"]
    assert sort_rows(ROWS, None, None) == ROWS
    mixed = [Row("a", {"v": "text"}), Row("b", {"v": True}), Row("c", {"v": 2})]
    assert [r.operation for r in sort_rows(mixed, "v", "asc")] == ["c", "b", "a"]


def test_the_comparison_table_is_as_wide_as_one_run_whatever_its_children_name() -> None:
    """Children that each name their outputs differently must not make a page of
    thousands of columns: the names the most runs have are the columns."""
    rows = [Row(f"p/s-{i}", {f"c{i}-{k}": k for k in range(MAX_NAMED)}) for i in range(1000)]
    rows += [Row(f"p/t-{i}", {"accuracy": i / 10}) for i in range(3)]
    names = output_names(rows)
    assert len(names) == MAX_COLUMNS and "accuracy" in names
    # a name past the columns still sorts
    assert sort_problem(rows, "c999-0", "asc") is None
    assert sort_rows(rows, "c999-0", "asc")[0].operation == "p/s-999"


def test_unknown_sort_keys_and_orders_are_named() -> None:
    assert sort_problem(ROWS, "accuracy", "desc") is None
    assert sort_problem(ROWS, "acuracy", None) == (
        "sort='acuracy': no run has an output of that name (did you mean 'accuracy'?)"
    )
    assert sort_problem(ROWS, "zzz", None) == (
        "sort='zzz': no run has an output of that name (outputs: accuracy, loss)"
    )
    assert sort_problem(ROWS, "loss", "down") == "order='down': use asc or desc"
    assert sort_problem(ROWS, None, "asc") == "order needs sort=<an output's name>"
    assert sort_problem([], "loss", None) == (
        "sort='loss': no run of this workflow has named outputs yet"
    )


def test_an_incremental_compile_sees_the_outputs_connection_change() -> None:
    """The operation read the connection and the defaults: a commit that changes either
    recompiles it, exactly as a full compile would."""
    cache = CompileCache()
    base = {**BASE, "projects/p/operations/a.yaml": op_yaml("  outputs: scratch\n")}
    commits = [
        {},
        {"connections/scratch.yaml": BASE["connections/datasets.yaml"]},  # readOnly now
        {"connections/scratch.yaml": None},  # gone
        {"connections/scratch.yaml": BASE["connections/scratch.yaml"]},  # back
        {"projects/p/operations/a.yaml": op_yaml()},
        {"projects/p/project.yaml": "kind: Project\ndefaults:\n  outputs: results\n"},
        {"reconciler.yaml": "kind: Org\ndefaults:\n  queue: q\n  outputs: scratch\n"},
        {"projects/p/project.yaml": "kind: Project\n"},
    ]
    files: dict[str, str | None] = dict(base)
    seen = []
    for i, change in enumerate(commits):
        files.update(change)
        snap = replace(repo(files), version=f"c{i}")
        got = compile_repo(snap, cache=cache)
        assert got == compile_repo(snap), change
        seen.append("error" if got.errors else (got.operations[0].spec["run"].get("outputs") or ""))
    assert seen == ["scratch", "error", "error", "scratch", "", "results", "results", "scratch"]


def test_a_host_path_outputs_volume_needs_the_policy_and_is_named_at_run_outputs() -> None:
    files = {
        "connections/host.yaml": "kind: Connection\nvolume:\n  hostPath: /mnt\n  mountPath: /out\n",
        "projects/p/operations/a.yaml": op_yaml("  outputs: host\n"),
    }
    result = compiled(files)
    assert result.errors == () and result.operations == ()
    (rejected,) = result.rejected
    assert rejected.message == (
        "run.outputs: connection 'host' mounts hostPath '/mnt', which policy does not allow "
        "(set by operation at projects/p/operations/a.yaml:7)"
    ), rejected.message
    allowed = compiled(
        {**files, "reconciler.yaml": BASE["reconciler.yaml"] + "policy:\n  allowHostPath: true\n"}
    )
    assert allowed.errors == () and [o.id for o in allowed.operations] == ["p/a"]


def test_the_status_table_has_an_outputs_column_only_when_a_run_left_one() -> None:
    def record(op: str, **kw: Any) -> OperationStatus:
        return OperationStatus.from_dict({"operation": op, "phase": "Succeeded", **kw})

    plain = [record("p/a"), record("p/b", outputs={"curve": [1, 2]})]
    assert "OUTPUTS" not in status_to_table(StatusView(operations={}), plain, queues=False)
    ran = [
        record("p/a"),
        record("p/b", outputs={"accuracy": 0.93, "loss": 0.1, "ok": True}),
        record("p/c", outputs={"text": "x" * 100, "bad\x1b": 1}),
    ]
    lines = status_to_table(StatusView(operations={}), ran, queues=False).splitlines()
    assert lines[0].split()[-1] == "OUTPUTS"
    assert lines[2].endswith("accuracy=0.93 loss=0.1 ok=true")
    assert lines[3].endswith("…") and "\x1b" not in lines[3] and "bad\\x1b=1" in lines[3]


@pytest.mark.parametrize("backend", ["job", "pytorchjob"])
def test_every_replica_of_a_distributed_run_gets_the_runs_path(backend: str) -> None:
    body = op_yaml(f"  outputs: results\n  replicas: 2\n  distributed: {{backend: {backend}}}\n")
    result = compiled({"projects/p/operations/d.yaml": body})
    assert result.errors == ()
    (op,) = result.operations
    workload = render_operation(op, result.connections, config_version="c", dispatched_at=NOW).job
    path = "s3://ml-results/runs/p/d/p-d-g1/"
    assert workload["metadata"]["annotations"][ANNOTATION_OUTPUTS] == path
    templates = (
        [s["template"] for s in workload["spec"]["pytorchReplicaSpecs"].values()]
        if backend == "pytorchjob"
        else [workload["spec"]["template"]]
    )
    for template in templates:
        env = template["spec"]["containers"][0]["env"]
        assert {"name": ENV_OUTPUTS, "value": path} in env
