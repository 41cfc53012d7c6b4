"""run.replicas, run.distributed, queue maxPods/startTimeout and policy.maxReplicas:
the config model, preset merges, provenance and errors (issue 14)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from click.testing import CliRunner
from support.snapshots import repo

from reconciler.cli.main import cli
from reconciler.core.compile import compile_operation, compile_repo
from reconciler.core.types import (
    CompiledOperation,
    Distributed,
    DistributedBackend,
    Framework,
    RejectReason,
    RepoSnapshot,
)

BASE = {
    "reconciler.yaml": "kind: Org\ndefaults:\n  queue: gpu\n",
    "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
    "queues/gpu.yaml": "kind: Queue\ncluster: local\nquota:\n  nvidia.com/gpu: 8\n",
    "projects/p/project.yaml": "kind: Project\n",
}

RUN = (
    "run:\n  kind: job\n  container:\n    image: img\n    resources:\n      limits:\n"
    "        nvidia.com/gpu: 2\n        cpu: 1\n"
)


def make(files: dict[str, str]) -> RepoSnapshot:
    return repo({**BASE, **files})


def one(files: dict[str, str], name: str = "t") -> CompiledOperation:
    compiled = compile_repo(make(files))
    assert compiled.errors == (), [str(e) for e in compiled.errors]
    assert compiled.rejected == (), [r.message for r in compiled.rejected]
    (op,) = [o for o in compiled.operations if o.name == name]
    return op


def errors(files: dict[str, str]) -> list[str]:
    return [str(e) for e in compile_repo(make(files)).errors]


def test_single_pod_is_unchanged() -> None:
    op = one({"projects/p/operations/t.yaml": "kind: Operation\n" + RUN})
    assert op.replicas == 1 and op.distributed is None
    assert op.requests == op.pod_requests == {"cpu": Decimal(1), "nvidia.com/gpu": Decimal(2)}


def test_replicas_default_distributed_and_total_requests() -> None:
    op = one({"projects/p/operations/t.yaml": "kind: Operation\n" + RUN + "  replicas: 4\n"})
    assert op.replicas == 4 and op.pods == 4
    assert op.distributed == Distributed(Framework.TORCH, 29500, DistributedBackend.JOB)
    assert op.pod_requests == {"cpu": Decimal(1), "nvidia.com/gpu": Decimal(2)}
    assert op.requests == {"cpu": Decimal(4), "nvidia.com/gpu": Decimal(8)}


def test_distributed_alone_makes_a_one_replica_gang() -> None:
    body = RUN + "  distributed:\n    framework: jax\n    port: 1234\n"
    op = one({"projects/p/operations/t.yaml": "kind: Operation\n" + body})
    assert op.replicas == 1
    assert op.distributed == Distributed(Framework.JAX, 1234, DistributedBackend.JOB)


def test_distributed_is_frozen() -> None:
    d = Distributed()
    try:
        d.port = 1  # type: ignore[misc]
    except AttributeError:
        pass
    else:  # pragma: no cover
        raise AssertionError("Distributed must be frozen")


def test_preset_sets_replicas_and_merges_distributed_field_by_field() -> None:
    files = {
        "presets/gang.yaml": "kind: Preset\nrun:\n  replicas: 2\n  distributed:\n"
        "    framework: none\n    port: 4000\n",
        "projects/p/operations/t.yaml": "kind: Operation\npresets: [gang]\n"
        + RUN
        + "  distributed:\n    backend: pytorchjob\n    port: 5000\n",
    }
    op = one(files)
    assert op.replicas == 2
    # post_merge: the preset's port wins, the operation's backend stays, framework added
    assert op.distributed == Distributed(Framework.NONE, 4000, DistributedBackend.PYTORCHJOB)
    assert str(op.provenance["run.replicas"]).startswith("preset gang (post_merge)")
    assert op.provenance["run.distributed.backend"].step == "operation"


def test_preset_strategies_for_replicas() -> None:
    op_body = "kind: Operation\npresets: [gang]\n" + RUN + "  replicas: 3\n"
    for strategy, want in (("pre_merge", 3), ("isnull", 3), ("post_merge", 6), ("replace", 6)):
        files = {
            "presets/gang.yaml": f"kind: Preset\npatchStrategy: {strategy}\nrun:\n  replicas: 6\n",
            "projects/p/operations/t.yaml": op_body,
        }
        assert one(files).replicas == want, strategy


def test_replicas_zero_is_an_error_at_its_line() -> None:
    body = "kind: Operation\n" + RUN + "  replicas: 0\n"
    (err,) = errors({"projects/p/operations/t.yaml": body})
    assert err.startswith("projects/p/operations/t.yaml:10:13: run.replicas:")
    assert "greater than or equal to 1" in err


def test_replicas_must_be_an_int() -> None:
    body = "kind: Operation\n" + RUN + "  replicas: '2'\n"
    (err,) = errors({"projects/p/operations/t.yaml": body})
    assert err.startswith("projects/p/operations/t.yaml:10:13: run.replicas:")


def test_unknown_framework_says_did_you_mean() -> None:
    body = "kind: Operation\n" + RUN + "  distributed:\n    framework: pytorch\n"
    (err,) = errors({"projects/p/operations/t.yaml": body})
    assert err.startswith("projects/p/operations/t.yaml:11:16: run.distributed.framework:")
    assert "(did you mean 'torch'?)" in err


def test_unknown_distributed_field_says_did_you_mean() -> None:
    body = "kind: Operation\n" + RUN + "  distributed:\n    frameworks: torch\n"
    (err,) = errors({"projects/p/operations/t.yaml": body})
    assert "unknown field 'frameworks' (did you mean 'framework'?)" in err
    assert err.startswith("projects/p/operations/t.yaml:11:5:")


def test_bad_port_and_backend() -> None:
    body = "kind: Operation\n" + RUN + "  distributed:\n    port: 70000\n    backend: mpi\n"
    errs = errors({"projects/p/operations/t.yaml": body})
    assert any(
        e.startswith("projects/p/operations/t.yaml:11:11: run.distributed.port:") for e in errs
    )
    assert any("run.distributed.backend:" in e and "'job' or 'pytorchjob'" in e for e in errs)


def test_bad_preset_replicas_reported_at_the_preset() -> None:
    files = {
        "presets/gang.yaml": "kind: Preset\nrun:\n  replicas: -1\n",
        "projects/p/operations/t.yaml": "kind: Operation\npresets: [gang]\n" + RUN,
    }
    errs = errors(files)
    assert any(e.startswith("presets/gang.yaml:3:13: run.replicas:") for e in errs), errs


def test_notebook_cannot_have_replicas_reported_where_set() -> None:
    files = {
        "presets/gang.yaml": "kind: Preset\nrun:\n  replicas: 2\n",
        "projects/p/operations/t.yaml": "kind: Operation\npresets: [gang]\n"
        + RUN.replace("kind: job", "kind: notebook"),
    }
    (err,) = errors(files)
    assert err.startswith("presets/gang.yaml:3:13: run.replicas: a notebook runs one pod")


def test_queue_max_pods_and_start_timeout() -> None:
    files = {
        "queues/gpu.yaml": "kind: Queue\ncluster: local\nmaxPods: 6\nstartTimeout: 10m\n",
        "projects/p/operations/t.yaml": "kind: Operation\n" + RUN,
    }
    compiled = compile_repo(make(files))
    assert compiled.errors == ()
    q = compiled.queues["gpu"]
    assert q.max_pods == 6 and q.start_timeout == 600
    default = compile_repo(make({"projects/p/operations/t.yaml": "kind: Operation\n" + RUN}))
    assert default.queues["gpu"].max_pods is None
    assert default.queues["gpu"].start_timeout is None


def test_queue_bad_start_timeout_and_max_pods() -> None:
    files = {"queues/gpu.yaml": "kind: Queue\ncluster: local\nmaxPods: -1\nstartTimeout: 10x\n"}
    errs = errors(files)
    assert any(e.startswith("queues/gpu.yaml:3:10: maxPods:") for e in errs), errs
    assert any(
        e.startswith("queues/gpu.yaml:4:15: startTimeout:") and "is not a duration" in e
        for e in errs
    ), errs


def test_policy_max_replicas_and_max_resources_over_all_replicas() -> None:
    org = (
        "kind: Org\ndefaults:\n  queue: gpu\npolicy:\n  maxReplicas: 2\n  maxResources:\n"
        "    nvidia.com/gpu: 4\n"
    )
    files = {
        "reconciler.yaml": org,
        "presets/gang.yaml": "kind: Preset\nrun:\n  replicas: 3\n",
        "projects/p/operations/t.yaml": "kind: Operation\npresets: [gang]\n" + RUN,
        "projects/p/operations/ok.yaml": "kind: Operation\n" + RUN + "  replicas: 2\n",
    }
    compiled = compile_repo(make(files))
    assert compiled.errors == ()
    assert [o.name for o in compiled.operations] == ["ok"]
    (rej,) = compiled.rejected
    assert rej.reason is RejectReason.POLICY_VIOLATION
    assert "run.replicas: 3 replicas exceed policy.maxReplicas 2" in rej.message
    assert "preset gang (post_merge) at presets/gang.yaml:3" in rej.message
    assert "nvidia.com/gpu 6 (3 replicas \u00d7 2) exceeds policy.maxResources 4" in rej.message


def test_matrix_and_dag_children_can_be_distributed() -> None:
    body = "kind: Operation\n" + RUN + "  replicas: 2\nmatrix:\n  params:\n    lr: [1, 2]\n"
    compiled = compile_repo(make({"projects/p/operations/t.yaml": body}))
    assert compiled.errors == ()
    assert [(o.name, o.replicas) for o in compiled.operations] == [("t-0", 2), ("t-1", 2)]
    dag = (
        "kind: Operation\n"
        + RUN
        + "dag:\n  operations:\n  - name: a\n  - name: b\n    dependencies: [a]\n"
        "    run:\n      replicas: 4\n"
    )
    compiled = compile_repo(make({"projects/p/operations/d.yaml": dag}))
    assert compiled.errors == ()
    by_name = {o.name: o for o in compiled.operations}
    assert [(n, o.replicas) for n, o in sorted(by_name.items())] == [("d-a", 1), ("d-b", 4)]
    assert by_name["d-b"].requests["nvidia.com/gpu"] == Decimal(8)


def test_compile_operation_exposes_replicas() -> None:
    snap = make({"projects/p/operations/t.yaml": "kind: Operation\n" + RUN + "  replicas: 2\n"})
    result = compile_operation(snap, "p/t")
    assert result.compiled is not None and result.compiled.replicas == 2


def _write(root: Path, files: dict[str, str]) -> None:
    for name, body in {**BASE, **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def test_compile_explain_shows_where_replicas_came_from(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "presets/gang.yaml": "kind: Preset\nrun:\n  replicas: 4\n",
            "projects/p/operations/t.yaml": "kind: Operation\npresets: [gang]\n" + RUN,
            "projects/p/operations/single.yaml": "kind: Operation\n" + RUN,
        },
    )
    code, out = _cli("compile", "p/t", "--repo", str(tmp_path), "-o", "json", "--explain")
    assert code == 0, out
    obj = json.loads(out)
    assert obj["replicas"] == 4
    assert obj["requests"] == {"cpu": "4", "nvidia.com/gpu": "8"}
    assert obj["podRequests"] == {"cpu": "1", "nvidia.com/gpu": "2"}
    assert obj["distributed"] == {"framework": "torch", "port": 29500, "backend": "job"}
    assert obj["provenance"]["run.replicas"] == {
        "file": "presets/gang.yaml",
        "line": 3,
        "step": "preset gang (post_merge)",
    }
    code, out = _cli("compile", "p/single", "--repo", str(tmp_path), "-o", "json", "--explain")
    obj = json.loads(out)
    assert code == 0 and obj["replicas"] == 1 and "distributed" not in obj
    assert obj["provenance"]["run.replicas"] == {"step": "default (1)"}
    code, out = _cli("compile", "p/t", "--repo", str(tmp_path), "-o", "table")
    assert code == 0
    assert "run.replicas" in out and "preset gang (post_merge)  presets/gang.yaml:3" in out
    assert "(4 replicas)" in out
