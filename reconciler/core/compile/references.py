"""References between files: a name written in one file, resolved to the file that defines
it. Presets (a project's shadow the org's of the same name), clusters, queues and
connections; when there is none, the ``unknown ... (did you mean ...?)`` message.

What must live here: every lookup by name, the specs built from the files found
(``ClusterSpec``, ``QueueSpec``, ``ConnectionSpec``, a preset as a patch), and the
repo-wide check of names that must exist even when nothing uses them yet.
"""

from __future__ import annotations

import difflib
from decimal import Decimal
from typing import Any

from reconciler.core.compile.index import Loaded, RepoIndex, get_in, name_of, prices
from reconciler.core.compile.merge import Layer, Locate, Path
from reconciler.core.compile.model import (
    ClusterFile,
    CohortFile,
    ConnectionFile,
    FlavorFile,
    PresetFile,
    QueueFile,
    to_snake,
)
from reconciler.core.compile.notifications import commit_status, notify_rules
from reconciler.core.quantity import duration_seconds, format_quantity, parse_quantity
from reconciler.core.types import (
    BudgetPeriod,
    BudgetSpec,
    ClusterSpec,
    CohortSpec,
    ConnectionSpec,
    FlavorSpec,
    Location,
    QueueFlavor,
    QueueSpec,
    QueueStrategy,
    RunKind,
)

_PRESET_FIELDS = ("namespace", "queue", "priority", "run")
_FOLDERS = {
    "Cluster": "clusters",
    "Queue": "queues",
    "Connection": "connections",
    "Cohort": "cohorts",
    "Flavor": "flavors",
}


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
        return doc.pos(path)

    return patch, locate


def preset_layer(repo: RepoIndex, loaded: Loaded[PresetFile]) -> Layer:
    """The preset as the layer it applies, built once per compile: what it sets where an
    operation sets nothing is merged, with its provenance, once, and shared by every
    operation that applies it (``merge.Layer``)."""
    return repo.memoized(("Layer", loaded.path), lambda: _layer(repo, loaded))


def _layer(repo: RepoIndex, loaded: Loaded[PresetFile]) -> Layer:
    patch, locate = preset_patch(loaded)
    strategy = loaded.model.patch_strategy
    return Layer(
        patch,
        strategy,
        locate,
        loaded.path,
        f"preset {loaded.name} ({strategy})",
        share_value=repo.shared_value,
        share_provenance=repo.shared,
        sections=repo.sections,
    )


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
        prices=prices(m.prices),
        flavor_prices={f: prices(p) for f, p in sorted((m.flavor_prices or {}).items())},
    )


def find_flavor(repo: RepoIndex, name: str) -> FlavorSpec | None:
    """The flavor ``name``; None when it is not defined or invalid (a flavor with no
    ``nodeLabels`` is reported at its file by ``check_flavors``)."""
    loaded = repo.get("Flavor", name)
    if loaded is None:
        return None
    m: FlavorFile = loaded.model
    if not m.node_labels:
        return None
    return FlavorSpec(
        name=name,
        node_labels=dict(sorted(m.node_labels.items())),
        tolerations=tuple(
            t.model_dump(by_alias=True, exclude_none=True) for t in m.tolerations or ()
        ),
        description=m.description or "",
        source=loaded.path,
        location=loaded.doc.loc(("nodeLabels",), key=True),
    )


def find_queue(repo: RepoIndex, name: str) -> QueueSpec | None:
    """The queue ``name``; None when it is not defined, invalid, or names an unknown
    cluster (reported once, at the queue file). Built once per compile (every operation
    of the queue asks for it)."""
    return repo.memoized(("Queue", name), lambda: _find_queue(repo, name))


