"""Org policy, checked on the compiled operation *after* the merge.

A preset is not a security boundary: whatever layer set a field, the result is what runs.
Each violation names the field and the layer that set it (its provenance).

What must live here: the policy checks and the Pod Security checks, one small function per
check in a table, and ``Violation``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from reconciler.core.compile.merge import Path, dotted, lookup
from reconciler.core.decision.render import pod_field_origin
from reconciler.core.quantity import duration_seconds, format_quantity
from reconciler.core.types import (
    PROFILE_CAPABILITIES,
    OrgPolicy,
    PodSecurityLevel,
    Provenance,
    QueueSpec,
)

# Every field of the compiled spec that policy governs, with the ``policy.*`` knobs of
# reconciler.yaml that adjust its rule (none: a fixed rule). A violation's field always lies
# under one of these keys (tests/core/test_policy_escapes.py), every knob of the ``policy`` model
# governs one of them, and docs/config-reference.md (*Policy*) and docs/operations.md
# (*RBAC*) list each field and knob (tests/meta/test_docs_drift.py).
GOVERNED: Mapping[str, tuple[str, ...]] = {
    "namespace": ("allowSharedNamespaces",),  # never set by an operation; one project each
    "queue": ("allowedQueues",),
    "run.kind": (),  # the queue's kinds
    "run.replicas": ("maxReplicas",),
    "run.container.resources": ("maxResources",),
    "run.container.securityContext": (
        "podSecurity",
        "allowPrivileged",
        "allowedCapabilities",
        "allowRunAsRoot",
    ),
    "run.environment.schedulerName": ("allowedSchedulerNames",),
    "run.environment.priorityClassName": ("allowedPriorityClasses",),
    "run.environment.serviceAccountName": ("allowedServiceAccounts",),
    "run.environment.imagePullSecrets": ("allowedImagePullSecrets",),
    "run.environment.hostNetwork": ("podSecurity",),
    "run.environment.hostPID": ("podSecurity",),
    "run.environment.hostIPC": ("podSecurity",),
    "run.environment.annotations": ("podSecurity",),  # the AppArmor and seccomp annotations
    "run.volumes": ("allowedVolumeTypes", "podSecurity"),
    "run.initContainers": ("podSecurity", "maxResources"),
    "run.sidecars": ("podSecurity", "maxResources"),
    "run.connections": ("allowHostPath", "podSecurity"),
    "run.maxRetries": ("maxRetries",),
    "run.ttl": ("minTtl",),
    "priority": ("maxOperationPriority",),
}

# Knobs of ``policy:`` that govern the config commit itself, not an operation's field.
COMMIT_KNOBS = ("requireSignedCommits",)


def governed_field(field: str) -> str | None:
    """The key of :data:`GOVERNED` that a violation's dotted ``field`` lies under."""
    for key in GOVERNED:
        if field == key or field.startswith((f"{key}.", f"{key}[")):
            return key
    return None


@dataclass(frozen=True)
class Violation:
    field: str  # dotted path in the compiled spec
    message: str
    provenance: Provenance | None = None

    def __str__(self) -> str:
        where = f" (set by {self.provenance})" if self.provenance else ""
        return f"{self.field}: {self.message}{where}"


def _get(spec: Mapping[str, Any], path: Path) -> Any:
    value: Any = spec
    for part in path:
        if isinstance(value, dict) and isinstance(part, str):
            value = value.get(part)
        elif isinstance(value, list) and isinstance(part, int) and part < len(value):
            value = value[part]
        else:
            return None
    return value


