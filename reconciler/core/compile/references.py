"""References between files: a name written in one file, resolved to the file that defines
it. Presets (a project's shadow the org's of the same name), clusters, queues and
connections; when there is none, the ``unknown ... (did you mean ...?)`` message.

What must live here: every lookup by name, the specs built from the files found
(``ClusterSpec``, ``QueueSpec``, ``ConnectionSpec``, a preset as a patch), and the
repo-wide check of names that must exist even when nothing uses them yet.
"""

from __future__ import annotations

import difflib
from typing import Any

from reconciler.core.compile.index import Loaded, RepoIndex, get_in, name_of
from reconciler.core.merge import Locate, Path
from reconciler.core.model import ClusterFile, ConnectionFile, PresetFile, QueueFile, to_snake
from reconciler.core.quantity import parse_quantity
from reconciler.core.types import (
    ClusterSpec,
    ConnectionSpec,
    Location,
    QueueSpec,
    QueueStrategy,
    RunKind,
)

_PRESET_FIELDS = ("namespace", "queue", "run")
_FOLDERS = {"Cluster": "clusters", "Queue": "queues", "Connection": "connections"}


def unknown_name(repo: RepoIndex, what: str, name: str, kind: str) -> str:
    """``unknown queue 'x': no queues/x.yaml (did you mean 'y'?)``."""
    close = difflib.get_close_matches(name, sorted(repo.named[kind]), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown {what} {name!r}: no {_FOLDERS[kind]}/{name}.yaml{hint}"


def unknown_preset(project: str, name: str) -> str:
    return (
        f"unknown preset {name!r}: no projects/{project}/presets/{name}.yaml or presets/{name}.yaml"
    )


def unknown_org_preset(name: str) -> str:
    """An org default preset must be an org preset: it applies to every project."""
    return f"unknown preset {name!r}: no presets/{name}.yaml"


# --- lookups ------------------------------------------------------------------------------


def find_preset(repo: RepoIndex, project: str, name: str) -> Loaded[PresetFile] | None:
    """The project's preset ``name``, else the org's."""
    path = repo.projects[project].presets.get(name) if project in repo.projects else None
    if path is not None:
        return repo.load(path, "Preset", name)
    return repo.get("Preset", name)


def preset_is_defined(repo: RepoIndex, project: str, name: str) -> bool:
    return name in repo.projects[project].presets or name in repo.named["Preset"]


def preset_patch(loaded: Loaded[PresetFile]) -> tuple[dict[str, Any], Locate]:
    """A preset as the patch it applies (``connections`` is short for ``run.connections``),
    and where each of its paths is written."""
    data = loaded.doc.data
    patch = {k: data[k] for k in _PRESET_FIELDS if k in data}
    shorthand = "connections" in data
    if shorthand:
        run = dict(patch.get("run") or {})
        run["connections"] = data["connections"]
        patch["run"] = run
    doc = loaded.doc

    def locate(path: Path) -> tuple[int, int]:
        if shorthand and path[:2] == ("run", "connections"):
            path = ("connections", *path[2:])
        loc = doc.loc(path)
        return loc.line, loc.col

    return patch, locate


def org_default_presets(repo: RepoIndex) -> list[tuple[str, Location]]:
    """``defaults.presets`` of reconciler.yaml and where each is named: applied to every
    operation, before the project's ``defaults.presets``."""
    org = repo.org()
    defaults = org.model.defaults if org is not None else None
    if org is None or defaults is None or not defaults.presets:
        return []
    return [(n, org.doc.loc(("defaults", "presets", i))) for i, n in enumerate(defaults.presets)]


def find_cluster(repo: RepoIndex, name: str) -> ClusterSpec | None:
    loaded = repo.get("Cluster", name)
    if loaded is None:
        return None
    m: ClusterFile = loaded.model
    return ClusterSpec(
        name=name,
        concurrency=m.concurrency,
        kubeconfig=dict(loaded.doc.data["kubeconfig"]),
        context=m.context,
    )


def find_queue(repo: RepoIndex, name: str) -> QueueSpec | None:
    """The queue ``name``; None when it is not defined, invalid, or names an unknown
    cluster (reported once, at the queue file)."""
    loaded = repo.get("Queue", name)
    if loaded is None:
        return None
    m: QueueFile = loaded.model
    members = _queue_clusters(repo, loaded)
    if members is None:
        return None
    return QueueSpec(
        name=name,
        cluster=members[0],
        priority=m.priority,
        concurrency=m.concurrency,
        quota={k: parse_quantity(v) for k, v in (m.quota or {}).items()},
        kinds=frozenset(RunKind(k) for k in m.kinds) if m.kinds else frozenset(RunKind),
        strategy=QueueStrategy(m.strategy),
        paused=m.paused,
        source=loaded.path,
        clusters=tuple(m.clusters) if m.clusters is not None else (),
        cluster_quota={
            c: {r: parse_quantity(v) for r, v in caps.items()}
            for c, caps in (m.cluster_quota or {}).items()
        },
        require_capacity=m.require_capacity,
    )


def _queue_clusters(repo: RepoIndex, loaded: Loaded[QueueFile]) -> tuple[str, ...] | None:
    """A queue's clusters in choice order (one for a single-cluster queue), each defined;
    None (each problem reported once, at its line) when they are not."""
    m = loaded.model
    doc = loaded.doc
    fail = repo.errors.add_once
    if (m.cluster is None) == (m.clusters is None):
        where = doc.loc(("clusters",), key=True) if m.clusters is not None else doc.loc(())
        fail(where, "set exactly one of 'cluster' or 'clusters'")
        return None
    ok = True
    if m.cluster is not None:
        for key in ("clusterQuota", "requireCapacity"):
            if key in doc.data:
                fail(doc.loc((key,), key=True), f"{key} is for a fleet queue: set 'clusters'")
                ok = False
        names: tuple[str, ...] = (m.cluster,)
        paths: list[Path] = [("cluster",)]
    else:
        names = tuple(m.clusters or ())
        paths = [("clusters", i) for i in range(len(names))]
    seen: set[str] = set()
    for name, path in zip(names, paths, strict=True):
        if name in seen:
            fail(doc.loc(path), f"cluster {name!r} is listed twice")
            ok = False
        seen.add(name)
        if find_cluster(repo, name) is None:
            fail(doc.loc(path), unknown_name(repo, "cluster", name, "Cluster"))
            ok = False
    for name in m.cluster_quota or {}:
        if name not in seen:
            close = difflib.get_close_matches(name, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            fail(
                doc.loc(("clusterQuota", name), key=True),
                f"clusterQuota names {name!r}, which is not in the queue's clusters{hint}",
            )
            ok = False
    return names if ok else None


def find_connection(repo: RepoIndex, name: str) -> ConnectionSpec | None:
    loaded = repo.get("Connection", name)
    if loaded is None:
        return None
    m: ConnectionFile = loaded.model
    kind = m.type
    source = getattr(m, to_snake(kind))
    return ConnectionSpec(
        name=name,
        type=kind,
        spec=source.model_dump(by_alias=True, exclude_none=True),
        source=loaded.path,
    )


# --- the whole repo -----------------------------------------------------------------------


def check_references(repo: RepoIndex) -> None:
    """Names that must exist even when nothing uses them yet."""
    errors = repo.errors
    queues = repo.named["Queue"]

    def unknown_queue(location: Location, queue: str) -> None:
        errors.add_once(location, unknown_name(repo, "queue", queue, "Queue"))

    org = repo.org()
    if org is not None:
        m = org.model
        if m.defaults and m.defaults.queue and queues.get(m.defaults.queue) is None:
            unknown_queue(org.doc.loc(("defaults", "queue")), m.defaults.queue)
        for i, q in enumerate((m.policy.allowed_queues if m.policy else None) or []):
            if queues.get(q) is None:
                unknown_queue(org.doc.loc(("policy", "allowedQueues", i)), q)
        for p, location in org_default_presets(repo):
            if p not in repo.named["Preset"]:
                errors.add_once(location, unknown_org_preset(p))
    for name in sorted(repo.projects):
        proj = repo.project(name)
        if proj is None:
            continue
        pm = proj.model
        if pm.defaults and pm.defaults.queue and queues.get(pm.defaults.queue) is None:
            unknown_queue(proj.doc.loc(("defaults", "queue")), pm.defaults.queue)
        for i, q in enumerate(pm.allowed_queues or []):
            if queues.get(q) is None:
                unknown_queue(proj.doc.loc(("allowedQueues", i)), q)
        for i, p in enumerate((pm.defaults.presets if pm.defaults else None) or []):
            if not preset_is_defined(repo, name, p):
                errors.add(proj.doc.loc(("defaults", "presets", i)), unknown_preset(name, p))
    presets = [*repo.named["Preset"].values()] + [
        p for proj_entry in repo.projects.values() for p in proj_entry.presets.values()
    ]
    for path in presets:
        loaded = repo.load(path, "Preset", name_of(path))
        if loaded is None:
            continue
        patch, locate = preset_patch(loaded)
        queue = patch.get("queue")
        if queue is not None and queues.get(queue) is None:
            unknown_queue(Location(path, *locate(("queue",))), queue)
        for i, conn in enumerate(get_in(patch, "run", "connections") or []):
            if repo.named["Connection"].get(conn) is None:
                location = Location(path, *locate(("run", "connections", i)))
                errors.add_once(location, unknown_name(repo, "connection", conn, "Connection"))