def _find_queue(repo: RepoIndex, name: str) -> QueueSpec | None:
    loaded = repo.get("Queue", name)
    if loaded is None:
        return None
    m: QueueFile = loaded.model
    members = _queue_clusters(repo, loaded)
    if members is None:
        return None
    quota = {k: parse_quantity(v) for k, v in (m.quota or {}).items()}
    borrowing, lending = _cohort_limits(repo, loaded, quota)
    flavors = _queue_flavors(repo, loaded, members)
    if flavors is None:
        return None
    budget = _budget(repo, loaded, m, members)
    return QueueSpec(
        name=name,
        cluster=members[0],
        priority=m.priority,
        concurrency=m.concurrency,
        quota=quota,
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
        max_pods=m.max_pods,
        start_timeout=duration_seconds(m.start_timeout) if m.start_timeout is not None else None,
        cohort=m.cohort,
        borrowing_limit=borrowing,
        lending_limit=lending,
        budget=budget,
        default_timeout=duration_seconds(m.default_timeout)
        if m.default_timeout is not None
        else None,
        flavors=flavors,
        fair_weight=Decimal(str(m.fair_sharing.weight)) if m.fair_sharing else Decimal(1),
    )


def _queue_flavors(
    repo: RepoIndex, loaded: Loaded[QueueFile], members: tuple[str, ...]
) -> tuple[QueueFlavor, ...] | None:
    """A queue's ``flavors``, in fallback order; None (each problem reported once, at its
    line) when they are not valid: ``quota`` beside them, an unknown or repeated flavor, a
    top-level limit or cap that belongs in a flavor, a per-flavor limit on a resource the
    flavor has no quota for, a cap on a cluster the queue does not list."""
    m = loaded.model
    doc = loaded.doc
    fail = repo.errors.add_once
    if m.flavors is None:
        return ()
    ok = True
    if m.quota is not None:
        fail(
            doc.loc(("quota",), key=True),
            "set 'quota' or 'flavors', not both: with flavors, each flavor has its quota",
        )
        ok = False
    for key in ("borrowingLimit", "lendingLimit", "clusterQuota"):
        if key in doc.data:
            fail(
                doc.loc((key,), key=True),
                f"{key} is per flavor in a queue with flavors: set it under each flavor",
            )
            ok = False
    out: list[QueueFlavor] = []
    seen: set[str] = set()
    for k, entry in enumerate(m.flavors):
        at = ("flavors", k)
        if entry.name in seen:
            fail(
                doc.loc((*at, "name")),
                f"flavor {entry.name!r} is listed twice: list each flavor once, in the "
                "order an operation tries them",
            )
            ok = False
            continue
        seen.add(entry.name)
        if repo.named["Flavor"].get(entry.name) is None:
            fail(doc.loc((*at, "name")), unknown_name(repo, "flavor", entry.name, "Flavor"))
            ok = False
            continue
        quota = {r: parse_quantity(v) for r, v in entry.quota.items()}
        borrowing, lending, valid = _limits(
            repo,
            loaded,
            at,
            entry.borrowing_limit,
            entry.lending_limit,
            quota,
            flavor=entry.name,
        )
        ok = ok and valid
        caps: dict[str, dict[str, Decimal]] = {}
        for cluster, written_caps in (entry.cluster_quota or {}).items():
            where = doc.loc((*at, "clusterQuota", cluster), key=True)
            if m.clusters is None:
                fail(where, "clusterQuota is for a fleet queue: set 'clusters'")
                ok = False
            elif cluster not in members:
                close = difflib.get_close_matches(cluster, members, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                fail(
                    where,
                    f"clusterQuota names {cluster!r}, which is not in the queue's clusters{hint}",
                )
                ok = False
            else:
                caps[cluster] = {r: parse_quantity(v) for r, v in written_caps.items()}
        out.append(QueueFlavor(entry.name, quota, borrowing, lending, caps))
    return tuple(out) if ok else None


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
            if repo.named["Cluster"].get(name) is None:  # else its own file's error says why
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


def _budget(
    repo: RepoIndex, loaded: Loaded[QueueFile], m: QueueFile, members: tuple[str, ...]
) -> BudgetSpec | None:
    """The queue's budget; a ``cost`` budget with no price on its cluster (a fleet queue:
    on any of its clusters) is an error at ``budget.resource`` (it could never spend
    anything)."""
    if m.budget is None:
        return None
    budget = BudgetSpec(
        limit=Decimal(str(m.budget.limit)),
        per=BudgetPeriod(m.budget.per),
        resource=m.budget.resource,
    )
    if budget.hours_of is None:
        org = repo.org_settings()
        clusters = [find_cluster(repo, name) for name in members]
        # an invalid reconciler.yaml or Cluster file may set prices: its own error says so
        unknown = (repo.org_path is not None and repo.org() is None) or None in clusters
        if not unknown and not org.prices and not any(c is not None and c.prices for c in clusters):
            where = (
                ("budget", "resource")
                if "resource" in (loaded.doc.data.get("budget") or {})
                else ("budget",)
            )
            repo.errors.add_once(
                loaded.doc.loc(where),
                "a cost budget needs prices: set 'prices' in reconciler.yaml or in cluster "
                f"{' or '.join(repr(c) for c in members)}, or budget a resource's hours "
                "(e.g. 'nvidia.com/gpu-hours')",
            )
    return budget


def _cohort_limits(
    repo: RepoIndex, loaded: Loaded[QueueFile], quota: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A queue's ``borrowingLimit`` and ``lendingLimit`` (``_limits``), and an unknown
    cohort reported at its line."""
    m = loaded.model
    doc = loaded.doc
    if m.cohort is not None and repo.named["Cohort"].get(m.cohort) is None:
        repo.errors.add_once(doc.loc(("cohort",)), unknown_name(repo, "cohort", m.cohort, "Cohort"))
    borrowing, lending, _ = _limits(
        repo, loaded, (), m.borrowing_limit, m.lending_limit, quota, flavor=None
    )
    return borrowing, lending


def _limits(
    repo: RepoIndex,
    loaded: Loaded[QueueFile],
    at: Path,
    borrowing: dict[str, Any] | None,
    lending: dict[str, Any] | None,
    quota: dict[str, Any],
    *,
    flavor: str | None,
) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """The borrowing and lending limits written at ``at`` (the queue, or one of its
    flavors), and whether all were valid; each problem reported at its line: a limit
    without a cohort, a limit on a resource without quota, a lending limit above the
    quota."""
    doc = loaded.doc
    cohort = loaded.model.cohort
    fail = repo.errors.add_once
    whose = "this queue" if flavor is None else f"flavor {flavor!r} of this queue"
    quota_of = "quota" if flavor is None else f"{flavor} quota"
    ok = True
    limits: list[dict[str, Any]] = []
    for field, written in (("borrowingLimit", borrowing), ("lendingLimit", lending)):
        out: dict[str, Any] = {}
        for resource, raw in (written or {}).items():
            where = doc.loc((*at, field, resource), key=True)
            amount = parse_quantity(raw)
            if cohort is None:
                fail(
                    where, f"{field} needs a cohort: set 'cohort' to share quota with other queues"
                )
            elif resource not in quota:
                have = ", ".join(sorted(quota)) or "none"
                fail(
                    where,
                    f"{field} on {resource}, which {whose} has no quota for "
                    f"(its quota resources: {have})",
                )
            elif field == "lendingLimit" and amount > quota[resource]:
                fail(
                    doc.loc((*at, field, resource)),
                    f"lendingLimit of {resource} is {format_quantity(amount)}, more than the "
                    f"queue's {quota_of} of {format_quantity(quota[resource])}: a queue lends only "
                    "its own quota",
                )
            else:
                out[resource] = amount
                continue
            ok = False
        limits.append(out)
    return limits[0], limits[1], ok


def find_cohort(repo: RepoIndex, name: str) -> CohortSpec | None:
    loaded = repo.get("Cohort", name)
    if loaded is None:
        return None
    m: CohortFile = loaded.model
    return CohortSpec(
        name=name,
        max_borrow_seconds=duration_seconds(m.max_borrow_duration),
        quota={k: parse_quantity(v) for k, v in (m.quota or {}).items()},
        description=m.description or "",
        source=loaded.path,
    )


def check_cohorts(repo: RepoIndex) -> None:
    """The queues of one cohort share their clusters: all on the same cluster, or all fleet
    queues over the same clusters (in any order). Each queue that differs from the first
    member (by name) is an error at its ``cluster`` (or ``clusters``)."""
    first: dict[str, tuple[str, frozenset[str], bool]] = {}  # cohort -> (queue, clusters, fleet)
    shared: dict[str, set[str]] = {}  # cohort -> the resources its queues have quota for
    flavored_first: dict[str, tuple[str, bool]] = {}  # cohort -> (first queue, has flavors)
    for name in sorted(repo.named["Queue"]):
        loaded = repo.get("Queue", name)
        if loaded is None or loaded.model.cohort is None:
            continue
        m: QueueFile = loaded.model
        cohort = m.cohort
        assert cohort is not None
        shared.setdefault(cohort, set()).update(m.quota or {})
        for entry in m.flavors or ():
            shared[cohort].update(entry.quota)
        flavored = m.flavors is not None
        kind_seen = flavored_first.setdefault(cohort, (name, flavored))
        if kind_seen[1] != flavored:
            where = loaded.doc.loc(("flavors",) if flavored else ("quota",), key=True)
            if not flavored and "quota" not in loaded.doc.data:
                where = loaded.doc.loc(("cohort",))
            has = "has flavors" if kind_seen[1] else "has no flavors"
            repo.errors.add_once(
                where,
                f"queue {name!r} is in cohort {cohort!r}, whose queue {kind_seen[0]!r} {has}: "
                "a cohort's queues all give their quota per flavor, or none does (what they "
                "lend each other must line up)",
            )
        fleet = m.clusters is not None
        if fleet:
            clusters = frozenset(m.clusters or ())
        elif m.cluster is not None:
            clusters = frozenset((m.cluster,))
        else:
            continue  # neither: reported at the queue already
        seen = first.setdefault(cohort, (name, clusters, fleet))
        if seen[1:] == (clusters, fleet):
            continue
        where = loaded.doc.loc(("clusters",) if fleet else ("cluster",))
        other = ", ".join(sorted(seen[1]))
        if seen[2] and fleet:
            what = f"is a fleet queue over {other}"
            rule = "the fleet queues of one cohort must be over the same clusters"
        elif seen[2]:
            what = f"is a fleet queue over {other}"
            rule = "a cohort's queues are all on one cluster or all fleet queues over the same ones"
        elif fleet:
            what = f"is on cluster {other!r}"
            rule = "a cohort's queues are all on one cluster or all fleet queues over the same ones"
        else:
            what = f"is on cluster {other!r}"
            rule = "the queues of one cohort must be on the same cluster"
        repo.errors.add_once(
            where, f"queue {name!r} is in cohort {cohort!r}, whose queue {seen[0]!r} {what}: {rule}"
        )
    for name in sorted(repo.named["Cohort"]):
        cohort_file = repo.get("Cohort", name)
        if cohort_file is None:
            continue
        cm: CohortFile = cohort_file.model
        for resource in cm.quota or {}:
            if resource not in shared.get(name, set()):
                repo.errors.add_once(
                    cohort_file.doc.loc(("quota", resource), key=True),
                    f"cohort {name!r} caps {resource}, but none of its queues has a quota "
                    "for it: the cap would limit nothing",
                )


def check_flavors(repo: RepoIndex) -> None:
    """Every flavor selects nodes (``nodeLabels``), and every flavor price names a flavor
    (reconciler.yaml's and each cluster's ``flavorPrices``)."""
    for name in sorted(repo.named["Flavor"]):
        loaded = repo.get("Flavor", name)
        if loaded is None or loaded.model.node_labels:
            continue
        where = ("nodeLabels",) if "nodeLabels" in loaded.doc.data else ()
        repo.errors.add_once(
            loaded.doc.loc(where),
            f"flavor {name!r} has no nodeLabels: set the labels its nodes carry, e.g. "
            "nodeLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3} (a flavor is the "
            "nodes with those labels)",
        )
    places: list[tuple[Loaded[Any], Any]] = []
    org = repo.org()
    if org is not None:
        places.append((org, org.model.flavor_prices))
    for name in sorted(repo.named["Cluster"]):
        cluster = repo.get("Cluster", name)
        if cluster is not None:
            places.append((cluster, cluster.model.flavor_prices))
    for loaded, listed in places:
        for flavor in listed or {}:
            if repo.named["Flavor"].get(flavor) is None:
                repo.errors.add_once(
                    loaded.doc.loc(("flavorPrices", flavor), key=True),
                    "flavorPrices names an " + unknown_name(repo, "flavor", flavor, "Flavor"),
                )


def find_connection(repo: RepoIndex, name: str) -> ConnectionSpec | None:
    """The connection ``name``; None when it is not defined or invalid. Built once per
    compile (every operation that mounts it asks for it)."""
    return repo.memoized(("Connection", name), lambda: _find_connection(repo, name))


def _find_connection(repo: RepoIndex, name: str) -> ConnectionSpec | None:
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


# Where a run's outputs go: under a bucket's URL or a volume's mountPath, which the run must
# be able to write.
OUTPUTS_TYPES = ("bucket", "volume")


def outputs_problem(repo: RepoIndex, name: str) -> str | None:
    """Why connection ``name`` cannot take runs' outputs (``run.outputs``,
    ``defaults.outputs``), or None (also when its file is invalid: its own error says why)."""
    if repo.named["Connection"].get(name) is None:
        return unknown_name(repo, "outputs connection", name, "Connection")
    conn = find_connection(repo, name)
    if conn is None:
        return None
    if conn.type not in OUTPUTS_TYPES:
        return (
            f"outputs connection {name!r} is a {conn.type} connection: outputs go to a "
            "bucket or a volume"
        )
    if conn.type == "volume" and conn.spec.get("readOnly"):
        return f"outputs connection {name!r} is mounted readOnly: runs could not write to it"
    return None


def connection_file(repo: RepoIndex, name: str) -> ConnectionFile | None:
    """The connection file ``name`` as loaded; None when it is not defined or invalid."""
    loaded = repo.get("Connection", name)
    return loaded.model if loaded is not None else None


def check_notifications(repo: RepoIndex) -> None:
    """The org's and the projects' ``notifications``, and ``commitStatus``: the secret
    connections they name exist and are ``secret`` ones; the commit status has a cluster."""

    def connection(name: str) -> ConnectionFile | None:
        return connection_file(repo, name)

    def unknown(name: str) -> str:
        return unknown_name(repo, "connection", name, "Connection")

    def unknown_cluster(name: str) -> str:
        return unknown_name(repo, "cluster", name, "Cluster")

    report = repo.errors.add_once
    org = repo.org()
    if org is not None:
        notify_rules(org.doc, org.model.notifications, connection, unknown, report)
        clusters = sorted(repo.named["Cluster"])
        commit_status(
            org.doc, org.model.commit_status, clusters, connection, unknown, unknown_cluster, report
        )
    for name in sorted(repo.projects):
        proj = repo.project(name)
        if proj is not None:
            notify_rules(proj.doc, proj.model.notifications, connection, unknown, report)


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
        if m.defaults and m.defaults.outputs:
            wrong = outputs_problem(repo, m.defaults.outputs)
            if wrong:
                errors.add_once(org.doc.loc(("defaults", "outputs")), wrong)
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
        if pm.defaults and pm.defaults.outputs:
            wrong = outputs_problem(repo, pm.defaults.outputs)
            if wrong:
                errors.add_once(proj.doc.loc(("defaults", "outputs")), wrong)
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
        outputs = get_in(patch, "run", "outputs")
        if isinstance(outputs, str) and (wrong := outputs_problem(repo, outputs)):
            errors.add_once(Location(path, *locate(("run", "outputs"))), wrong)
