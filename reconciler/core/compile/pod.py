"""The pod parts a preset may set beyond the main container: ``run.volumes``,
``volumeMounts``, ``run.initContainers`` and ``run.sidecars``. They are checked on the
merged spec (a mount may name a volume another layer adds), the same way for an operation
and for each workflow child, and their resources join the operation's requests.

What must live here: the checks Kubernetes would otherwise make at create time on these
parts (unique volume and container names, mounts that name a volume, one mount per path
in each container) and the pod's effective requests with init containers and sidecars
(``quantity.pod_requests``). Policy on them is ``core/compile/policy.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from reconciler.core.compile.errors import Errors, at
from reconciler.core.compile.index import get_in
from reconciler.core.compile.merge import Path, ProvMap, dotted
from reconciler.core.quantity import QuantityError, format_quantity, parse_quantity, pod_requests
from reconciler.core.types import ConnectionSpec, Location

# The extra containers, in the order they are rendered into ``initContainers``.
EXTRA_CONTAINERS = ("initContainers", "sidecars")


def extra_containers(spec: Mapping[str, Any]) -> list[tuple[Path, Mapping[str, Any]]]:
    """``(path, container)`` of every init container then every sidecar of ``spec``."""
    out: list[tuple[Path, Mapping[str, Any]]] = []
    for section in EXTRA_CONTAINERS:
        for i, container in enumerate(get_in(spec, "run", section) or []):
            if isinstance(container, dict):
                out.append((("run", section, i), container))
    return out


def _is_extended(resource: str) -> bool:
    prefix, _, _ = resource.rpartition("/")
    return bool(prefix) and not prefix.endswith("kubernetes.io")


# Where a container's request (``"requests"``) or limit (``"limits"``) of a resource is set.
Locate = Callable[[str, str], Location]


def _at(where: Location) -> Locate:
    """Every request and limit of a container reported at one place."""
    return lambda _kind, _resource: where


def container_totals(
    resources: Mapping[str, Any], locate: Locate, errors: Errors
) -> dict[str, Decimal]:
    """One container's total per resource: the request, or the limit where only a limit is
    set; reports what Kubernetes would refuse (a request over its limit, a fractional or
    overcommitted extended resource such as ``nvidia.com/gpu``)."""
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    totals: dict[str, Decimal] = {}
    for resource in sorted({*requests, *limits}):
        where = locate("requests" if resource in requests else "limits", resource)
        try:
            req = parse_quantity(requests[resource]) if resource in requests else None
            lim = parse_quantity(limits[resource]) if resource in limits else None
        except QuantityError as exc:  # pragma: no cover - the schema validated these
            errors.add(where, str(exc))
            continue
        if req is not None and lim is not None and req > lim:
            errors.add(
                where,
                f"request for {resource} ({format_quantity(req)}) exceeds its limit "
                f"({format_quantity(lim)})",
            )
        if _is_extended(resource):
            for amount in (req, lim):
                if amount is not None and amount != amount.to_integral_value():
                    errors.add(where, f"{resource} must be a whole number, not {amount}")
                    break
            if req is not None and lim is not None and req != lim:
                errors.add(where, f"requests and limits of {resource} must be equal")
        total = req if req is not None else lim
        assert total is not None
        totals[resource] = total
    return totals


def pod_total(
    spec: Mapping[str, Any],
    prov: ProvMap,
    fallback: Location,
    errors: Errors,
    main: Mapping[str, Decimal],
) -> dict[str, Decimal]:
    """The operation's requests: the main container's (``main``) with its init containers
    and sidecars counted as the scheduler counts them."""
    extra = extra_containers(spec)
    if not extra:
        return dict(main)
    init: list[tuple[Mapping[str, Decimal], bool]] = []
    for path, container in extra:
        resources = container.get("resources") or {}
        totals = container_totals(resources, _at(at(prov, (*path, "resources"), fallback)), errors)
        init.append((totals, path[1] == "sidecars"))
    return pod_requests([main], init)


def _connection_mounts(names: list[str], connections: Mapping[str, ConnectionSpec]) -> list[str]:
    """Mount paths the renderer gives the main container for its connections."""
    out: list[str] = []
    for name in names:
        conn = connections.get(name)
        if conn is None:
            continue
        if conn.type == "git":
            out.append(str(conn.spec.get("mountPath", "/code")))
        elif conn.type in ("volume", "secret", "configMap") and conn.spec.get("mountPath"):
            out.append(str(conn.spec["mountPath"]))
    return out


def used_connections(spec: Mapping[str, Any]) -> list[str]:
    """The connections the main container gets: ``run.connections`` in order, then
    ``run.outputs`` when it is not one of them (its bucket's credentials or its volume are
    what the run writes its outputs with)."""
    used = list(dict.fromkeys(get_in(spec, "run", "connections") or []))
    outputs = get_in(spec, "run", "outputs")
    if isinstance(outputs, str) and outputs not in used:
        used.append(outputs)
    return used


def check_pod(
    spec: Mapping[str, Any],
    prov: ProvMap,
    fallback: Location,
    errors: Errors,
    connections: Mapping[str, ConnectionSpec],
) -> None:
    """Report what Kubernetes would refuse at create time in the volumes, mounts, init
    containers and sidecars of a merged spec."""
    volumes: dict[str, Path] = {}
    for i, volume in enumerate(get_in(spec, "run", "volumes") or []):
        path: Path = ("run", "volumes", i)
        name = volume.get("name") if isinstance(volume, dict) else None
        if not isinstance(name, str):
            continue
        if name in volumes:
            first = at(prov, (*volumes[name], "name"), fallback)
            errors.add(
                at(prov, (*path, "name"), fallback),
                f"run.volumes: two volumes are named {name!r} (the other is at {first})",
            )
        volumes.setdefault(name, path)

    used = used_connections(spec)
    main_paths = _connection_mounts(used, connections)
    if get_in(spec, "run", "container", "shmSize"):
        main_paths.append("/dev/shm")
    containers: list[tuple[Path, Mapping[str, Any], list[str]]] = [
        (("run", "container"), get_in(spec, "run", "container") or {}, main_paths)
    ]
    containers += [(p, c, []) for p, c in extra_containers(spec)]
    for base, container, taken in containers:
        seen = {p: "a connection" for p in taken}
        for j, mount in enumerate(container.get("volumeMounts") or []):
            if not isinstance(mount, dict):
                continue
            where: Path = (*base, "volumeMounts", j)
            label = dotted(base)
            if mount.get("name") not in volumes:
                known = ", ".join(sorted(volumes)) or "none"
                errors.add(
                    at(prov, (*where, "name"), fallback),
                    f"{label}: volume mount {mount.get('name')!r} names no volume of "
                    f"run.volumes (volumes: {known})",
                )
            mount_path = mount.get("mountPath")
            if isinstance(mount_path, str):
                if mount_path in seen:
                    errors.add(
                        at(prov, (*where, "mountPath"), fallback),
                        f"{label}: {mount_path!r} is mounted twice in one container "
                        f"(also by {seen[mount_path]})",
                    )
                seen.setdefault(mount_path, f"volume mount {mount.get('name')!r}")

    git_inits = {
        f"git-{n}"[:63]: n
        for n in used
        if (c := connections.get(n)) is not None and c.type == "git"
    }
    names: dict[str, Path] = {}
    for path, container in extra_containers(spec):
        name = container.get("name")
        if not isinstance(name, str):
            continue
        location = at(prov, (*path, "name"), fallback)
        if name in git_inits:
            errors.add(
                location,
                f"{dotted(path)}: container name {name!r} is taken by the checkout "
                f"of git connection {git_inits[name]!r}",
            )
        elif name in names:
            first = at(prov, (*names[name], "name"), fallback)
            errors.add(
                location,
                f"{dotted(path)}: two containers of the pod are named {name!r} "
                f"(the other is at {first})",
            )
        names.setdefault(name, path)
