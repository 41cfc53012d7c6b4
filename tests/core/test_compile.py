"""compile_repo / compile_operation: order, shadowing, provenance, policy, workflows."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal

from support.snapshots import overlay, repo

from reconciler.core.compile import compile_operation, compile_repo
from reconciler.core.types import RejectReason, RepoFile, RepoSnapshot

BASE = {
    "reconciler.yaml": """kind: Org
defaults:
  queue: fallback
policy:
  maxResources:
    nvidia.com/gpu: 4
  allowedSchedulerNames: [default-scheduler]
""",
    "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
    "queues/gpu.yaml": "kind: Queue\ncluster: local\npriority: 10\nquota:\n  nvidia.com/gpu: 2\n",
    "queues/fallback.yaml": "kind: Queue\ncluster: local\n",
    "queues/other.yaml": "kind: Queue\ncluster: local\n",
    "queues/nb.yaml": "kind: Queue\ncluster: local\nkinds: [notebook]\n",
    "connections/data.yaml": "kind: Connection\nvolume:\n  claimName: data\n  mountPath: /data\n",
    "connections/host.yaml": "kind: Connection\nvolume:\n  hostPath: /mnt\n  mountPath: /mnt\n",
    "projects/p/project.yaml": """kind: Project
namespace: team-p
allowedQueues: [gpu, fallback, nb]
defaults:
  queue: gpu
  presets: [first]
""",
    "projects/p/presets/first.yaml": """kind: Preset
patchStrategy: post_merge
run:
  kind: job
  container:
    image: first
    env: {A: first}
""",
    "presets/second.yaml": """kind: Preset
run:
  container:
    image: second
    env: {B: second}
