"""Issue 13 section 2: names that collide.

Operation ids and rendered workload names are unique across the whole repo (rejected
operations and workflow children included); a collision is a config error at both files.
Two projects share a namespace only when ``policy.allowSharedNamespaces`` says so.
"""

from __future__ import annotations

from datetime import UTC, datetime

from support.snapshots import repo

from reconciler.core.compile import compile_repo
from reconciler.core.decision.render import workload_name
from reconciler.core.plan import plan_repo
from reconciler.core.types import ObservedOperation, Phase

ORG = "kind: Org\ndefaults:\n  queue: q\nprune:\n  enabled: true\n  allowMassPrune: true\n"
SHARED = ORG + "policy:\n  allowSharedNamespaces: true\n"
BASE = {
    "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
    "queues/q.yaml": "kind: Queue\ncluster: local\n",
    "presets/base.yaml": "kind: Preset\nrun:\n  kind: job\n  container:\n    image: img:1\n",
}
OP = "kind: Operation\npresets: [base]\n"


def project(namespace: str | None = None) -> str:
    return "kind: Project\n" + (f"namespace: {namespace}\n" if namespace else "")


def errors(files: dict[str, str], org: str = ORG) -> list[str]:
    return [str(e) for e in compile_repo(repo({**BASE, "reconciler.yaml": org, **files})).errors]


def test_two_projects_may_not_share_a_namespace_by_default() -> None:
    found = errors(
        {
            "projects/a/project.yaml": project("shared"),
            "projects/b/project.yaml": "kind: Project\ndescription: b\nnamespace: shared\n",
            "projects/c/project.yaml": project(),
        }
    )
    assert found == [
        "projects/a/project.yaml:2:12: namespace 'shared' is also the namespace of project 'b': "
        "projects share a namespace only with policy.allowSharedNamespaces: true in "
        "reconciler.yaml",
        "projects/b/project.yaml:3:12: namespace 'shared' is also the namespace of project 'a': "
        "projects share a namespace only with policy.allowSharedNamespaces: true in "
        "reconciler.yaml",
    ]


def test_a_namespace_defaulted_from_the_project_name_counts() -> None:
    found = errors({"projects/a/project.yaml": project(), "projects/b/project.yaml": project("a")})
    assert len(found) == 2 and all("namespace 'a' is also the namespace" in e for e in found)
    assert found[0].startswith("projects/a/project.yaml:1:1: ")


def test_projects_that_share_a_namespace_by_policy_still_get_unique_workload_names() -> None:
    """``team`` + ``a-train`` and ``team-a`` + ``train`` both render ``team-a-train-g1``."""
    files = {
        "projects/team/project.yaml": project("shared"),
        "projects/team/operations/a-train.yaml": OP,
        "projects/team-a/project.yaml": project("shared"),
        "projects/team-a/operations/train.yaml": OP,
    }
    message = (
        "workload name 'team-a-train-g1' in namespace 'shared' is rendered by two operations: "
        "operation team/a-train (projects/team/operations/a-train.yaml) and operation "
        "team-a/train (projects/team-a/operations/train.yaml); rename one"
    )
    assert errors(files, SHARED) == [
        f"projects/team-a/operations/train.yaml:1:1: {message}",
        f"projects/team/operations/a-train.yaml:1:1: {message}",
    ]
    # refused by default for the shared namespace itself, and the names collide there too
    assert len(errors(files)) == 4
    # apart, or under different names, they are fine
    assert errors({**files, "projects/team-a/project.yaml": project("other")}, SHARED) == []
    fine = {k.replace("a-train", "b-train"): v for k, v in files.items()}
    assert errors(fine, SHARED) == []


def test_a_name_that_equals_another_operations_shortened_name_collides() -> None:
    long = "x" * 60
    short = workload_name("p", long, 1)
    assert len(short) == 63 and short != f"p-{long}-g1"
    mimic = short.removeprefix("p-").removesuffix("-g1")
    found = errors(
        {
            "projects/p/project.yaml": project(),
            f"projects/p/operations/{long}.yaml": OP,
            f"projects/p/operations/{mimic}.yaml": OP,
        }
    )
    assert len(found) == 2
    assert all(f"workload name {short!r} in namespace 'p'" in e for e in found), found


def test_a_rejected_matrix_child_cannot_share_an_operations_id() -> None:
    """The matrix is refused by policy, so its children are shielded from pruning; a child
    id that is also another operation's would keep that operation running forever once its
    file is deleted. The collision is an error at both files."""
    files = {
        "projects/p/project.yaml": project(),
        "projects/p/operations/sweep.yaml": OP
        + "matrix:\n  params:\n    lr: [1, 2]\n"
        + "run:\n  container:\n    securityContext:\n      privileged: true\n",
        "projects/p/operations/sweep-1.yaml": OP,
    }
    compiled = compile_repo(repo({**BASE, "reconciler.yaml": ORG, **files}))
    message = (
        "operation id 'p/sweep-1' names two operations: child 1 of matrix p/sweep "
        "(projects/p/operations/sweep.yaml) and operation p/sweep-1 "
        "(projects/p/operations/sweep-1.yaml); rename one"
    )
    assert [str(e) for e in compiled.errors] == [
        f"projects/p/operations/sweep-1.yaml:1:1: {message}",
        f"projects/p/operations/sweep.yaml:3:1: {message}",
    ]
    # Without the other file, the refused matrix keeps its own running children.
    del files["projects/p/operations/sweep-1.yaml"]
    alone = compile_repo(repo({**BASE, "reconciler.yaml": ORG, **files}))
    assert alone.errors == ()
    running = [ObservedOperation(f"p/sweep-{i}", Phase.RUNNING, queue="q") for i in (0, 1)]
    plan = plan_repo(alone, running, datetime(2026, 1, 1, tzinfo=UTC))
    assert plan.stop == ()


def test_dag_children_and_workflow_names_are_claimed_too() -> None:
    dag = OP + "dag:\n  operations:\n    - name: eval\n"
    found = errors(
        {
            "projects/p/project.yaml": project(),
            "projects/p/operations/train.yaml": dag,
            "projects/p/operations/train-eval.yaml": OP,
        }
    )
    assert len(found) == 2 and all(
        "operation id 'p/train-eval' names two operations: child 'eval' of DAG p/train" in e
        for e in found
    ), found
    assert found[1].startswith("projects/p/operations/train.yaml:5:13: ")
    # a workflow's own id is claimed: a DAG named like a matrix child
    found = errors(
        {
            "projects/p/project.yaml": project(),
            "projects/p/operations/sweep.yaml": OP + "matrix:\n  params:\n    lr: [1]\n",
            "projects/p/operations/sweep-0.yaml": dag,
        }
    )
    assert any(
        "operation id 'p/sweep-0' names two operations: child 0 of matrix p/sweep "
        "(projects/p/operations/sweep.yaml) and dag p/sweep-0" in e
        for e in found
    ), found
