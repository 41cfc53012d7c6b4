"""Shared fixtures. Cluster tests (marked ``cluster``) run against a real control plane:
``$RECONCILER_TEST_KUBECONFIG`` when set (kind, minikube, any cluster), otherwise a dev
cluster started for the session and stopped after it, its binaries built before the first
test (``pytest_collection_finish``)."""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cluster import KubeCluster, Reconcilers, binaries_to_build
from support.helpers import wait_until
from support.paths import TEMPLATE

from reconciler.adapters.repo import snapshot_worktree
from reconciler.core.types import RepoSnapshot


@pytest.fixture(autouse=True)
def _process_logging_put_back() -> Iterator[None]:
    """``run`` and ``serve`` configure the process's logging (the root logger's handlers
    and level): a test that invokes them in-process must not change what the next tests'
    ``caplog`` sees."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    external = os.environ.get("RECONCILER_TEST_KUBECONFIG")
    if external:
        yield KubeCluster(kubeconfig=Path(external), dev=None)
        return
    from reconciler.devcluster.cluster import DevCluster

    # Without a Job watch cache, compacting etcd gives the informer a real 410 Gone.
    dev = DevCluster(tmp_path_factory.mktemp("dev-cluster"), job_watch_cache=False)
    dev.up(progress=lambda msg: print(f"[dev-cluster] {msg}"))
    try:
        yield KubeCluster(kubeconfig=dev.kubeconfig, dev=dev)
    finally:
        dev.down(progress=lambda msg: None)


@pytest.fixture
def namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards."""
    from kubernetes import client

    api = client.CoreV1Api(kube_cluster.api_client())
    name = f"t-{uuid.uuid4().hex[:10]}"
    api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # The ServiceAccount admission plugin rejects pods until the default SA exists.
    wait_until(
        lambda: bool(api.list_namespaced_service_account(name).items),
        timeout=60,
        what=f"default service account in {name}",
    )
    try:
        yield name
    finally:
        api.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def gang_nodes(kube_cluster: KubeCluster) -> Iterator[list[str]]:
    """The ``gang`` shape's four 8-GPU H100 nodes (pool ``gang``, selected by
    ``reconciler.dev/pool: gang``) added to the session's cluster for one test and deleted
    after it, so the other tests see the default fleet only."""
    from kubernetes import client

    from reconciler.devcluster.shape import GANG_POOL, named_shape

    api = client.CoreV1Api(kube_cluster.api_client())
    (pool,) = [p for p in named_shape("gang") if p.name == GANG_POOL]
    names = pool.node_names()
    existing = {n.metadata.name for n in api.list_node().items}
    for name in names:
        if name not in existing:
            api.create_node(pool.manifest(name))

    def ready() -> bool:
        nodes = {n.metadata.name: n for n in api.list_node().items}
        return all(
            name in nodes
            and any(
                c.type == "Ready" and c.status == "True"
                for c in nodes[name].status.conditions or []
            )
            for name in names
        )

    wait_until(ready, timeout=60, what="the gang kwok nodes to be Ready")
    try:
        yield names
    finally:
        for name in names:
            api.delete_node(name)


@pytest.fixture(scope="session")
def template() -> RepoSnapshot:
    """The example config repo, as the core sees it."""
    return snapshot_worktree(TEMPLATE)


@pytest.fixture
def kube(kube_cluster: KubeCluster) -> Iterator[Any]:
    """The test cluster with the example's prerequisites and no managed Jobs left over."""
    from support.reconciler_env import clean_workloads

    from reconciler.adapters.kube import Kube
    from reconciler.devcluster.prerequisites import apply_prerequisites

    kube = Kube(kube_cluster.api_client())
    apply_prerequisites(kube.api)
    clean_workloads(kube)
    yield kube
    clean_workloads(kube)


@pytest.fixture
def config_repo(tmp_path: Path, kube_cluster: KubeCluster) -> Path:
    """The example config repo in Git, pointed at the test cluster, 3 s simulated runs."""
    from support.reconciler_env import make_config_repo

    return make_config_repo(tmp_path / "config", kube_cluster.kubeconfig)


@pytest.fixture
def reconcilers() -> Iterator[Reconcilers]:
    made = Reconcilers()
    yield made
    for reconciler in made:
        reconciler.close()


@pytest.fixture
def h200_remote(config_repo: Path, kube_cluster: KubeCluster, tmp_path: Path) -> Iterator[Any]:
    """A second dev cluster, ``remote`` in ``config_repo`` (``clusters/remote.yaml``, not
    committed): one 8-GPU H200 node, a product the session's (``local``) lacks. The
    config repo's example operations are removed (uncommitted): the test writes its own."""
    if kube_cluster.dev is None:
        pytest.skip("starts a second dev cluster; needs the dev-cluster binaries")
    from support.reconciler_env import second_cluster

    from reconciler.devcluster.shape import default_shape

    for op in config_repo.glob("projects/*/operations/*.yaml"):
        op.unlink()
    shape = default_shape(gpu_nodes=1, gpus_per_node=8, gpu_types=("h200",), cpu_nodes=0)
    with second_cluster(tmp_path / "second", config_repo, shape) as second:
        yield second.kube


@pytest.fixture
def template_remote(tmp_path: Path) -> Path:
    """The example config repo, one commit on main, in a bare remote."""
    import shutil

    from support.git_commands import git

    work = tmp_path / "work"
    shutil.copytree(TEMPLATE, work)
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "template")
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    return bare


@pytest.fixture
def remote(template_remote: Path) -> Path:
    """The template's remote, as the status-branch tests call it."""
    return template_remote


# --- before the first test: the dev cluster's binaries -------------------------------------


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the dev cluster's binaries (and helm, when a collected test uses it) before the
    first test, when a collected test runs on the dev cluster and one is missing: a cold
    build takes 10-20 minutes on 2 cores, longer than a test's timeout, and the README's
    test command runs no build before pytest. A build that fails stops the run, with why."""
    missing = set() if session.config.option.collectonly else binaries_to_build(session.items)
    if not missing:
        return
    from reconciler.devcluster.build import BuildError, ensure_binaries

    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    capture = session.config.pluginmanager.get_plugin("capturemanager")

    def say(line: str) -> None:
        text = f"[dev-cluster build] {line}"
        if reporter is not None:
            reporter.write_line(text)
        else:
            print(text, flush=True)

    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        try:
            ensure_binaries(say, helm="helm" in missing)
        except BuildError as exc:
            pytest.exit(f"before the first test: {exc}", returncode=1)


# --- the end of the test process ----------------------------------------------------------

_EXIT_STATUS: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave without the interpreter's finalization when daemon threads are still alive:
    in-process clients of the session's dev cluster (watch threads, cycles left in a read)
    outlive it, and finalizing around them can abort the process (SIGABRT) after every test
    passed. The product's long-running commands leave the same way (``exit_process``)."""
    import sys
    import threading

    alive = [t for t in threading.enumerate() if t.daemon and t.is_alive()]
    if _EXIT_STATUS and alive:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(_EXIT_STATUS[-1])
