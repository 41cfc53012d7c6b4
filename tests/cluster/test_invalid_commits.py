"""R3: invalid commits pushed while one long-lived reconciler runs against the dev cluster.

Each case commits one kind of bad change onto the good config, runs a cycle, and checks:
the commit is rejected whole (or, for a policy violation and a delete-everything commit,
guarded: the operation is refused / the prune guard holds), the last good config stays in
force, the error is in ``status/config.yaml`` (or the operation's status) as
``file:line:col: message``, and no Job changed (same names, uids, resourceVersions). The case
then restores the good tree, which must change nothing either. A final valid commit resumes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cluster import KubeCluster
from support.helpers import wait_until
from support.paths import DATA
from support.reconciler_env import (
    clean_workloads,
    commit_all,
    git,
    make_config_repo,
    make_long_running,
)

from reconciler.adapters.kube import Kube
from reconciler.core.reporting.status import operation_path
from reconciler.devcluster.prerequisites import apply_prerequisites
from reconciler.runtime.cycle import CycleResult
from reconciler.runtime.service import Runtime, make_runtime

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]

# name -> (uid, generation, annotations, labels): what the reconciler writes
Jobs = dict[str, tuple[str, int | None, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]]


@dataclass
class Live:
    repo: Path
    kube: Kube
    runtime: Runtime
    good: str  # the last valid commit the reconciler applied

    def cycle(self) -> CycleResult:
        result = self.runtime.reconciler.run_once()
        self.runtime.on_cycle(result)
        return result

    def jobs(self) -> Jobs:
        """Each Job as far as the reconciler writes it: which object (uid), its spec
        (generation), annotations and labels. Not its resourceVersion: the Job controller
        keeps writing the status of running Jobs (ready pods) at its own pace."""
        return {
            j["metadata"]["name"]: (
                j["metadata"]["uid"],
                j["metadata"].get("generation"),
                tuple(sorted((j["metadata"].get("annotations") or {}).items())),
                tuple(sorted((j["metadata"].get("labels") or {}).items())),
            )
            for j in self.kube.list_managed("Job").items
        }

    def status(self, path: str) -> dict[str, Any]:
        text = git(self.repo, "show", f"reconciler/status:{path}")
        data = yaml.safe_load(text)
        assert isinstance(data, dict)
        return data

    def restore(self) -> str:
        """Commit the last good tree back (deleted files included)."""
        git(self.repo, "rm", "-rq", "--cached", ".")
        git(self.repo, "checkout", self.good, "--", ".")
        git(self.repo, "clean", "-fdq")
        return commit_all(self.repo, "restore the good config")


def _steady(live: Live) -> Jobs:
    """Cycle until a cycle dispatches and stops nothing and no Job changed across it."""
    seen: list[Jobs] = [live.jobs()]

    def settled() -> bool:
        result = live.cycle()
        seen.append(live.jobs())
        return not result.dispatched and not result.stopped and seen[-1] == seen[-2]

    wait_until(settled, timeout=60, interval=1.0, what="the cluster to settle")
    return seen[-1]


@pytest.fixture(scope="module")
def live(kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    kube = Kube(kube_cluster.api_client())
    apply_prerequisites(kube.api)
    clean_workloads(kube)
    root = tmp_path_factory.mktemp("r3")
    repo = make_config_repo(root / "config", kube_cluster.kubeconfig)
    make_long_running(repo, "*")
    runtime = make_runtime(str(repo), "main", {}, cache_dir=root / "cache")
    good = git(repo, "rev-parse", "HEAD")
    live = Live(repo, kube, runtime, good)
    first = live.cycle()
    assert first.version == good and len(first.dispatched) >= 5
    yield live
    clean_workloads(kube)


def _write(path: str, text: str) -> Callable[[Path], None]:
    def change(repo: Path) -> None:
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)

    return change


def _privileged_preset(repo: Path) -> None:
    """The gpu preset (sweep-lr's and train-vit's, running) asks for a privileged container."""
    preset = repo / "presets" / "gpu.yaml"
    text = preset.read_text().replace(
        "  container:\n", "  container:\n    securityContext:\n      privileged: true\n", 1
    )
    preset.write_text(text)


def _delete_every_operation(repo: Path) -> None:
    for op in repo.glob("projects/*/operations/*.yaml"):
        op.unlink()


@dataclass(frozen=True)
class Bad:
    change: Callable[[Path], None]
    error: str  # regex the error must match, as file:line:col: message
    whole: bool = True  # rejected whole (else: guarded, the commit is in force)


BAD_CORPUS = DATA / "bad"


def _corpus(name: str) -> Bad:
    """A case of tests/data/bad/ (``# path:`` and ``# expect:`` header) as a commit: its
    file written over the config, its exact expectation the error."""
    text = (BAD_CORPUS / f"{name}.yaml").read_text()
    path, expect = (line.split(": ", 1)[1] for line in text.splitlines()[:2])
    return Bad(_write(path, text), "^" + re.escape(expect) + "$")


CASES = {
    "yaml": Bad(
        _write("queues/team-b.yaml", "kind: Queue\nname: team-b\ncluster: [oops\n"),
        r"^queues/team-b\.yaml:\d+:\d+: .*flow sequence",
    ),
    "schema": Bad(
        _write("queues/extra.yaml", "kind: Queue\ncluster: local\npriority: high\n"),
        r"^queues/extra\.yaml:3:11: priority: Input should be a valid integer",
    ),
    "unknown-preset": Bad(
        _write("projects/vision/operations/extra.yaml", "kind: Operation\npresets: [nope]\n"),
        r"^projects/vision/operations/extra\.yaml:2:11: unknown preset 'nope'",
    ),
    "policy-violation": Bad(
        _privileged_preset,
        r"presets/gpu\.yaml:\d+:\d+: .*privileged containers are not allowed by policy "
        r"\(set by preset gpu \(post_merge\) at presets/gpu\.yaml:\d+\)",
        whole=False,
    ),
    "delete-every-operation": Bad(
        _delete_every_operation,
        r"^refusing to prune \d+ of \d+ active operations \(more than 50%\)",
        whole=False,
    ),
    # flavors (issue 26, section 5): the running H100 and A100 Jobs stay as they are
    **{
        name: _corpus(name)
        for name in (
            "flavor-no-node-labels",
            "queue-flavor-unknown",
            "queue-flavor-twice",
            "queue-quota-and-flavors",
            "cohort-flavored-and-not",
            "org-flavor-prices-unknown",
            "cluster-flavor-prices-unknown",
            "queue-fair-sharing-weight-zero",
            "queue-fair-sharing-weight-negative",
        )
    },
}


@pytest.mark.parametrize("name", list(CASES))
def test_invalid_commit_is_rejected_and_changes_nothing(live: Live, name: str) -> None:
    bad = CASES[name]
    before = _steady(live)
    bad.change(live.repo)
    sha = commit_all(live.repo, f"bad: {name}")

    result = live.cycle()
    assert result.attempted_version == sha
    assert result.dispatched == () and result.stopped == () and result.failed == {}
    config = live.status("status/config.yaml")
    assert config["version"] == sha
    if bad.whole:
        assert result.version == live.good  # the last good config stays in force
        errors = [str(e) for e in result.config_errors]
        assert any(re.search(bad.error, e) for e in errors), errors
        assert config["valid"] is False and config["applied"] == live.good
        assert any(re.search(bad.error, e) for e in config["errors"]), config
    else:
        assert result.version == sha and result.config_errors == ()
        assert result.compiled is not None
        if name == "policy-violation":
            running = {op for op, s in result.states.items() if s.phase.active}
            refused = [r for r in result.compiled.rejected if {r.operation, *r.children} & running]
            assert refused  # refused while running: they keep running, never pruned
            op = refused[0].operation
            record = live.status(operation_path(op))
            assert record["reason"] == "PolicyViolation"
            assert re.search(bad.error, record["message"]), record
        else:
            assert result.plan is not None and result.plan.prune_refused is not None
            assert any(re.search(bad.error, w) for w in config["warnings"]), config
    assert live.jobs() == before  # no cluster change at all

    # putting the good tree back changes nothing either
    restored = live.restore()
    again = live.cycle()
    assert again.version == restored and again.config_errors == ()
    assert again.dispatched == () and again.stopped == ()
    assert live.jobs() == before
    assert live.status("status/config.yaml")["valid"] is True
    live.good = restored


SHADOW = """kind: Operation
run:
  container:
    command: [python, serve.py]
    resources:
      requests: {cpu: 1, memory: 1Gi}
  environment:
    annotations:
      reconciler.dev/simulated-duration: 600s
"""
REFUSED_MATRIX = """kind: Operation
matrix:
  params:
    lr: ["0.1", "0.2"]
run:
  container:
    command: [python, serve.py]
    securityContext:
      privileged: true
"""


def test_a_refused_workflow_does_not_shield_a_deleted_operation(live: Live) -> None:
    """Issue 13, section 2, on the dev cluster: ``vision/shadow-1`` runs as an operation of
    its own. One commit deletes it and adds a matrix ``shadow``, refused by policy, whose
    child 1 has the same id. Its Job records that it was no workflow's child
    (``reconciler.dev/workflow: ""``), so it is pruned; before, the refused matrix's child
    list kept it running. No other Job changes."""
    ops = live.repo / "projects" / "vision" / "operations"
    (ops / "shadow-1.yaml").write_text(SHADOW)
    added = commit_all(live.repo, "add vision/shadow-1")
    first = live.cycle()
    assert first.version == added and "vision/shadow-1" in first.dispatched, first.dispatched
    workload = first.states["vision/shadow-1"].name
    job = live.kube.batch.read_namespaced_job(workload, "team-a")
    assert job.metadata.annotations["reconciler.dev/workflow"] == ""
    before = _steady(live)
    assert workload in before

    (ops / "shadow-1.yaml").unlink()
    (ops / "shadow.yaml").write_text(REFUSED_MATRIX)
    sha = commit_all(live.repo, "delete vision/shadow-1, add a matrix policy refuses")
    result = live.cycle()
    assert result.version == sha and result.config_errors == ()
    assert result.compiled is not None
    (refused,) = [r for r in result.compiled.rejected if r.operation == "vision/shadow"]
    assert "vision/shadow-1" in refused.children
    assert result.stopped == ("vision/shadow-1",) and result.dispatched == ()
    after = live.jobs()
    assert workload not in after
    assert {k: v for k, v in before.items() if k != workload} == after
    record = live.status(operation_path("vision/shadow"))
    assert record["reason"] == "PolicyViolation", record

    (ops / "shadow.yaml").unlink()
    live.good = commit_all(live.repo, "remove the refused matrix")
    again = live.cycle()
    assert again.version == live.good and again.dispatched == () and again.stopped == ()
    assert live.jobs() == after


def test_a_valid_commit_then_resumes_normally(live: Live) -> None:
    before = _steady(live)
    result = live.runtime.reconciler.last
    assert result is not None

    def file_of(op: str) -> Path:
        project, name = op.split("/")
        return live.repo / "projects" / project / "operations" / f"{name}.yaml"

    # an active operation with a file of its own (not a matrix child)
    victim = next(
        op for op, s in sorted(result.states.items()) if s.phase.active and file_of(op).exists()
    )
    workload = result.states[victim].name
    file_of(victim).unlink()
    sha = commit_all(live.repo, f"delete {victim}")
    resumed = live.cycle()
    assert resumed.version == sha and resumed.config_errors == ()
    assert resumed.stopped == (victim,)  # prune works again, within the guard
    after = live.jobs()
    assert workload not in after
    assert set(before) - {workload} <= set(after)
    config = live.status("status/config.yaml")
    assert config["valid"] is True and config["applied"] == sha and "errors" not in config
