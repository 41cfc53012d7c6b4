"""One spec made dispatchable, the same way for an operation and for each workflow child
(steps 4-6 of docs/presets.md): its queue and connections resolved, its resource requests
totalled, org policy checked, and the ``CompiledOperation`` built.

What must live here: whatever is done alike to every spec that may be dispatched, and
nothing that depends on where the spec came from (presets are ``operations.py``'s,
children ``workflows.py``'s).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from operator import is_
from typing import Any

from pydantic import ValidationError

from reconciler.core.compile.errors import Errors, LocateError, add_validation_errors, at
from reconciler.core.compile.index import RepoIndex, ValidatedParts, get_in
from reconciler.core.compile.merge import Path, ProvMap, dotted
from reconciler.core.compile.model import OperationFile
from reconciler.core.compile.pod import check_pod, container_totals, pod_total
from reconciler.core.compile.policy import (
    Violation,
    check_pod_security,
    check_policy,
    pod_security_findings,
)
from reconciler.core.compile.references import (
    find_connection,
    find_queue,
    outputs_problem,
    unknown_name,
)
from reconciler.core.decision.render import (
    DISTRIBUTED_ENV,
    SANDBOX_DEFAULT_TIMEOUT,
    env_sources,
    render_pod,
)
from reconciler.core.quantity import duration_seconds
from reconciler.core.types import (
    DEFAULT_PORT,
    CompiledOperation,
    ConnectionSpec,
    Distributed,
    DistributedBackend,
    Framework,
    Location,
    NotifyRule,
    OrgSettings,
    Provenance,
    QueueSpec,
    RunKind,
    WorkflowRef,
)


@dataclass(frozen=True)
class Context:
    """What every spec of one operation shares."""

    project: str
    namespace: str
    allowed_queues: frozenset[str] | None
    org: OrgSettings
    op_path: str
    presets: tuple[str, ...]
    notifications: tuple[NotifyRule, ...] = ()  # the project's and the operation's own


@dataclass(frozen=True)
class Resolved:
    queue: QueueSpec
    requests: dict[str, Decimal]  # one pod's
    connections: tuple[str, ...]
    violations: tuple[Violation, ...]
    gang: Gang

    @property
    def total(self) -> dict[str, Decimal]:
        """What the operation takes of a quota: every replica's request."""
        return scaled(self.requests, self.gang.replicas)


@dataclass(frozen=True, slots=True)
class Gang:
    """``run.replicas`` and ``run.distributed`` of a spec, compiled."""

    replicas: int = 1
    distributed: Distributed | None = None


_RUN_KINDS: dict[str, RunKind] = {kind.value: kind for kind in RunKind}


def run_kind(value: str) -> RunKind:
    """``RunKind(value)``, by a dictionary lookup for the kinds there are."""
    return _RUN_KINDS.get(value) or RunKind(value)


# Kinds that may run more than one pod (a notebook or a sandbox is one interactive pod).
GANG_KINDS = frozenset({RunKind.JOB, RunKind.BATCH})


def scaled(requests: Mapping[str, Decimal], replicas: int) -> dict[str, Decimal]:
    return {k: v * replicas for k, v in requests.items()}


def gang_of(
    spec: Mapping[str, Any], prov: ProvMap, fallback: Location, errors: Errors
) -> Gang | None:
    """The spec's replicas and distributed settings (defaults filled in); None, with the
    error reported, when its kind cannot run more than one pod."""
    run = spec.get("run") or {}
    replicas = int(run.get("replicas", 1))
    written = run.get("distributed")
    kind = run_kind(run["kind"])
    if kind not in GANG_KINDS and (replicas > 1 or written is not None):
        path: Path = ("run", "replicas") if replicas > 1 else ("run", "distributed")
        errors.add(
            at(prov, path, fallback),
            f"{dotted(path)}: a {kind} runs one pod; only job and batch operations may set "
            "run.replicas or run.distributed",
        )
        return None
    if replicas == 1 and written is None:
        return Gang()
    written = written or {}
    return Gang(
        replicas,
        Distributed(
            framework=Framework(written.get("framework", Framework.TORCH)),
            port=int(written.get("port", DEFAULT_PORT)),
            backend=DistributedBackend(written.get("backend", DistributedBackend.JOB)),
        ),
    )