""",
}


def make(**files: str) -> RepoSnapshot:
    merged = dict(BASE)
    merged.update({k.replace("__", "/").replace("_yaml", ".yaml"): v for k, v in files.items()})
    return repo(merged)


def op_file(body: str = "", presets: str = "[]") -> str:
    return f"kind: Operation\npresets: {presets}\nrun:\n  container:\n    command: [go]\n{body}"


def test_order_defaults_then_operation_presets() -> None:
    snap = repo({**BASE, "projects/p/operations/t.yaml": op_file(presets="[second]")})
    result = compile_repo(snap)
    assert result.errors == ()
    (op,) = result.operations
    assert op.presets == ("first", "second")
    # post_merge: the later preset wins the scalar; env maps are unioned.
    assert op.spec["run"]["container"]["image"] == "second"
    assert op.spec["run"]["container"]["env"] == {"A": "first", "B": "second"}
    assert op.provenance["run.container.image"].step == "preset second (post_merge)"
    assert op.provenance["run.container.env.A"].file == "projects/p/presets/first.yaml"
    assert op.provenance["run.container.command[0]"].step == "operation"
    assert op.namespace == "team-p" and op.queue == "gpu" and op.cluster == "local"


def test_project_preset_shadows_org_preset() -> None:
    snap = repo(
        {
            **BASE,
            "projects/p/presets/second.yaml": "kind: Preset\nrun:\n  container:\n    image: mine\n",
            "projects/p/operations/t.yaml": op_file(presets="[second]"),
        }
    )
    (op,) = compile_repo(snap).operations
    assert op.spec["run"]["container"]["image"] == "mine"
    assert op.provenance["run.container.image"].file == "projects/p/presets/second.yaml"


def test_queue_defaults_provenance() -> None:
    snap = repo({**BASE, "projects/p/operations/t.yaml": op_file()})
    (op,) = compile_repo(snap).operations
    assert op.provenance["queue"].step == "project default"
    assert op.provenance["queue"].file == "projects/p/project.yaml"
    project = BASE["projects/p/project.yaml"].replace("  queue: gpu\n", "")
    snap = repo(
        {**BASE, "projects/p/project.yaml": project, "projects/p/operations/t.yaml": op_file()}
    )
    (op,) = compile_repo(snap).operations
    assert op.queue == "fallback"
    assert op.provenance["queue"].step == "org default"
    assert op.provenance["queue"].line == 3


def test_operation_queue_wins_over_defaults() -> None:
    snap = repo({**BASE, "projects/p/operations/t.yaml": "queue: other\n" + op_file()})
    compiled = compile_repo(snap)
    # other is not in allowedQueues: rejected, naming the field and the operation line
    assert compiled.operations == ()
    (rej,) = compiled.rejected
    assert rej.reason is RejectReason.POLICY_VIOLATION
    assert "queue: queue 'other' is not in project 'p' allowedQueues" in rej.message
    assert "operation at projects/p/operations/t.yaml:1" in rej.message


def test_unknown_preset_points_at_naming_line() -> None:
    snap = repo({**BASE, "projects/p/operations/t.yaml": op_file(presets="[second, nope]")})
    errors = [str(e) for e in compile_repo(snap).errors]
    assert errors == [
        "projects/p/operations/t.yaml:2:19: unknown preset 'nope': no projects/p/presets/nope.yaml "
        "or presets/nope.yaml"
    ]


def test_unknown_connection_points_at_the_preset_line() -> None:
    snap = repo(
        {
            **BASE,
            "presets/conn.yaml": "kind: Preset\nconnections: [data, missing]\n",
            "projects/p/operations/t.yaml": op_file(presets="[conn]"),
        }
    )
    errors = {str(e) for e in compile_repo(snap).errors}
    assert errors == {
        "presets/conn.yaml:2:21: unknown connection 'missing': no connections/missing.yaml"
    }


def test_connections_resolve_and_are_exported() -> None:
    snap = repo({**BASE, "projects/p/operations/t.yaml": op_file("  connections: [data]\n")})
    compiled = compile_repo(snap)
    (op,) = compiled.operations
    assert op.connections == ("data",)
    assert compiled.connections["data"].type == "volume"
    assert compiled.connections["data"].spec["claimName"] == "data"


def _rejected(preset: str, where: str = "presets/bad.yaml") -> tuple[str, list[str]]:
    snap = repo(
        {
            **BASE,
            "presets/bad.yaml": preset,
            "projects/p/operations/t.yaml": op_file(presets="[bad]"),
            "projects/p/operations/fine.yaml": op_file(),
        }
    )
    compiled = compile_repo(snap)
    assert compiled.errors == ()
    assert [op.id for op in compiled.operations] == ["p/fine"]  # others go on
    (rej,) = compiled.rejected
    assert rej.operation == "p/t" and rej.reason is RejectReason.POLICY_VIOLATION
    assert rej.location is not None and rej.location.file == where
    return rej.message, []


def test_policy_preset_sets_disallowed_queue() -> None:
    message, _ = _rejected("kind: Preset\nqueue: other\n")
    assert message.startswith("queue: queue 'other' is not in project 'p' allowedQueues")
    assert "preset bad (post_merge) at presets/bad.yaml:2" in message


def test_policy_preset_sets_namespace() -> None:
    message, _ = _rejected("kind: Preset\npatchStrategy: replace\nnamespace: kube-system\n")
    assert message.startswith("namespace: the namespace is set by project 'p'")
    assert "presets/bad.yaml:3" in message


def test_policy_preset_asks_too_many_gpus() -> None:
    preset = (
        "kind: Preset\nrun:\n  container:\n    resources:\n      limits:\n"
        "        nvidia.com/gpu: 8\n"
    )
    message, _ = _rejected(preset)
    assert message.startswith(
        "run.container.resources.limits.nvidia.com/gpu: "
        "nvidia.com/gpu 8 exceeds policy.maxResources 4"
    )
    assert "presets/bad.yaml:6" in message


def test_policy_preset_sets_privileged() -> None:
    preset = "kind: Preset\nrun:\n  container:\n    securityContext:\n      privileged: true\n"
    message, _ = _rejected(preset)
    assert (
        "run.container.securityContext.privileged: privileged containers are not allowed" in message
    )


def test_policy_scheduler_hostpath_and_kind() -> None:
    message, _ = _rejected("kind: Preset\nrun:\n  environment:\n    schedulerName: evil\n")
    assert (
        "run.environment.schedulerName: scheduler 'evil' is not in policy.allowedSchedulerNames"
        in message
    )
    message, _ = _rejected("kind: Preset\nconnections: [host]\n")
    assert "run.connections[0]: connection 'host' mounts hostPath '/mnt'" in message
    # the first violation is run.kind, which the project's default preset set
    message, _ = _rejected("kind: Preset\nqueue: nb\n", where="projects/p/presets/first.yaml")
    assert "run.kind: queue 'nb' does not accept kind 'job'" in message


def test_policy_allows_when_org_says_so() -> None:
    org = BASE["reconciler.yaml"] + "  allowPrivileged: true\n  allowHostPath: true\n"
    preset = (
        "kind: Preset\nconnections: [host]\nrun:\n  container:\n"
        "    securityContext:\n      privileged: true\n"
    )
    snap = repo(
        {
            **BASE,
            "reconciler.yaml": org,
            "presets/x.yaml": preset,
            "projects/p/operations/t.yaml": op_file(presets="[x]"),
        }
    )
    compiled = compile_repo(snap)
    assert compiled.rejected == () and len(compiled.operations) == 1
    assert compiled.org.policy.allow_privileged and compiled.org.policy.allow_host_path


def test_requests_total_uses_limits_where_only_limits_set() -> None:
    body = (
        "    resources:\n      requests: {cpu: 500m, memory: 1Gi}\n"
        "      limits: {cpu: 2, nvidia.com/gpu: 2}\n"
    )
    snap = repo(
        {
            **BASE,
            "projects/p/operations/t.yaml": op_file().replace(
                "    command: [go]\n", "    command: [go]\n" + body
            ),
        }
    )
    (op,) = compile_repo(snap).operations
    assert op.requests == {
        "cpu": Decimal("0.5"),
        "memory": Decimal(2**30),
        "nvidia.com/gpu": Decimal(2),
    }


def test_request_above_limit_is_an_error() -> None:
    body = "    resources:\n      requests: {cpu: 4}\n      limits: {cpu: 2}\n"
    snap = repo(
        {
            **BASE,
            "projects/p/operations/t.yaml": op_file().replace(
                "    command: [go]\n", "    command: [go]\n" + body
            ),
        }
    )
    (error,) = compile_repo(snap).errors
    assert (
        str(error) == "projects/p/operations/t.yaml:7:23: request for cpu (4) exceeds its limit (2)"
    )


def test_submitted_at_and_flags() -> None:
    when = datetime(2024, 5, 1, tzinfo=UTC)
    snap = repo(
        {**BASE, "projects/p/operations/t.yaml": "generation: 3\nisApproved: false\n" + op_file()}
    )
    files = dict(snap.files)
    path = "projects/p/operations/t.yaml"
    files[path] = RepoFile(path, files[path].content, first_commit_time=when)
    (op,) = compile_repo(RepoSnapshot(files, "abc")).operations
    assert op.submitted_at == when and op.generation == 3 and op.is_approved is False


def test_matrix_children_last_param_fastest() -> None:
    body = """  concurrency: 2