def check_policy(
    spec: Mapping[str, Any],
    provenance: Mapping[Path, Provenance],
    *,
    policy: OrgPolicy,
    queue: QueueSpec,
    project: str,
    allowed_queues: frozenset[str] | None,
    requests: Mapping[str, Decimal],
    replicas: int = 1,
) -> tuple[Violation, ...]:
    """Every policy violation of one compiled operation's spec, in a stable order (the pod
    it renders to is :func:`check_pod_security`'s)."""
    out: list[Violation] = []

    def violation(path: Path, message: str) -> None:
        out.append(Violation(dotted(path), message, lookup(provenance, path)))

    # 1. The namespace is always the project's.
    if spec.get("namespace") is not None:
        violation(
            ("namespace",),
            f"the namespace is set by project {project!r}; operations and presets cannot set it",
        )
    # 2. Queue admission: project allow-list, org allow-list, kinds the queue accepts.
    if allowed_queues is not None and queue.name not in allowed_queues:
        violation(
            ("queue",),
            f"queue {queue.name!r} is not in project {project!r} allowedQueues "
            f"[{', '.join(sorted(allowed_queues))}]",
        )
    if policy.allowed_queues is not None and queue.name not in policy.allowed_queues:
        violation(
            ("queue",),
            f"queue {queue.name!r} is not in policy.allowedQueues "
            f"[{', '.join(sorted(policy.allowed_queues))}]",
        )
    kind = _get(spec, ("run", "kind"))
    if kind is not None and kind not in queue.kinds:
        violation(
            ("run", "kind"),
            f"queue {queue.name!r} does not accept kind {kind!r} "
            f"(accepts {', '.join(sorted(queue.kinds))})",
        )
    # 3. Per-operation ceilings: replicas, and resources counted over all replicas.
    if policy.max_replicas is not None and replicas > policy.max_replicas:
        violation(
            ("run", "replicas"),
            f"{replicas} replicas exceed policy.maxReplicas {policy.max_replicas}",
        )
    for resource, ceiling in sorted(policy.max_resources.items()):
        total = requests.get(resource, Decimal(0))
        if total > ceiling:
            req: Path = ("run", "container", "resources", "requests", resource)
            lim: Path = ("run", "container", "resources", "limits", resource)
            field = req if _get(spec, req) is not None else lim
            if _get(spec, field) is None:  # set only by an init container or a sidecar
                field = _extra_resource_field(spec, resource) or field
            amount = format_quantity(total)
            if replicas > 1:
                each = format_quantity(total / replicas)
                amount = f"{amount} ({replicas} replicas \u00d7 {each})"
            violation(
                field,
                f"{resource} {amount} exceeds policy.maxResources {format_quantity(ceiling)}",
            )
    # 4. Scheduler names.
    scheduler = _get(spec, ("run", "environment", "schedulerName"))
    allowed = policy.allowed_scheduler_names
    if scheduler is not None and allowed is not None and scheduler not in allowed:
        violation(
            ("run", "environment", "schedulerName"),
            f"scheduler {scheduler!r} is not in policy.allowedSchedulerNames "
            f"[{', '.join(sorted(allowed))}]",
        )
    # 5. Priority classes: none unless allowed, system-* never (it preempts system pods).
    priority = _get(spec, ("run", "environment", "priorityClassName"))
    if priority is not None:
        allowed_classes = policy.allowed_priority_classes
        if str(priority).startswith("system-"):
            violation(
                ("run", "environment", "priorityClassName"),
                f"priority class {priority!r} is for the cluster's own pods: system-* is never "
                "allowed",
            )
        elif priority not in allowed_classes:
            violation(
                ("run", "environment", "priorityClassName"),
                f"priority class {priority!r} is not in policy.allowedPriorityClasses "
                f"[{', '.join(sorted(allowed_classes))}] (unset, the cluster's default applies)",
            )
    # 6. What presets may set beyond the main container: service account, image pull
    #    secrets, volume types, retries and TTL (their containers are Pod Security's).
    for path, message in pod_violations(spec, policy):
        violation(path, message)
    return tuple(out)


# --- the pod parts beyond the main container (docs/config-reference.md) -------------------

_EXTRA = ("initContainers", "sidecars")


def _extra_containers(spec: Mapping[str, Any]) -> list[tuple[Path, Mapping[str, Any]]]:
    return [
        (("run", section, i), c)
        for section in _EXTRA
        for i, c in enumerate(_get(spec, ("run", section)) or [])
        if isinstance(c, dict)
    ]


def _extra_resource_field(spec: Mapping[str, Any], resource: str) -> Path | None:
    """The first init container or sidecar that requests (or limits) ``resource``."""
    for base, container in _extra_containers(spec):
        for section in ("requests", "limits"):
            if resource in (_get(container, ("resources", section)) or {}):
                return (*base, "resources", section, resource)
    return None


