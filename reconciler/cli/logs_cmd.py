"""``reconciler logs PROJECT/OP``: the log of an operation's newest pod, read through the
``pods/log`` API of the cluster its queue routes to."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click

from reconciler.adapters.kube import Kube, KubeError, NotServed, connect_cluster
from reconciler.adapters.repo import snapshot_worktree
from reconciler.cli.options import repo_dir_option
from reconciler.core.compile import compile_repo
from reconciler.core.decision.render import (
    ANNOTATION_OPERATION,
    LABEL_MANAGED_BY,
    LABEL_OPERATION,
    LABEL_PROJECT,
    MAIN_CONTAINER,
    MANAGER,
)
from reconciler.core.decision.render_kubeflow import CONTAINER as PYTORCH_CONTAINER
from reconciler.core.decision.render_kubeflow import KIND as PYTORCHJOB
from reconciler.core.observation.gang import replica_index
from reconciler.core.types import ClusterSpec, CompiledRepo

EXIT_ERROR = 1
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_TERMINATED = ("Succeeded", "Failed")


class LogsError(Exception):
    """Printed as ``error: <message>``; exit 1."""


@dataclass(frozen=True)
class Target:
    op_id: str
    cluster: ClusterSpec | None  # None when the op is not in the repo (needs --kubeconfig)
    namespace: str | None  # None: search every namespace
    # a fleet queue's other clusters, in choice order: check 10 may have sent it to any
    others: tuple[ClusterSpec, ...] = ()


class NoWorkload(LogsError):
    """The cluster holds no workload of the operation."""


# --- pure steps -------------------------------------------------------------------------


def parse_op_id(text: str) -> tuple[str, str]:
    project, sep, name = text.partition("/")
    if not sep or not project or not name or "/" in name:
        raise LogsError(f"{text!r}: expected PROJECT/OPERATION, e.g. vision/train-resnet")
    return project, name


def find_target(repo: CompiledRepo, op_id: str, have_kubeconfig: bool) -> Target:
    """Where the op runs: its cluster and namespace, from the compiled repo."""
    op = next((o for o in repo.operations if o.id == op_id), None)
    if op is not None:
        queue = repo.queues.get(op.queue)
        members = queue.members if queue is not None else (op.cluster,)
        specs = [repo.clusters[c] for c in members if c in repo.clusters]
        if not specs:
            return Target(op_id, repo.clusters.get(op.cluster), op.namespace)
        return Target(op_id, specs[0], op.namespace, tuple(specs[1:]))
    children = [o.id for o in repo.operations if o.workflow and o.workflow.parent == op_id]
    if children:
        shown = ", ".join(children[:5]) + (", ..." if len(children) > 5 else "")
        raise LogsError(f"{op_id} is a workflow; show the log of one of its operations: {shown}")
    rejected = next((r for r in repo.rejected if r.operation == op_id), None)
    if rejected is not None:
        raise LogsError(f"{op_id} is rejected and never dispatched: {rejected.message}")
    if have_kubeconfig:  # e.g. removed from the repo but still on the cluster
        return Target(op_id, None, None)
    hint = " (the repo does not compile; see `reconciler validate`)" if not repo.valid else ""
    raise LogsError(f"{op_id}: no such operation in the config repo{hint}")


def selector(op_id: str) -> str:
    project, name = parse_op_id(op_id)
    labels = [f"{LABEL_MANAGED_BY}={MANAGER}", f"{LABEL_PROJECT}={project}"]
    if _LABEL_VALUE.match(name):  # longer names are shortened in the label; the
        labels.append(f"{LABEL_OPERATION}={name}")  # annotation below still tells them apart
    return ",".join(labels)


def newest_pod(
    pods: Iterable[Mapping[str, Any]], op_id: str, replica: int = 0
) -> Mapping[str, Any] | None:
    """The op's most recently created pod of ``replica`` (a bumped generation, a retry).
    Replica 0 is a distributed run's index 0 (or its Master) and a single-pod run's pod."""
    mine = [
        p
        for p in pods
        if (p["metadata"].get("annotations") or {}).get(ANNOTATION_OPERATION, op_id) == op_id
        and replica_index(p) == replica
    ]
    mine.sort(
        key=lambda p: (str(p["metadata"].get("creationTimestamp", "")), p["metadata"]["name"])
    )
    return mine[-1] if mine else None


def log_container(pod: Mapping[str, Any]) -> str:
    """The container whose log is the run's: ``main``, or ``pytorch`` in a PyTorchJob's
    pod (the Training Operator requires that name)."""
    names = {c.get("name") for c in (pod.get("spec") or {}).get("containers") or []}
    if MAIN_CONTAINER not in names and PYTORCH_CONTAINER in names:
        return PYTORCH_CONTAINER
    return MAIN_CONTAINER


def waiting_reason(pod: Mapping[str, Any]) -> str | None:
    """Why a pod has no log yet (None when it has started)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Pending":
        return None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"{cond.get('reason', 'not scheduled')}: {cond.get('message', '')}".rstrip(": ")
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            return str(waiting.get("reason", "waiting"))
    return "Pending"


# --- effects ----------------------------------------------------------------------------


def _connect(cluster: ClusterSpec | None, kubeconfig: Path | None, context: str | None) -> Kube:
    if cluster is None and kubeconfig is None:
        raise LogsError("the operation's cluster is unknown; pass --kubeconfig")
    try:
        spec = cluster.kubeconfig if cluster is not None else {}
        ctx = context or (cluster.context if cluster is not None else None)
        return Kube(connect_cluster(spec, ctx, kubeconfig))
    except KubeError as exc:
        raise LogsError(str(exc)) from None


