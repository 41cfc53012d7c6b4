"""Org policy, checked on the compiled operation *after* the merge.

A preset is not a security boundary: whatever layer set a field, the result is what runs.
Each violation names the field and the layer that set it (its provenance).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from reconciler.core.merge import Path, dotted, lookup
from reconciler.core.model import duration_seconds
from reconciler.core.quantity import format_quantity
from reconciler.core.types import (
    BASELINE_CAPABILITIES,
    ConnectionSpec,
    OrgPolicy,
    Provenance,
    QueueSpec,
)


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
    connections: Mapping[str, ConnectionSpec],
) -> tuple[Violation, ...]:
    """Every policy violation of one compiled operation, in a stable order."""
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
    # 3. Per-operation resource ceiling.
    for resource, ceiling in sorted(policy.max_resources.items()):
        total = requests.get(resource, Decimal(0))
        if total > ceiling:
            req: Path = ("run", "container", "resources", "requests", resource)
            lim: Path = ("run", "container", "resources", "limits", resource)
            field = req if _get(spec, req) is not None else lim
            if _get(spec, field) is None:  # set only by an init container or a sidecar
                field = _extra_resource_field(spec, resource) or field
            violation(
                field,
                f"{resource} {format_quantity(total)} exceeds policy.maxResources "
                f"{format_quantity(ceiling)}",
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
    # 5. Privileged containers and added capabilities (Pod Security baseline by default).
    ctx: Path = ("run", "container", "securityContext")
    if not policy.allow_privileged:
        allowed_caps = (
            "the Pod Security baseline set"
            if policy.allowed_capabilities == BASELINE_CAPABILITIES
            else ", ".join(sorted(policy.allowed_capabilities)) or "none"
        )
        if _get(spec, (*ctx, "privileged")) is True:
            violation((*ctx, "privileged"), "privileged containers are not allowed by policy")
        for i, cap in enumerate(_get(spec, (*ctx, "capabilities", "add")) or []):
            if str(cap).upper().removeprefix("CAP_") not in policy.allowed_capabilities:
                violation(
                    (*ctx, "capabilities", "add", i),
                    f"capability {cap!r} is not in policy.allowedCapabilities ({allowed_caps})",
                )
    # 6. Root user, when the org refuses it.
    if not policy.allow_run_as_root:
        if _get(spec, (*ctx, "runAsUser")) == 0:
            violation((*ctx, "runAsUser"), "running as root (UID 0) is not allowed by policy")
        if _get(spec, (*ctx, "runAsNonRoot")) is False:
            violation((*ctx, "runAsNonRoot"), "runAsNonRoot: false is not allowed by policy")
    # 7. hostPath volumes (through connections).
    if not policy.allow_host_path:
        for i, name in enumerate(_get(spec, ("run", "connections")) or []):
            conn = connections.get(name)
            if conn is not None and conn.type == "volume" and conn.spec.get("hostPath"):
                violation(
                    ("run", "connections", i),
                    f"connection {name!r} mounts hostPath {conn.spec['hostPath']!r}, "
                    "which policy does not allow",
                )
    # 8. What presets may set beyond the main container: service account, image pull
    #    secrets, volumes, init containers and sidecars, retries and TTL.
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
    container; init containers and sidecars are held to the main container's rules."""
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
    allowed_caps = (
        "the Pod Security baseline set"
        if policy.allowed_capabilities == BASELINE_CAPABILITIES
        else ", ".join(sorted(policy.allowed_capabilities)) or "none"
    )
    for base, _container in _extra_containers(spec):
        ctx: Path = (*base, "securityContext")
        if not policy.allow_privileged:
            if _get(spec, (*ctx, "privileged")) is True:
                out.append(
                    ((*ctx, "privileged"), "privileged containers are not allowed by policy")
                )
            for j, cap in enumerate(_get(spec, (*ctx, "capabilities", "add")) or []):
                if str(cap).upper().removeprefix("CAP_") not in policy.allowed_capabilities:
                    out.append(
                        (
                            (*ctx, "capabilities", "add", j),
                            f"capability {cap!r} is not in policy.allowedCapabilities "
                            f"({allowed_caps})",
                        )
                    )
        if not policy.allow_run_as_root:
            if _get(spec, (*ctx, "runAsUser")) == 0:
                out.append(
                    ((*ctx, "runAsUser"), "running as root (UID 0) is not allowed by policy")
                )
            if _get(spec, (*ctx, "runAsNonRoot")) is False:
                out.append(((*ctx, "runAsNonRoot"), "runAsNonRoot: false is not allowed by policy"))
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