# Fields every dispatchable spec must end up with (the schema leaves them optional, since a
# preset may set them).
REQUIRED: tuple[tuple[str, ...], ...] = (("run", "kind"), ("run", "container", "image"))


def validate_spec(
    spec: Mapping[str, Any],
    locate: LocateError,
    errors: Errors,
    *,
    prefix: str,
    unset: Callable[[Path], tuple[Location, str]],
    validated: ValidatedParts | None = None,
) -> bool:
    """A merged (or expanded) spec checked as if it were written by hand: the operation
    schema, then the fields it must have. ``unset(path)`` says where and why a required
    field is missing. False when anything is wrong (reported). With ``validated``, the
    parts of specs that passed before are not checked again (:class:`ValidatedParts`)."""
    reported = len(errors)
    try:
        if validated is None:
            OperationFile.model_validate(spec)
        else:
            unchecked, new = validated.unchecked(spec)
            try:
                OperationFile.model_validate(unchecked)
            except ValidationError:
                OperationFile.model_validate(spec)  # the errors, as the whole spec gives them
            validated.note(new)
    except ValidationError as exc:
        add_validation_errors(errors, exc, spec, OperationFile, locate, prefix=prefix)
    for path in REQUIRED:
        if get_in(spec, *path) is None:
            location, message = unset(path)
            errors.add(location, message)
    return len(errors) == reported


def total_requests(
    spec: Mapping[str, Any],
    prov: Mapping[Path, Provenance],
    fallback: Location,
    errors: Errors,
    repo: RepoIndex | None = None,
) -> dict[str, Decimal]:
    """Total request per resource of the main container: the request, or the limit where
    only a limit is set. With ``repo``, the totals of resources the compile keeps (a
    preset's) are worked out once (``RepoIndex.totals``)."""
    resources = get_in(spec, "run", "container", "resources") or {}
    base: Path = ("run", "container", "resources")
    known = repo is not None and bool(resources) and repo.kept(resources)
    if known:
        assert repo is not None
        hit = repo.totals.get(id(resources))
        if hit is not None and hit[0] is resources:
            return dict(hit[1])
    reported = len(errors)
    totals = container_totals(
        resources, lambda kind, resource: at(prov, (*base, kind, resource), fallback), errors
    )
    if known and len(errors) == reported:  # where a problem is reported depends on the spec
        assert repo is not None
        repo.totals[id(resources)] = (resources, dict(totals))
    return totals


def resolve(
    repo: RepoIndex,
    ctx: Context,
    spec: Mapping[str, Any],
    prov: ProvMap,
    fallback: Location,
    errors: Errors,
) -> Resolved | None:
    """Steps 4-6 for one (possibly child) spec: queue, connections, requests, policy.
    None when it cannot be dispatched (what is wrong is in ``errors``, or at the queue)."""
    reported = len(errors)
    queue_name = spec.get("queue")
    queue: QueueSpec | None = None
    if queue_name is None:
        errors.add(
            fallback,
            "no queue: set 'queue' in the operation or a preset, or defaults.queue in "
            "project.yaml or reconciler.yaml",
        )
    else:
        queue = find_queue(repo, queue_name)
        if queue is None and repo.named["Queue"].get(queue_name) is None:
            location = at(prov, ("queue",), fallback)
            errors.add(location, unknown_name(repo, "queue", queue_name, "Queue"))
    connections: list[str] = []
    specs: dict[str, ConnectionSpec] = {}
    for i, name in enumerate(get_in(spec, "run", "connections") or []):
        conn = find_connection(repo, name)
        if conn is None:
            if repo.named["Connection"].get(name) is None:
                location = at(prov, ("run", "connections", i), fallback)
                errors.add(location, unknown_name(repo, "connection", name, "Connection"))
            continue
        specs[name] = conn
        if name not in connections:
            connections.append(name)
    outputs = get_in(spec, "run", "outputs")
    if isinstance(outputs, str):
        wrong = outputs_problem(repo, outputs)
        conn = find_connection(repo, outputs)
        if wrong:
            errors.add(at(prov, ("run", "outputs"), fallback), wrong)
        elif conn is not None and outputs not in connections:
            specs[outputs] = conn
            connections.append(outputs)
    requests = total_requests(spec, prov, fallback, errors, repo)
    requests = pod_total(spec, prov, fallback, errors, requests)
    check_pod(spec, prov, fallback, errors, specs)
    conns = [specs[name] for name in connections]
    check_env(spec, conns, prov, fallback, errors)
    gang = gang_of(spec, prov, fallback, errors)
    if gang is not None:
        check_distributed_env(spec, conns, gang, prov, fallback, errors)
    if queue is not None and queue.budget is not None and effective_timeout(spec, queue) is None:
        errors.add(
            fallback,
            f"queue {queue.name!r} has a budget, so every operation needs a timeout to reserve "
            "against it: set run.timeout, or defaultTimeout in "
            f"queues/{queue.name}.yaml",
        )
    if len(errors) > reported or queue is None or gang is None:
        return None
    violations = check_policy(
        spec,
        prov,
        policy=ctx.org.policy,
        queue=queue,
        project=ctx.project,
        allowed_queues=ctx.allowed_queues,
        requests=scaled(requests, gang.replicas),
        replicas=gang.replicas,
    )
    violations += _pod_security(repo, ctx, spec, prov, conns, queue)
    return Resolved(queue, requests, tuple(connections), violations, gang)