def show_logs(
    target: Target,
    kube: Kube,
    follow: bool,
    tail: int | None,
    echo: Any = click.echo,
    replica: int = 0,
) -> None:
    label_selector = selector(target.op_id)
    try:
        pods = kube.list_labelled("Pod", label_selector, target.namespace)
        pod = newest_pod(pods, target.op_id, replica)
        jobs = () if pod else kube.list_labelled("Job", label_selector, target.namespace)
        kind = "Job"
        if not pod and not jobs:
            kind = PYTORCHJOB
            try:
                jobs = kube.list_labelled(PYTORCHJOB, label_selector, target.namespace)
            except NotServed:
                jobs = ()
    except KubeError as exc:
        raise LogsError(str(exc)) from None
    where = f"namespace {target.namespace}" if target.namespace else "any namespace"
    if target.cluster is not None:
        where = f"cluster {target.cluster.name}, {where}"
    if pod is None and replica:
        seen = sorted(
            {
                i
                for p in pods
                if (i := replica_index(p)) is not None
                and (p["metadata"].get("annotations") or {}).get(ANNOTATION_OPERATION, target.op_id)
                == target.op_id
            }
        )
        if seen:
            shown = ", ".join(str(i) for i in seen)
            raise LogsError(f"{target.op_id}: no pod for replica {replica} (replicas: {shown})")
    if pod is None:
        if jobs:
            job = jobs[0]["metadata"]["name"]
            raise LogsError(f"{target.op_id}: {kind} {job} has no pod yet ({where})")
        raise NoWorkload(f"{target.op_id}: no workload on {where}: not dispatched, or deleted")
    meta = pod["metadata"]
    reason = waiting_reason(pod)
    if reason is not None:
        raise LogsError(f"{target.op_id}: pod {meta['name']} has not started: {reason}")
    # A finished container's log is complete: following it would wait for nothing.
    live = follow and (pod.get("status") or {}).get("phase") not in _TERMINATED
    try:
        out = kube.read_logs(
            meta["namespace"], meta["name"], log_container(pod), follow=live, tail_lines=tail
        )
        if isinstance(out, str):
            echo(out, nl=False)
        else:
            for line in out:
                echo(line)
    except KubeError as exc:
        raise LogsError(str(exc)) from None


def show_logs_of(
    target: Target,
    connect: Callable[[ClusterSpec], Kube],
    follow: bool,
    tail: int | None,
    echo: Any = click.echo,
    replica: int = 0,
) -> None:
    """``show_logs`` on the cluster that ran the operation: a fleet queue's operation ran
    on the cluster check 10 chose, which only the cluster knows here (the cluster whose
    pod of it is the newest; else the first, in choice order, with a workload of it)."""
    if target.cluster is None or not target.others:
        show_logs(target, _kube(connect, target.cluster), follow, tail, echo, replica)
        return
    newest: tuple[str, ClusterSpec, Kube] | None = None
    for spec in (target.cluster, *target.others):
        kube = _kube(connect, spec)
        try:
            pods = kube.list_labelled("Pod", selector(target.op_id), target.namespace)
        except KubeError:
            continue  # a cluster that cannot be read did not run it, as far as we know
        pod = newest_pod(pods, target.op_id, replica)
        created = str(pod["metadata"].get("creationTimestamp", "")) if pod else None
        if created is not None and (newest is None or created > newest[0]):
            newest = (created, spec, kube)
    if newest is not None:
        _, spec, kube = newest
        show_logs(replace(target, cluster=spec, others=()), kube, follow, tail, echo, replica)
        return
    missing: NoWorkload | None = None
    for spec in (target.cluster, *target.others):  # none has a pod: who has its workload
        try:
            here = replace(target, cluster=spec, others=())
            show_logs(here, _kube(connect, spec), follow, tail, echo, replica)
            return
        except NoWorkload as exc:
            missing = exc
    assert missing is not None
    raise missing


def _kube(connect: Callable[[ClusterSpec], Kube], spec: ClusterSpec | None) -> Kube:
    if spec is None:
        raise LogsError("the operation's cluster is unknown; pass --kubeconfig")
    try:
        return connect(spec)
    except KubeError as exc:
        raise LogsError(str(exc)) from None


@click.command("logs")
@click.argument("operation", metavar="PROJECT/OP")
@click.option("-f", "--follow", is_flag=True, help="Keep streaming while the pod runs.")
@click.option("--tail", type=click.IntRange(min=0), help="Only the last N lines.")
@click.option(
    "--replica",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Which pod of a distributed run: its index (rank); 0 is the run's own log.",
)
@click.option(
    "--kubeconfig",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Use this kubeconfig instead of the one in the op's cluster file.",
)
@click.option("--context", help="The kubeconfig context (default: the cluster file's).")
@repo_dir_option
def logs(
    operation: str,
    follow: bool,
    tail: int | None,
    replica: int,
    kubeconfig: Path | None,
    context: str | None,
    repo_dir: Path,
) -> None:
    """Print the log of the operation's newest pod, from the cluster that ran it. For a
    distributed run, the pod of replica 0 unless --replica names another."""
    try:
        project, name = parse_op_id(operation)
        try:
            snapshot = snapshot_worktree(repo_dir)
        except Exception as exc:  # the adapter's I/O boundary
            raise LogsError(f"cannot read {repo_dir}: {exc}") from None
        target = find_target(compile_repo(snapshot), f"{project}/{name}", kubeconfig is not None)
        if kubeconfig is not None:  # that cluster, whatever the queue's clusters are
            kube = _connect(target.cluster, kubeconfig, context)
            show_logs(replace(target, others=()), kube, follow, tail, replica=replica)
        else:

            def connect(spec: ClusterSpec) -> Kube:
                return _connect(spec, None, context)

            show_logs_of(target, connect, follow, tail, replica=replica)
    except LogsError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_ERROR) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