matrix:
  concurrency: 2
  params:
    lr: [1, 2]
    bs: [a, b, c]
""".replace("  concurrency: 2\nmatrix", "matrix")
    text = (
        op_file().replace("command: [go]", 'command: [go, "--lr={{ params.lr }}", "{{params.bs}}"]')
        + body
    )
    snap = repo({**BASE, "projects/p/operations/sweep.yaml": text})
    compiled = compile_repo(snap)
    assert compiled.errors == ()
    names = [op.name for op in compiled.operations]
    assert names == [f"sweep-{i}" for i in range(6)]
    assert [dict(op.params) for op in compiled.operations][:4] == [
        {"lr": 1, "bs": "a"},
        {"lr": 1, "bs": "b"},
        {"lr": 1, "bs": "c"},
        {"lr": 2, "bs": "a"},
    ]
    assert compiled.operations[4].spec["run"]["container"]["command"] == ["go", "--lr=2", "b"]
    ref = compiled.operations[5].workflow
    assert ref is not None and (ref.parent, ref.kind, ref.index, ref.concurrency) == (
        "p/sweep",
        "matrix",
        5,
        2,
    )
    assert all("matrix" not in op.spec for op in compiled.operations)


def test_dag_children_and_dependencies() -> None:
    text = (
        op_file()
        + """dag:
  operations:
    - name: a
    - name: b
      dependencies: [a]
      run:
        container:
          command: [other]
    - name: c
      dependencies: [a, b]