def _pod_security(
    repo: RepoIndex,
    ctx: Context,
    spec: Mapping[str, Any],
    prov: ProvMap,
    conns: list[ConnectionSpec],
    queue: QueueSpec,
) -> tuple[Violation, ...]:
    """``check_pod_security`` of the pod rendered from ``spec``. What Pod Security reads of
    a pod (its annotations, security contexts, host namespaces, ports, volumes, sysctls)
    comes from ``run.environment``, the main container's ``securityContext`` and
    ``shmSize``, ``run.volumes``, ``run.initContainers``, ``run.sidecars``, the kind (its
    ports) and the connections, never from the rest (command, env, image, resources...):
    those parts, each shared with the equal ones seen before (``RepoIndex.shared_value``,
    as ``build`` shares them after), key what the pod's findings were, so an operation
    like one seen before renders no pod when there were none (``RepoIndex.pod_findings``):
    one written with an environment of its own, like its neighbours', too."""
    policy = ctx.org.policy
    run = spec["run"]
    container = run.get("container") or {}
    share = repo.shared_value
    parts = (
        *(
            None if part is None else share(part)
            for part in (
                run.get("environment"),
                container.get("securityContext"),
                run.get("volumes"),
                run.get("initContainers"),
                run.get("sidecars"),
            )
        ),
        *conns,
    )
    key: tuple[Any, ...] | None = None
    if all(part is None or repo.kept(part) for part in parts[:5]):
        key = (run["kind"], bool(container.get("shmSize")), *map(id, parts))
        hit = repo.pod_findings.get(key)
        if hit is not None and all(map(is_, hit[0], parts)) and not hit[1]:
            return ()
    kind = run_kind(run["kind"])
    pod = render_pod(spec, kind, conns, operation=f"{ctx.project}/{spec['name']}", queue=queue.name)
    if key is not None:
        repo.pod_findings[key] = (parts, bool(pod_security_findings(pod, policy)))
    return check_pod_security(spec, prov, pod, policy=policy)


def _connection_path(spec: Mapping[str, Any], listed: list[Any], conn: str) -> Path:
    """Where ``conn`` is named: its ``run.connections`` entry, else ``run.outputs``."""
    if conn in listed:
        return ("run", "connections", listed.index(conn))
    return ("run", "outputs") if get_in(spec, "run", "outputs") == conn else ("run",)


def check_env(
    spec: Mapping[str, Any],
    conns: list[ConnectionSpec],
    prov: ProvMap,
    fallback: Location,
    errors: Errors,
) -> None:
    """Each env name once in the container: ``run.container.env`` and the connections may
    not set the same name (names the reconciler sets are refused by the schema)."""
    listed = list(get_in(spec, "run", "connections") or [])
    first: dict[str, str | None] = {}
    for name, conn in env_sources(spec, conns):
        if name not in first:
            first[name] = conn
            continue
        if conn is None or first[name] is None:  # at the operation's own, when it is one
            where: Path = ("run", "container", "env", name)
        else:
            where = _connection_path(spec, listed, conn)
        before = "run.container.env" if first[name] is None else f"connection {first[name]!r}"
        setter = "run.container.env" if conn is None else f"connection {conn!r}"
        errors.add(
            at(prov, where, fallback),
            f"environment variable {name!r} is set twice in the container: by {before} and "
            f"by {setter}",
        )


