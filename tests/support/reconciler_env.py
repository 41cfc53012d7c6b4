"""Shared set-up for reconciler tests on the real control plane: a Git config repo made
from the example template, pointed at the test cluster, with short simulated durations."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from reconciler.adapters.clock import SystemClock
from reconciler.adapters.kube import Kube, connect_cluster
from reconciler.adapters.repo import snapshot_git
from reconciler.core.plan import AdmitWhen, PendingReason
from reconciler.core.types import ClusterSpec, Phase
from reconciler.devcluster.cluster import DevCluster
from reconciler.devcluster.shape import NodePool
from reconciler.runtime.cycle import CycleResult, Reconciler
from support.git_commands import git
from support.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "config-repo-template"


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


# The example's team-a and team-b without flavors: one GPU quota each (2, may borrow 2;
# 4), in cohort gpu-pool. A cohort's queues all have flavors or none does.
UNFLAVORED_TEAMS = {
    "queues/team-a.yaml": (
        "kind: Queue\nname: team-a\ncluster: local\npriority: 100\n"
        "quota:\n  nvidia.com/gpu: 2\ncohort: gpu-pool\nborrowingLimit:\n  nvidia.com/gpu: 2\n"
        "kinds: [job, batch]\nstrategy: BestEffortFIFO\n"
    ),
    "queues/team-b.yaml": (
        "kind: Queue\nname: team-b\ncluster: local\npriority: 90\n"
        "quota:\n  nvidia.com/gpu: 4\ncohort: gpu-pool\nkinds: [job, batch]\n"
        "strategy: BestEffortFIFO\n"
    ),
}


def unflavored_teams(repo: Path) -> None:
    """team-a and team-b as :data:`UNFLAVORED_TEAMS` (not committed)."""
    for path, text in UNFLAVORED_TEAMS.items():
        (repo / path).write_text(text)


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


def run_args(
    repo: Path,
    kubeconfig: Path,
    *extra: str,
    interval: str | None = None,
    cache_dir: Path | None = None,
) -> list[str]:
    """The arguments of ``reconciler run`` on ``repo``, its cluster ``local`` being the test
    cluster."""
    args = ["run", "--repo", str(repo)]
    if interval is not None:
        args += ["--interval", interval]
    if cache_dir is not None:
        args += ["--cache-dir", str(cache_dir)]
    return [*args, "--cluster-kubeconfig", f"local={kubeconfig}", *extra]


def start_run(
    repo: Path,
    kubeconfig: Path,
    stderr: Path | int,
    *extra: str,
    interval: str | None = "1s",
    cache_dir: Path | None = None,
) -> subprocess.Popen[str]:
    """``reconciler run`` as a process of its own: stdout discarded, stderr written to the
    file ``stderr`` (or a ``subprocess`` constant such as ``PIPE``)."""
    argv = [
        sys.executable,
        "-m",
        "reconciler",
        *run_args(repo, kubeconfig, *extra, interval=interval, cache_dir=cache_dir),
    ]
    if isinstance(stderr, Path):
        with stderr.open("w") as log:  # the child keeps its own copy
            return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, text=True)
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, text=True)


def run_once(
    repo: Path,
    kubeconfig: Path,
    *extra: str,
    cache_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``reconciler run --once``, its output captured."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "reconciler",
            *run_args(repo, kubeconfig, "--once", *extra, cache_dir=cache_dir),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=None if env is None else dict(env),
    )


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


GPU = "nvidia.com/gpu"


def gpu_op(
    name: str,
    queue: str,
    gpus: int,
    duration: str,
    *,
    timeout: str | None = None,
    product: str | None = None,
) -> str:
    """An Operation file: a Job of ``gpus`` GPUs that the dev cluster's kwok stages end
    Succeeded after ``duration``; ``product`` (``nvidia.com/gpu.product``) picks the nodes."""
    selector = f"    nodeSelector:\n      {GPU}.product: {product}\n" if product else ""
    return (
        f"kind: Operation\nname: {name}\nqueue: {queue}\nrun:\n"
        + (f"  timeout: {timeout}\n" if timeout else "")
        + "  container:\n    command: [python, run.py]\n"
        f"    resources:\n      limits: {{{GPU}: {gpus}}}\n"
        "  environment:\n" + selector + "    tolerations:\n"
        f"      - {{key: {GPU}, operator: Exists, effect: NoSchedule}}\n"
        f"    annotations:\n      reconciler.dev/simulated-duration: {duration}\n"
    )


def job_names(kube: Kube) -> list[str]:
    """The managed Jobs on ``kube``, by name."""
    return sorted(j["metadata"]["name"] for j in kube.list_managed("Job").items)


def bound_node(kube: Kube, job: str) -> str | None:
    """The node the first pod of Job ``job`` is bound to (None while it is not)."""
    for pod in kube.list_managed("Pod").items:
        if pod["metadata"]["labels"].get("job-name") == job:
            return pod["spec"].get("nodeName") or None
    return None


def cycles_until_lent_quota_returns(
    reconciler: Reconciler,
    lender: str,
    borrower: str,
    ends_by: datetime,
    *,
    each_wait: Callable[[CycleResult, int], None] = lambda _r, _n: None,
    timeout: float = 150,
) -> CycleResult:
    """Cycles a second apart until ``lender`` (an operation of a cohort's lending queue) is
    dispatched; that cycle's result. Before it, in every cycle, ``borrower`` still runs and
    ``lender`` waits ``WaitingForLentQuota`` for it alone, to end by ``ends_by``;
    ``each_wait(result, n)`` asserts more of the n-th wait (0 first). The lender must have
    waited at least once, and starts in the cycle that sees the borrower succeed."""
    waited = 0
    deadline = time.monotonic() + timeout
    while True:
        assert time.monotonic() < deadline, f"{lender} never started"
        result = reconciler.run_once()
        assert result.ok and result.plan is not None, result
        if lender in result.dispatched:
            break
        # it waits only while the borrower holds the lender's quota
        assert result.states[borrower].phase.active
        [wait] = [p for p in result.plan.pending if p.operation == lender]
        assert wait.reason is PendingReason.WAITING_FOR_LENT_QUOTA, wait.message
        assert wait.admit.when is AdmitWhen.BORROWERS_FINISH
        assert (wait.admit.operations, wait.admit.at) == ((borrower,), ends_by)
        each_wait(result, waited)
        waited += 1
        time.sleep(1)
    assert waited >= 1, f"{lender} never had to wait"
    assert result.states[borrower].phase is Phase.SUCCEEDED
    return result


def gang_op(
    replicas: int,
    gpus: int,
    *,
    backend: str | None = None,
    duration: str | None = None,
    command: str = "[torchrun, train.py]",
    selector: str | None = "{reconciler.dev/pool: gang}",
) -> str:
    """An Operation file: ``replicas`` pods of ``gpus`` GPUs each (one pod when 1), run by
    ``backend`` (``run.distributed.backend``); on the ``gang_nodes`` (``selector``); the
    dev cluster's kwok stages end its pods Succeeded after ``duration`` (never: None)."""
    return (
        "kind: Operation\nrun:\n  kind: job\n"
        + (f"  replicas: {replicas}\n" if replicas > 1 else "")
        + (f"  distributed:\n    backend: {backend}\n" if backend else "")
        + f"  container:\n    image: busybox\n    command: {command}\n"
        + f"    resources:\n      limits:\n        {GPU}: {gpus}\n"
        + (f"  environment:\n    nodeSelector: {selector}\n" if selector else "")
        + (
            f"    annotations: {{reconciler.dev/simulated-duration: {duration}}}\n"
            if duration
            else ""
        )
    )


def small_repo(
    root: Path,
    kubeconfig: Path,
    namespace: str,
    ops: Mapping[str, str],
    *,
    queue: str = "gangs",
    quota: int = 8,
    queue_extra: str = "",
    org_extra: str = "",
    project: str = "d",
) -> Path:
    """A config repo of one queue (``quota`` GPUs, on the cluster of ``kubeconfig``), one
    project ``project`` in ``namespace`` and its ``ops`` (by name), committed on main."""
    files = {
        "reconciler.yaml": f"kind: Org\ndefaults:\n  queue: {queue}\n{org_extra}",
        "clusters/local.yaml": (
            f"kind: Cluster\nkubeconfig:\n  path: {kubeconfig}\n"
            f"context: {client_context(kubeconfig)}\n"
        ),
        f"queues/{queue}.yaml": (
            f"kind: Queue\ncluster: local\n{queue_extra}quota:\n  {GPU}: {quota}\n"
        ),
        f"projects/{project}/project.yaml": f"kind: Project\nnamespace: {namespace}\n",
        **{f"projects/{project}/operations/{name}.yaml": text for name, text in ops.items()},
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    git(root, "init", "-q", "-b", "main")
    commit_all(root, "ops")
    return root


def cycle_until(
    reconciler: Reconciler,
    check: Callable[[CycleResult], Any],
    *,
    timeout: float,
    what: str,
    period: float = 0.5,
) -> CycleResult:
    """Run cycles until ``check(result)`` is truthy; that cycle's result."""
    holder: list[CycleResult] = []

    def one() -> Any:
        result = reconciler.run_once()
        assert result.plan is not None, result.sync_error
        holder[:] = [result]
        return check(result)

    wait_until(one, timeout=timeout, what=what, interval=period)
    return holder[0]