"""
    )
    compiled = compile_repo(repo({**BASE, "projects/p/operations/flow.yaml": text}))
    assert compiled.errors == ()
    ops = {op.name: op for op in compiled.operations}
    assert list(ops) == ["flow-a", "flow-b", "flow-c"]
    assert ops["flow-c"].dependencies == ("p/flow-a", "p/flow-b")
    assert ops["flow-b"].spec["run"]["container"]["command"] == ["other"]
    assert ops["flow-b"].provenance["run.container.command[0]"].step == "dag operation b"
    assert ops["flow-a"].spec["run"]["container"]["command"] == ["go"]


def test_dag_cycle_is_an_error_at_the_closing_edge() -> None:
    text = (
        op_file()
        + "dag:\n  operations:\n    - name: a\n      dependencies: [b]\n"
        + "    - name: b\n      dependencies: [a]\n"
    )
    (error,) = compile_repo(repo({**BASE, "projects/p/operations/flow.yaml": text})).errors
    assert "dependency cycle" in error.message and error.location.line in (9, 11)


def test_compile_operation_parses_only_what_it_needs() -> None:
    snap = repo(
        {
            **BASE,
            "projects/p/operations/t.yaml": op_file(),
            "projects/p/operations/broken.yaml": "kind: [\n",
        }
    )
    assert compile_repo(snap).errors  # the whole repo is invalid
    result = compile_operation(snap, "p/t")
    assert result.errors == () and result.found
    assert [op.id for op in result.operations] == ["p/t"]
    assert not compile_operation(snap, "p/missing").found


def test_all_errors_reported_in_one_run() -> None:
    snap = repo(
        {
            **BASE,
            "queues/bad.yaml": "kind: Queue\ncluster: local\npriority: high\n",
            "projects/p/operations/a.yaml": op_file("  timeout: forever\n"),
            "projects/p/operations/b.yaml": "kind: Operation\nrun:\n  kind: jobb\n",
        }
    )
    files = {e.location.file for e in compile_repo(snap).errors}
    assert files == {
        "queues/bad.yaml",
        "projects/p/operations/a.yaml",
        "projects/p/operations/b.yaml",
    }


def test_template_is_valid_and_exceeds_its_limits(template: RepoSnapshot) -> None:
    compiled = compile_repo(template)
    assert compiled.errors == () and compiled.rejected == ()
    by_queue = Counter(op.queue for op in compiled.operations)
    gpus = Counter()
    for op in compiled.operations:
        gpus[op.queue] += op.requests.get("nvidia.com/gpu", Decimal(0))
    q = compiled.queues

    # train-ddp: 2 replicas x 1 GPU, counted whole
    def quota(name: str) -> list[tuple[str, dict[str, Decimal]]]:
        return [(f.name, dict(f.quota)) for f in q[name].flavors]

    one, two = {"nvidia.com/gpu": Decimal(1)}, {"nvidia.com/gpu": Decimal(2)}
    # quota per flavor, H100 first: 2 GPUs in all for team-a, 4 for team-b
    assert quota("team-a") == [("h100", one), ("a100", one)] and gpus["team-a"] == 7
    assert all(
        op.per_pod.get("nvidia.com/gpu") == 1
        for op in compiled.operations
        if op.queue in ("team-a", "team-b")
    )
    assert [(op.id, op.replicas) for op in compiled.operations if op.replicas > 1] == [
        ("vision/train-ddp", 2)
    ]
    assert quota("team-b") == [("h100", two), ("a100", two)] and gpus["team-b"] == 6
    assert q["batch"].concurrency == 3 and not q["batch"].quota and by_queue["batch"] == 2
    # nightly-embed is scheduled: its DAG's children are the templates of each night's run
    assert [t.id for t in compiled.schedules] == [
        "vision/nightly-embed-prepare",
        "vision/nightly-embed-embed",
        "vision/nightly-embed-report",
    ]
    assert by_queue["notebooks"] >= 1 and by_queue["sandboxes"] >= 1
    assert len({queue.priority for queue in q.values()}) == len(q)
    assert list(compiled.clusters) == ["local"]
    kinds = {str(op.kind) for op in compiled.operations}
    assert kinds == {"job", "notebook", "sandbox", "batch"}
    workflows = (*compiled.operations, *compiled.schedules)
    assert {op.workflow.kind for op in workflows if op.workflow} == {"matrix", "dag"}


def test_template_presets_use_every_strategy(template: RepoSnapshot) -> None:
    import yaml

    strategies = set()
    for path, file in template.files.items():
        if "/presets/" in f"/{path}" and path.endswith(".yaml"):
            strategies.add(yaml.safe_load(file.content).get("patchStrategy", "post_merge"))
    assert strategies == {"replace", "isnull", "post_merge", "pre_merge"}


def test_compile_repo_never_raises_on_garbage() -> None:
    snap = overlay(
        RepoSnapshot({}),
        {"reconciler.yaml": b"\x00\xff", "../x.yaml": "a: 1", "queues/q.yaml": "- 1\n"},
    )
    compiled = compile_repo(snap)
    assert {e.location.file for e in compiled.errors} == {
        "reconciler.yaml",
        "../x.yaml",
        "queues/q.yaml",
    }


def test_docs_worked_example() -> None:
    """The worked example of docs/presets.md, field by field."""
    snap = repo(
        {
            **BASE,
            "projects/p/presets/first.yaml": None,
            "projects/p/project.yaml": BASE["projects/p/project.yaml"].replace("[first]", "[base]"),
            "projects/p/presets/base.yaml": "kind: Preset\npatchStrategy: isnull\nrun:\n"
            "  kind: job\n  container:\n    image: my/default:1\n  timeout: 12h\n",
            "presets/a100.yaml": "kind: Preset\npatchStrategy: post_merge\nrun:\n  container:\n"
            "    resources:\n      limits: {nvidia.com/gpu: 1}\n  environment:\n"
            "    nodeSelector: {gpu: a100}\n    tolerations:\n"
            "      - {key: nvidia.com/gpu, operator: Exists}\n",
            "presets/data.yaml": "kind: Preset\npatchStrategy: pre_merge\nrun:\n"
            "  connections: [data]\n  container:\n    env: {LR: '1.0', DATA: /data}\n",
            "projects/p/operations/train.yaml": "kind: Operation\npresets: [a100, data]\nrun:\n"
            "  container:\n    image: my/train:2\n    env: {LR: '0.1'}\n  environment:\n"
            "    nodeSelector: {zone: a}\n",
        }
    )
    compiled = compile_repo(snap)
    assert compiled.errors == () and compiled.rejected == ()
    (op,) = compiled.operations
    run = op.spec["run"]
    steps = {k: v.step for k, v in op.provenance.items()}
    assert run["kind"] == "job" and steps["run.kind"] == "preset base (isnull)"
    assert run["container"]["image"] == "my/train:2" and steps["run.container.image"] == "operation"
    assert op.provenance["run.container.image"].line == 5
    assert run["timeout"] == "12h"
    assert steps["run.container.resources.limits.nvidia.com/gpu"] == "preset a100 (post_merge)"
    assert run["environment"]["nodeSelector"] == {"zone": "a", "gpu": "a100"}
    assert steps["run.environment.nodeSelector.zone"] == "operation"
    assert steps["run.environment.tolerations[0]"] == "preset a100 (post_merge)"
    assert run["container"]["env"] == {"LR": "0.1", "DATA": "/data"}
    assert steps["run.container.env.LR"] == "operation"
    assert steps["run.container.env.DATA"] == "preset data (pre_merge)"
    assert steps["run.connections[0]"] == "preset data (pre_merge)"
    assert op.queue == "gpu" and steps["queue"] == "project default"


def test_the_template_cohort_compiles(template: RepoSnapshot) -> None:
    compiled = compile_repo(template)
    assert compiled.valid, compiled.errors
    pool = compiled.cohorts["gpu-pool"]
    assert (pool.max_borrow_seconds, dict(pool.quota)) == (7200, {})
    a, b = compiled.queues["team-a"], compiled.queues["team-b"]
    one = {"nvidia.com/gpu": Decimal(1)}
    assert a.cohort == "gpu-pool"
    assert [(f.name, dict(f.borrowing_limit), dict(f.lending_limit)) for f in a.flavors] == [
        ("h100", one, {}),
        ("a100", one, {}),
    ]
    assert b.cohort == "gpu-pool"
    assert [(f.name, dict(f.borrowing_limit)) for f in b.flavors] == [("h100", {}), ("a100", {})]


def test_queues_of_one_cohort_on_two_clusters_is_an_error_at_the_cluster_line(
    template: RepoSnapshot,
) -> None:
    snap = overlay(
        template,
        {
            "clusters/other.yaml": "kind: Cluster\nkubeconfig:\n  path: /x\n",
            "queues/team-c.yaml": (
                "kind: Queue\ncluster: other\ncohort: gpu-pool\n"
                "flavors: [{name: h100, quota: {nvidia.com/gpu: 1}}]\n"
            ),
        },
    )
    errors = [str(e) for e in compile_repo(snap).errors]
    assert errors == [
        "queues/team-c.yaml:2:10: queue 'team-c' is in cohort 'gpu-pool', whose queue 'team-a' "
        "is on cluster 'local': the queues of one cohort must be on the same cluster"
    ]