def check_distributed_env(
    spec: Mapping[str, Any],
    conns: list[ConnectionSpec],
    gang: Gang,
    prov: ProvMap,
    fallback: Location,
    errors: Errors,
) -> None:
    """The rendezvous variables a distributed operation's framework sets (``MASTER_ADDR``,
    ``RANK``...) are set for every replica: ``run.container.env`` and the connections may
    not set them too."""
    if gang.distributed is None:
        return
    framework = gang.distributed.framework
    reserved = DISTRIBUTED_ENV[framework]
    listed = list(get_in(spec, "run", "connections") or [])
    for name, conn in env_sources(spec, conns):
        if name not in reserved:
            continue
        if conn is None:
            where: Path = ("run", "container", "env", name)
            setter = "run.container.env"
        else:
            where = _connection_path(spec, listed, conn)
            setter = f"connection {conn!r}"
        errors.add(
            at(prov, where, fallback),
            f"environment variable {name!r} is set for every replica by run.distributed "
            f"(framework {framework}); {setter} cannot set it too",
        )


@functools.lru_cache(maxsize=1024, typed=True)  # the same few timeouts, every operation
def _seconds(timeout: str | int) -> int:
    return duration_seconds(timeout)


def effective_timeout(spec: Mapping[str, Any], queue: QueueSpec) -> int | None:
    """Seconds a run of ``spec`` may take (its Job's activeDeadlineSeconds): run.timeout,
    else the queue's defaultTimeout, else a sandbox's default; None when unbounded."""
    timeout = get_in(spec, "run", "timeout")
    if timeout is not None:
        return _seconds(timeout)
    if queue.default_timeout is not None:
        return queue.default_timeout
    if get_in(spec, "run", "kind") == RunKind.SANDBOX.value:
        return SANDBOX_DEFAULT_TIMEOUT
    return None


def _with_default_timeout(spec: Mapping[str, Any], queue: QueueSpec) -> Mapping[str, Any]:
    """``spec`` with the queue's defaultTimeout as run.timeout when it sets none, so the Job
    is bounded by the time its budget reserves."""
    run = spec.get("run")
    if queue.default_timeout is None or not isinstance(run, Mapping) or "timeout" in run:
        return spec
    return {**spec, "run": {**run, "timeout": queue.default_timeout}}


def build(
    ctx: Context,
    repo: RepoIndex,
    name: str,
    spec: Mapping[str, Any],
    prov: ProvMap,
    resolved: Resolved,
    *,
    workflow: WorkflowRef | None = None,
    dependencies: tuple[str, ...] = (),
    params: Mapping[str, Any] | None = None,
) -> CompiledOperation:
    spec = _with_default_timeout(spec, resolved.queue)
    if "notifications" in spec:  # the runtime's (``notifications``), not the workload's
        spec = {k: v for k, v in spec.items() if k != "notifications"}
    return CompiledOperation(
        project=ctx.project,
        name=name,
        path=ctx.op_path,
        queue=resolved.queue.name,
        cluster=resolved.queue.cluster,
        namespace=ctx.namespace,
        kind=run_kind(spec["run"]["kind"]),
        spec=repo.shared_value(spec),  # identical subtrees shared between operations
        requests=repo.shared_amounts(resolved.total),
        pod_requests=repo.shared_amounts(resolved.requests),
        replicas=resolved.gang.replicas,
        distributed=resolved.gang.distributed,
        presets=ctx.presets,
        provenance=repo.provenance_of(prov, ctx.op_path),
        connections=resolved.connections,
        generation=int(spec.get("generation", 1)),
        is_approved=bool(spec.get("isApproved", True)),
        priority=int(spec.get("priority") or 0),
        stopped=spec.get("stopped") is True,
        workflow=workflow,
        dependencies=dependencies,
        submitted_at=repo.first_commit_time(ctx.op_path),
        params=dict(params or {}),
        timeout=effective_timeout(spec, resolved.queue),
        notifications=ctx.notifications,
    )
