"""Shared set-up for reconciler tests on the real control plane: a Git config repo made
from the example template, pointed at the test cluster, with short simulated durations."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from reconciler.adapters.clock import SystemClock
from reconciler.adapters.kube import Kube, connect_cluster
from reconciler.adapters.repo import snapshot_git
from reconciler.core.types import ClusterSpec, Phase
from reconciler.devcluster.cluster import DevCluster
from reconciler.devcluster.shape import NodePool
from reconciler.runtime.cycle import CycleResult, Reconciler

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "config-repo-template"


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def make_config_repo(dest: Path, kubeconfig: Path, duration: str = "3s") -> Path:
    shutil.copytree(TEMPLATE, dest)
    cluster = dest / "clusters" / "local.yaml"
    text = cluster.read_text()
    text = text.replace(
        "path: ~/.local/state/reconciler/dev-cluster/admin.kubeconfig", f"path: {kubeconfig}"
    )
    context = client_context(kubeconfig)
    text = text.replace("context: dev", f"context: {context}")
    cluster.write_text(text)
    for base in dest.glob("projects/*/presets/base.yaml"):
        base.write_text(
            base.read_text().replace(
                "reconciler.dev/simulated-duration: 20s",
                f"reconciler.dev/simulated-duration: {duration}",
            )
        )
    git(dest, "init", "-q", "-b", "main")
    commit_all(dest, "initial config")
    return dest


def make_long_running(repo: Path, project: str) -> None:
    """Ops of ``project`` (``*`` for all) run for 10 minutes instead of 3 s; committed."""
    for base in repo.glob(f"projects/{project}/presets/base.yaml"):
        base.write_text(base.read_text().replace("duration: 3s", "duration: 600s"))
    commit_all(repo, f"long-running ops in {project}")


def client_context(kubeconfig: Path) -> str:
    return str(yaml.safe_load(kubeconfig.read_text())["current-context"])


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def clean_workloads(kube: Kube) -> None:
    """Delete every managed Job so each test starts from an empty cluster."""
    for job in kube.list_managed("Job").items:
        meta = job["metadata"]
        kube.delete_workload(meta["namespace"], meta["name"])


def make_reconciler(repo: Path, branch: str = "main", **kw: Any) -> Reconciler:
    def connect(spec: ClusterSpec) -> Kube:
        return Kube(connect_cluster(spec.kubeconfig, spec.context))

    return Reconciler(lambda: snapshot_git(repo, branch), connect, SystemClock(), **kw)


def active_by_queue(result: CycleResult) -> dict[str, int]:
    counts: dict[str, int] = {}
    for state in result.states.values():
        if state.phase.active and state.queue:
            counts[state.queue] = counts.get(state.queue, 0) + 1
    return counts


def phases(result: CycleResult) -> Mapping[str, Phase]:
    return {op: s.phase for op, s in result.states.items()}


class SecondCluster(NamedTuple):
    dev: DevCluster  # to stop it mid-test (an outage), or to read its kubeconfig
    kube: Kube


@contextlib.contextmanager
def second_cluster(
    workdir: Path, repo: Path, shape: tuple[NodePool, ...], name: str = "remote"
) -> Iterator[SecondCluster]:
    """A second dev cluster of ``shape`` under ``workdir`` with the example's prerequisites,
    and ``clusters/<name>.yaml`` for it in ``repo`` (not committed); stopped on exit. The
    session's cluster (``local``) is never disturbed."""
    from kubernetes import config

    from reconciler.devcluster.prerequisites import apply_prerequisites

    dev = DevCluster(workdir)
    dev.up(shape, progress=lambda _m: None)
    try:
        kube = Kube(config.new_client_from_config(config_file=str(dev.kubeconfig)))
        apply_prerequisites(kube.api)
        (repo / "clusters" / f"{name}.yaml").write_text(
            f"kind: Cluster\nname: {name}\nkubeconfig:\n  path: {dev.kubeconfig}\ncontext: dev\n"
        )
        yield SecondCluster(dev, kube)
    finally:
        dev.down(progress=lambda _m: None)