def _seconds(value: int) -> str:
    h, rest = divmod(value, 3600)
    m, s = divmod(rest, 60)
    text = (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{s}s" if s else "")
    return text or "0s"


def pod_violations(spec: Mapping[str, Any], policy: OrgPolicy) -> list[tuple[Path, str]]:
    """``(path, message)`` of every violation in the fields presets may set beyond the main
    container; init containers and sidecars are held to the main container's rules by
    :func:`check_pod_security`, on the rendered pod."""
    out: list[tuple[Path, str]] = []
    env: Path = ("run", "environment")
    account = _get(spec, (*env, "serviceAccountName"))
    if account is not None and account != "default":
        allowed = policy.allowed_service_accounts
        if account not in allowed:
            out.append(
                (
                    (*env, "serviceAccountName"),
                    f"service account {account!r} is not in policy.allowedServiceAccounts "
                    f"[{', '.join(sorted(allowed))}]"
                    if allowed
                    else f"service account {account!r} is not allowed: without "
                    "policy.allowedServiceAccounts only the namespace's 'default' is",
                )
            )
    secrets = policy.allowed_image_pull_secrets
    for i, name in enumerate(_get(spec, (*env, "imagePullSecrets")) or []):
        if secrets is not None and name not in secrets:
            out.append(
                (
                    (*env, "imagePullSecrets", i),
                    f"image pull secret {name!r} is not in policy.allowedImagePullSecrets "
                    f"[{', '.join(sorted(secrets))}]",
                )
            )
    for i, volume in enumerate(_get(spec, ("run", "volumes")) or []):
        if not isinstance(volume, dict):
            continue
        for kind in sorted(k for k in volume if k != "name"):
            if kind not in policy.allowed_volume_types:
                out.append(
                    (
                        ("run", "volumes", i),
                        f"volume {volume.get('name')!r} is a {kind} volume, which is not in "
                        f"policy.allowedVolumeTypes "
                        f"[{', '.join(sorted(policy.allowed_volume_types))}]",
                    )
                )
    priority = spec.get("priority")
    if isinstance(priority, int) and priority > policy.max_operation_priority:
        out.append(
            (
                ("priority",),
                f"priority {priority} exceeds policy.maxOperationPriority "
                f"{policy.max_operation_priority}",
            )
        )
    retries = _get(spec, ("run", "maxRetries"))
    if isinstance(retries, int) and retries > policy.max_retries:
        out.append(
            (
                ("run", "maxRetries"),
                f"maxRetries {retries} exceeds policy.maxRetries {policy.max_retries}",
            )
        )
    ttl = _get(spec, ("run", "ttl"))
    if ttl is not None and duration_seconds(ttl) < policy.min_ttl:
        out.append(
            (
                ("run", "ttl"),
                f"ttl {_seconds(duration_seconds(ttl))} is shorter than policy.minTtl "
                f"{_seconds(policy.min_ttl)} (the reconciler must see a Job finish before "
                "Kubernetes deletes it)",
            )
        )
    return out


# --- Pod Security, on the rendered pod -----------------------------------------------------
# The Kubernetes Pod Security Standards (https://kubernetes.io/docs/concepts/security/
# pod-security-standards/), checked on the pod the operation renders to, after every preset
# and connection: whatever field a value came through, the pod is what runs.

PodPath = tuple[str | int, ...]
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
_SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
_SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
_RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
_SECCOMP_ANNOTATIONS = ("seccomp.security.alpha.kubernetes.io/pod", "container.seccomp.")


def _containers(pod_spec: Mapping[str, Any]) -> list[tuple[PodPath, Mapping[str, Any]]]:
    return [
        (("spec", section, i), c)
        for section in _CONTAINER_LISTS
        for i, c in enumerate(pod_spec.get(section) or [])
        if isinstance(c, Mapping)
    ]


def pod_security_findings(pod: Mapping[str, Any], policy: OrgPolicy) -> list[tuple[PodPath, str]]:
    """Each field of a rendered pod (``metadata`` and ``spec``) that breaks
    ``policy.podSecurity``, or the org's own rules (``allowRunAsRoot: false``), with why.
    ``allowPrivileged``, ``allowedCapabilities`` and ``allowHostPath`` relax their rules."""
    level = policy.pod_security
    out: list[tuple[PodPath, str]] = []
    spec: Mapping[str, Any] = pod.get("spec") or {}
    annotations: Mapping[str, Any] = (pod.get("metadata") or {}).get("annotations") or {}
    pod_ctx: Mapping[str, Any] = spec.get("securityContext") or {}
    containers = _containers(spec)
    profile = f"policy.podSecurity {level.value}"

    def contexts() -> list[tuple[PodPath, Mapping[str, Any]]]:
        """The pod's security context and each container's."""
        found: list[tuple[PodPath, Mapping[str, Any]]] = [(("spec", "securityContext"), pod_ctx)]
        for where, c in containers:
            found.append(((*where, "securityContext"), c.get("securityContext") or {}))
        return found

    # The org's own rule, at every level.
    strict_root = not policy.allow_run_as_root or level is PodSecurityLevel.RESTRICTED
    if strict_root:
        for where, ctx in contexts():
            if ctx.get("runAsUser") == 0:
                out.append(
                    ((*where, "runAsUser"), "running as root (UID 0) is not allowed by policy")
                )
            if ctx.get("runAsNonRoot") is False:
                out.append(
                    ((*where, "runAsNonRoot"), "runAsNonRoot: false is not allowed by policy")
                )
    if level is PodSecurityLevel.PRIVILEGED:
        return out

    # baseline
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key) is True:
            out.append(
                (("spec", key), f"host namespaces ({key}: true) are not allowed by {profile}")
            )
    for where, ctx in contexts():
        if (ctx.get("windowsOptions") or {}).get("hostProcess") is True:
            out.append(
                (
                    (*where, "windowsOptions", "hostProcess"),
                    f"HostProcess is not allowed by {profile}",
                )
            )
    allowed_caps = policy.allowed_capabilities

    def caps_name() -> str:  # named only in a finding: not built for every pod
        return next(
            (
                f"the Pod Security {lv.value} set"
                for lv, c in PROFILE_CAPABILITIES.items()
                if c == allowed_caps and lv is not PodSecurityLevel.PRIVILEGED
            ),
            ", ".join(sorted(allowed_caps)) or "none",
        )

    for where, c in containers:
        ctx = c.get("securityContext") or {}
        sc = (*where, "securityContext")
        if not policy.allow_privileged:
            if ctx.get("privileged") is True:
                out.append(((*sc, "privileged"), "privileged containers are not allowed by policy"))
            for i, cap in enumerate((ctx.get("capabilities") or {}).get("add") or []):
                if str(cap).upper().removeprefix("CAP_") not in allowed_caps:
                    out.append(
                        (
                            (*sc, "capabilities", "add", i),
                            f"capability {cap!r} is not in policy.allowedCapabilities "
                            f"({caps_name()})",
                        )
                    )
        for j, port in enumerate(c.get("ports") or []):
            if isinstance(port, Mapping) and port.get("hostPort"):
                out.append(
                    (
                        (*where, "ports", j, "hostPort"),
                        f"hostPort {port['hostPort']} is not allowed by {profile}",
                    )
                )
        mount = ctx.get("procMount")
        if mount not in (None, "Default"):
            out.append(((*sc, "procMount"), f"procMount {mount!r} is not allowed by {profile}"))
    for where, ctx in contexts():
        for field, unconfined in (("appArmorProfile", "AppArmor"), ("seccompProfile", "seccomp")):
            kind = (ctx.get(field) or {}).get("type")
            bad = kind not in (None, "RuntimeDefault", "Localhost")
            if bad:
                out.append(
                    (
                        (*where, field, "type"),
                        f"{unconfined} profile {kind!r} is not allowed by {profile}",
                    )
                )
        selinux = ctx.get("seLinuxOptions") or {}
        if (
            selinux.get("type", "") not in _SELINUX_TYPES
            or selinux.get("user")
            or selinux.get("role")
        ):
            out.append(
                ((*where, "seLinuxOptions"), f"these SELinux options are not allowed by {profile}")
            )
    for key, value in annotations.items():
        if key.startswith(_APPARMOR_ANNOTATION) and not (
            value == "runtime/default" or str(value).startswith("localhost/")
        ):
            out.append(
                (
                    ("metadata", "annotations", key),
                    f"AppArmor profile {value!r} is not allowed by {profile}",
                )
            )
        if key.startswith(_SECCOMP_ANNOTATIONS) and value == "unconfined":
            out.append(
                (
                    ("metadata", "annotations", key),
                    f"seccomp profile {value!r} is not allowed by {profile}",
                )
            )
    for i, sysctl in enumerate(pod_ctx.get("sysctls") or []):
        name = sysctl.get("name") if isinstance(sysctl, Mapping) else None
        if name not in _SAFE_SYSCTLS:
            out.append(
                (
                    ("spec", "securityContext", "sysctls", i),
                    f"sysctl {name!r} is not allowed by {profile}",
                )
            )
    for i, volume in enumerate(spec.get("volumes") or []):
        sources = [k for k in volume if k != "name"]
        if "hostPath" in sources and not policy.allow_host_path:
            path = (volume.get("hostPath") or {}).get("path")
            out.append(
                (
                    ("spec", "volumes", i, "hostPath"),
                    f"mounts hostPath {path!r}, which policy does not allow",
                )
            )
        elif level is PodSecurityLevel.RESTRICTED:
            for source in sources:
                if source not in _RESTRICTED_VOLUMES and not (
                    source == "hostPath" and policy.allow_host_path
                ):
                    out.append(
                        (
                            ("spec", "volumes", i, source),
                            f"{source} volumes are not allowed by {profile}",
                        )
                    )
    if level is not PodSecurityLevel.RESTRICTED:
        return out

    # restricted
    pod_non_root = pod_ctx.get("runAsNonRoot") is True
    pod_seccomp = (pod_ctx.get("seccompProfile") or {}).get("type") in (
        "RuntimeDefault",
        "Localhost",
    )
    for where, c in containers:
        ctx = c.get("securityContext") or {}
        sc = (*where, "securityContext")
        escalation = ctx.get("allowPrivilegeEscalation")
        if escalation is not False and not (
            policy.allow_privileged and ctx.get("privileged") is True
        ):
            now = "it is not set" if escalation is None else f"it is {escalation!r}"
            out.append(
                ((*sc, "allowPrivilegeEscalation"), f"must be false under {profile} ({now})")
            )
        if not pod_non_root and "runAsNonRoot" not in ctx:
            out.append(((*sc, "runAsNonRoot"), f"must be true under {profile} (it is not set)"))
        if not pod_seccomp and "seccompProfile" not in ctx:
            out.append(
                (
                    (*sc, "seccompProfile"),
                    f"must be RuntimeDefault or Localhost under {profile} (it is not set)",
                )
            )
        drop = [str(d).upper() for d in (ctx.get("capabilities") or {}).get("drop") or []]
        if "ALL" not in drop:
            out.append(((*sc, "capabilities", "drop"), f"must include ALL under {profile}"))
    return out


def check_pod_security(
    spec: Mapping[str, Any],
    provenance: Mapping[Path, Provenance],
    pod: Mapping[str, Any],
    *,
    policy: OrgPolicy,
) -> tuple[Violation, ...]:
    """:func:`pod_security_findings` of the pod rendered from ``spec``, each named by the
    field of the spec it came from (a connection's: its ``run.connections`` entry)."""
    out: list[Violation] = []
    for pod_path, message in pod_security_findings(pod, policy):
        origin = pod_field_origin(spec, pod, pod_path)
        if origin.connection is not None:
            named = f"connection {origin.connection!r}"
            if message.startswith("mounts hostPath"):
                message = f"{named} {message}"
            else:
                message = f"{named}: {dotted(pod_path[1:])}: {message}"
                if pod_path[1:2] == ("initContainers",) and pod_path[-1] == "runAsNonRoot":
                    message += (
                        "; the clone runs as run.container.securityContext.runAsUser when "
                        "that is a non-root UID"
                    )
        violation = Violation(dotted(origin.path), message, lookup(provenance, origin.path))
        if violation not in out:
            out.append(violation)
    return tuple(out)
