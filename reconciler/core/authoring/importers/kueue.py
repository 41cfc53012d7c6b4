"""Kueue manifests (``kueue.x-k8s.io`` v1beta1 and v1beta2) to queues, flavors, cohorts and
projects (pure).

ClusterQueue → Queue, ResourceFlavor → Flavor, Cohort (and every cohort a ClusterQueue
names) → Cohort, LocalQueue → its namespace's project (``allowedQueues``,
``defaults.queue``). What has no equivalent is reported at its line: preemption (we never
preempt), admission checks, topology-aware scheduling, fair-sharing settings that differ,
WorkloadPriorityClass (no priority classes: an operation's own ``priority``). The table is
docs/from-kueue.md.

What must live here: the conversion of each Kueue kind, and the reports of what has no
equivalent, each at its ``file:line:col``. The files are read and written by
``cli/import_cmd.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.core.authoring.importers import (
    ImportResult,
    Report,
    Source,
    Target,
    dns_label,
    parse_all,
    render,
    value_kind,
)
from reconciler.core.load import Document, PathKey
from reconciler.core.quantity import parse_quantity

GROUP = "kueue.x-k8s.io"
VERSIONS = ("v1beta1", "v1beta2")
KINDS = ("ClusterQueue", "LocalQueue", "ResourceFlavor", "Cohort", "WorkloadPriorityClass")
DEFAULT_MAX_BORROW = "2h"
NEVER_PREEMPT = (
    "the reconciler never preempts (docs/concepts.md, 'Priority never preempts'): a "
    "borrower gives quota back by finishing, and only an operation whose timeout is at most "
    "the cohort's maxBorrowDuration may borrow"
)

# What each field becomes, for docs/from-kueue.md (checked by tests/cli/test_import_kueue.py).
FIELDS: dict[str, tuple[str, ...]] = {
    "ResourceFlavor": ("nodeLabels", "tolerations", "nodeTaints", "topologyName"),
    "ClusterQueue": (
        "cohort",
        "cohortName",
        "resourceGroups",
        "queueingStrategy",
        "fairSharing",
        "stopPolicy",
        "namespaceSelector",
        "preemption",
        "admissionChecks",
        "admissionChecksStrategy",
        "flavorFungibility",
        "admissionScope",
    ),
    "LocalQueue": ("clusterQueue", "stopPolicy", "fairSharing"),
    "Cohort": ("parentName", "parent", "resourceGroups", "fairSharing"),
    "WorkloadPriorityClass": ("value", "description"),
}


@dataclass(slots=True)
class _Queue:
    name: str
    source: str
    body: dict[str, Any]
    cohort: str | None = None
    flavor_refs: list[tuple[str, Document, PathKey]] = field(default_factory=list)


@dataclass(slots=True)
class _Importer:
    target: Target
    report: Report = field(default_factory=Report)
    flavors: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    empty_flavors: set[str] = field(default_factory=set)
    queues: dict[str, _Queue] = field(default_factory=dict)
    cohorts: dict[str, tuple[str, dict[str, Any], list[str]]] = field(default_factory=dict)
    cohort_refs: dict[str, str] = field(default_factory=dict)
    # Each LocalQueue: (its document, its path there, its namespace, its ClusterQueue).
    local: list[tuple[Document, PathKey, str, str]] = field(default_factory=list)

    def note(self, doc: Document, path: PathKey, message: str, *, key: bool = True) -> None:
        self.report.note(doc, path, message, key=key)

    def mapping(self, doc: Document, path: PathKey) -> dict[str, Any]:
        """The mapping at ``path`` ({} when unset); another type is an error there."""
        value = _get(doc.data, path)
        if value is None:
            return {}
        if isinstance(value, dict):
            return value
        self.report.error(doc, path, f"expected a mapping, got {value_kind(value)}", key=False)
        return {}

    def sequence(self, doc: Document, path: PathKey) -> list[Any]:
        """The list at ``path`` ([] when unset); another type is an error there."""
        value = _get(doc.data, path)
        if value is None:
            return []
        if isinstance(value, list):
            return value
        self.report.error(doc, path, f"expected a list, got {value_kind(value)}", key=False)
        return []

    def document(self, doc: Document) -> None:
        data = doc.data
        if not isinstance(data, dict):
            self.report.error(doc, (), "a Kubernetes object is a mapping (apiVersion, kind, ...)")
            return
        if data.get("kind") == "List" and isinstance(data.get("items"), list):
            for i in range(len(data["items"])):
                self.object(doc, ("items", i))
            return
        self.object(doc, ())

    def object(self, doc: Document, at: PathKey) -> None:
        obj = _get(doc.data, at)
        if not isinstance(obj, dict):
            self.report.error(doc, at, "a Kubernetes object is a mapping", key=False)
            return
        api, kind = obj.get("apiVersion"), obj.get("kind")
        group, _, version = str(api).rpartition("/")
        if group != GROUP or version not in (*VERSIONS, "v1alpha1"):
            self.report.error(
                doc,
                (*at, "apiVersion") if "apiVersion" in obj else at,
                f"apiVersion {api!r}: not Kueue's ({GROUP}/{' or '.join(VERSIONS)})",
                key=False,
            )
            return
        if kind not in KINDS:
            self.note(
                doc,
                (*at, "kind"),
                f"kind {kind!r} has no equivalent; not converted (converted: {', '.join(KINDS)})",
                key=False,
            )
            return
        meta = self.mapping(doc, (*at, "metadata"))
        raw = meta.get("name")
        if not isinstance(raw, str) or not raw:
            where = (*at, "metadata") if "metadata" in obj else (*at, "kind")
            self.report.error(doc, where, f"{kind} without metadata.name")
            return
        name = dns_label(raw)
        spec_at = (*at, "spec")
        spec = self.mapping(doc, spec_at)
        have = {
            "ClusterQueue": ("queues", self.target.queues),
            "ResourceFlavor": ("flavors", self.target.flavors),
        }.get(str(kind))
        if have is not None and name in have[1]:
            self.note(
                doc,
                (*at, "metadata", "name"),
                f"{have[0]}/{name}.yaml exists in the "
                "repo: not written (the import writes only new files); compare the two "
                "by hand",
                key=False,
            )
        if kind == "ResourceFlavor":
            self.flavor(doc, spec_at, spec, name)
        elif kind == "ClusterQueue":
            self.cluster_queue(doc, spec_at, spec, name, version)
        elif kind == "Cohort":
            self.cohort(doc, spec_at, spec, name, (*at, "metadata", "name"))
        elif kind == "LocalQueue":
            namespace = meta.get("namespace")
            cq = spec.get("clusterQueue")
            for key in spec:
                if key != "clusterQueue":
                    self.note(
                        doc,
                        (*spec_at, key),
                        f"LocalQueue {key}: "
                        + (
                            "the queue's `paused` is the one switch; set it on the queue"
                            if key == "stopPolicy"
                            else "admission fair sharing between LocalQueues has no "
                            "equivalent: fair sharing is between queues of a cohort"
                            if key == "fairSharing"
                            else "no equivalent; not converted"
                        ),
                    )
            if not isinstance(namespace, str) or not isinstance(cq, str):
                self.report.error(
                    doc,
                    spec_at if isinstance(namespace, str) else (*at, "metadata"),
                    "a LocalQueue needs metadata.namespace and spec.clusterQueue",
                    key=False,
                )
                return
            if name != dns_label(cq):
                self.note(
                    doc,
                    (*at, "metadata", "name"),
                    f"LocalQueue name {raw!r} is not "
                    f"kept: operations name the queue itself ({dns_label(cq)!r})",
                    key=False,
                )
            self.local.append((doc, at, namespace, dns_label(cq)))
        else:  # WorkloadPriorityClass
            value = obj.get("value")
            self.note(
                doc,
                (*at, "value") if "value" in obj else (*at, "kind"),
                f"WorkloadPriorityClass {raw!r} (value {value}): there are no priority "
                "classes; set the `priority` (0 to 1000) of the operations that used it: "
                "it orders work within its queue (queues by their own `priority`), never "
                "preempting",
                key=False,
            )

    # --- ResourceFlavor ------------------------------------------------------------------

    def flavor(self, doc: Document, at: PathKey, spec: dict[str, Any], name: str) -> None:
        body: dict[str, Any] = {"kind": "Flavor", "name": name}
        for key, value in spec.items():
            if key == "nodeLabels" and isinstance(value, dict) and value:
                body["nodeLabels"] = value
            elif key == "tolerations" and value:
                if isinstance(value, list) and all(isinstance(t, dict) for t in value):
                    body["tolerations"] = value
                else:
                    self.report.error(
                        doc, (*at, key), "tolerations: expected a list of tolerations", key=False
                    )
            elif key == "nodeTaints":
                self.note(
                    doc,
                    (*at, key),
                    "nodeTaints: no equivalent: Kueue matches a flavor's "
                    "taints against a workload's tolerations; here a flavor only adds its "
                    "`tolerations` to the pod: list the tolerations the taints need",
                )
            elif key == "topologyName":
                self.note(
                    doc,
                    (*at, key),
                    "topologyName: topology-aware scheduling (TAS) has "
                    "no equivalent: placement is the scheduler's; use "
                    "run.environment.affinity",
                )
            elif key == "nodeLabels":
                if not isinstance(value, dict | None):
                    self.report.error(doc, (*at, key), "nodeLabels: expected a mapping", key=False)
            else:
                self.note(doc, (*at, key), f"ResourceFlavor {key}: no equivalent; not converted")
        if "nodeLabels" not in body:
            self.empty_flavors.add(name)
            self.note(
                doc,
                at if spec else (),
                f"ResourceFlavor {name!r} has no nodeLabels: a "
                "flavor needs at least one, so it is not written; a queue that uses only "
                "it gets a plain `quota`",
                key=False,
            )
            return
        if name in self.flavors:
            self.note(
                doc,
                (*at[:-1], "metadata", "name"),
                f"ResourceFlavor {name!r} twice: the last one is kept",
                key=False,
            )
        self.flavors[name] = (doc.path, body)

    # --- Cohort --------------------------------------------------------------------------

    def cohort(
        self, doc: Document, at: PathKey, spec: dict[str, Any], name: str, name_at: PathKey
    ) -> None:
        notes: list[str] = []
        for key in spec:
            if key in ("parentName", "parent"):
                self.note(
                    doc,
                    (*at, key),
                    "parentName: cohorts are not nested: every queue "
                    "of a cohort is a direct member; flatten the tree",
                )
            elif key == "resourceGroups":
                self.note(
                    doc,
                    (*at, key),
                    "resourceGroups: a cohort's own quota adds nothing "
                    "to lend here; a cohort `quota` only caps the total use of its "
                    "queues: set it by hand if a cap is meant",
                )
            elif key == "fairSharing":
                self.note(
                    doc,
                    (*at, key),
                    "fairSharing: a cohort's weight in its parent has "
                    "no equivalent (cohorts are not nested); queues keep theirs",
                )
            else:
                self.note(doc, (*at, key), f"Cohort {key}: no equivalent; not converted")
        self.cohort_file(doc, name_at, name, notes)

    def cohort_file(self, doc: Document, at: PathKey, name: str, notes: list[str]) -> None:
        if name in self.cohorts or name in self.target.cohorts:
            return
        self.note(
            doc,
            at,
            f"cohort {name!r}: maxBorrowDuration is required here and has no "
            f"Kueue equivalent: written as {DEFAULT_MAX_BORROW}; set it to how long a "
            "lender may wait for its quota back",
            key=False,
        )
        body = {"kind": "Cohort", "name": name, "maxBorrowDuration": DEFAULT_MAX_BORROW}
        self.cohorts[name] = (doc.path, body, notes)

    # --- ClusterQueue --------------------------------------------------------------------

    def cluster_queue(
        self, doc: Document, at: PathKey, spec: dict[str, Any], name: str, version: str
    ) -> None:
        body: dict[str, Any] = {"kind": "Queue", "name": name, "cluster": self.target.cluster}
        queue = _Queue(name, doc.path, body)
        for key, value in spec.items():
            sub = (*at, key)
            if key in ("cohort", "cohortName"):
                if isinstance(value, str) and value:
                    queue.cohort = dns_label(value)
                    self.cohort_file(doc, sub, queue.cohort, [])
            elif key == "queueingStrategy":
                if value in ("BestEffortFIFO", "StrictFIFO"):
                    body["strategy"] = value
                else:
                    self.note(doc, sub, f"queueingStrategy {value!r}: unknown; not converted")
            elif key == "fairSharing":
                value = self.mapping(doc, sub)
                weight = value.get("weight")
                if weight is not None:
                    number = _number(weight)
                    if number is not None and number > 0:
                        body["fairSharing"] = {"weight": number}
                    else:
                        self.note(
                            doc,
                            (*sub, "weight"),
                            f"fairSharing.weight {weight!r}: a "
                            "weight here is a number above 0 (a Kueue weight of 0 "
                            "borrows only what no one else wants: no equivalent)",
                        )
                for extra in value:
                    if extra != "weight":
                        self.note(doc, (*sub, extra), f"fairSharing.{extra}: no equivalent")
            elif key == "stopPolicy":
                if value in ("Hold", "HoldAndDrain"):
                    body["paused"] = True
                    if value == "HoldAndDrain":
                        self.note(
                            doc,
                            sub,
                            "stopPolicy HoldAndDrain: written `paused: true`, "
                            "which holds new work; draining (evicting admitted work) has "
                            "no equivalent: " + NEVER_PREEMPT,
                        )
            elif key == "resourceGroups":
                self.resource_groups(doc, sub, self.sequence(doc, sub), queue)
            elif key == "namespaceSelector" and value == {}:
                continue  # every namespace: as a queue no project's allowedQueues leaves out
            elif key == "preemption" and _never(value):
                continue  # Kueue's default, and ours
            elif key in ("admissionChecks", "admissionChecksStrategy") and not value:
                continue
            elif key == "namespaceSelector":
                self.note(
                    doc,
                    sub,
                    "namespaceSelector: which projects may use a queue is each "
                    "project's allowedQueues (written from LocalQueues), not a selector",
                )
            elif key == "preemption":
                self.note(doc, sub, "preemption: no equivalent: " + NEVER_PREEMPT)
            elif key in ("admissionChecks", "admissionChecksStrategy"):
                self.note(
                    doc,
                    sub,
                    f"{key}: admission checks (ProvisioningRequest, "
                    "MultiKueue, ...) have no equivalent: an operation is dispatched "
                    "when the queue's checks pass; use a fleet queue (`clusters`) for "
                    "several clusters",
                )
            elif key == "flavorFungibility":
                self.fungibility(doc, sub, self.mapping(doc, sub))
            elif key == "admissionScope":
                self.note(
                    doc,
                    sub,
                    "admissionScope: admission fair sharing has no "
                    "equivalent: fair sharing is between queues of a cohort",
                )
            else:
                self.note(doc, sub, f"ClusterQueue {key}: no equivalent; not converted")
        if queue.cohort:
            body["cohort"] = queue.cohort
        if name in self.queues:
            self.note(
                doc,
                (*at[:-1], "metadata", "name"),
                f"ClusterQueue {name!r} twice: the last one is kept",
                key=False,
            )
        self.queues[name] = queue

    def fungibility(self, doc: Document, at: PathKey, value: dict[str, Any]) -> None:
        for key, policy in value.items():
            if key == "whenCanBorrow" and policy == "TryNextFlavor":
                continue
            if key == "whenCanBorrow":
                self.note(
                    doc,
                    (*at, key),
                    f"whenCanBorrow {policy}: an operation takes the "
                    "first flavor with room of its own and tries the next flavor before "
                    "borrowing (TryNextFlavor); there is no other order",
                )
            elif key == "whenCanPreempt":
                if policy != "TryNextFlavor":
                    self.note(doc, (*at, key), f"whenCanPreempt {policy}: " + NEVER_PREEMPT)
            else:
                self.note(doc, (*at, key), f"flavorFungibility.{key}: no equivalent")

    def resource_groups(self, doc: Document, at: PathKey, groups: list[Any], queue: _Queue) -> None:
        flavors: dict[str, dict[str, dict[str, Any]]] = {}
        where: dict[str, PathKey] = {}
        for g, _ in enumerate(groups):
            group = self.mapping(doc, (*at, g))
            for f, flavor in enumerate(self.sequence(doc, (*at, g, "flavors"))):
                fat = (*at, g, "flavors", f)
                if not isinstance(flavor, dict) or not isinstance(flavor.get("name"), str):
                    self.report.error(doc, fat, "a flavor quota needs a name", key=False)
                    continue
                fname = dns_label(flavor["name"])
                if fname in flavors:
                    if where[fname][len(at)] != g:
                        self.note(
                            doc,
                            (*fat, "name"),
                            f"flavor {fname!r} is in two resource "
                            "groups: merged into one entry of `flavors` (Kueue refuses "
                            "this; check the quotas)",
                            key=False,
                        )
                else:
                    flavors[fname] = {"quota": {}, "borrowingLimit": {}, "lendingLimit": {}}
                    where[fname] = fat
                entry = flavors[fname]
                for r, resource in enumerate(self.sequence(doc, (*fat, "resources"))):
                    rat = (*fat, "resources", r)
                    rname = resource.get("name") if isinstance(resource, dict) else None
                    if not isinstance(rname, str):
                        self.report.error(doc, rat, "a resource quota needs a name", key=False)
                        continue
                    for src, dst in (
                        ("nominalQuota", "quota"),
                        ("borrowingLimit", "borrowingLimit"),
                        ("lendingLimit", "lendingLimit"),
                    ):
                        if src in resource:
                            amount = resource[src]
                            if _quantity(amount):
                                entry[dst][rname] = amount
                            else:
                                self.report.error(
                                    doc,
                                    (*rat, src),
                                    f"{src} {amount!r} is not a quantity",
                                    key=False,
                                )
                    for extra in resource:
                        if extra not in ("name", "nominalQuota", "borrowingLimit", "lendingLimit"):
                            self.note(doc, (*rat, extra), f"resources[].{extra}: no equivalent")
            for extra in group:
                if extra not in ("coveredResources", "flavors"):
                    self.note(doc, (*at, g, extra), f"resourceGroups[].{extra}: no equivalent")
        if len(groups) > 1:
            self.note(
                doc,
                at,
                "resourceGroups: several groups are merged per flavor into one "
                "`flavors` list (in the order flavors first appear): an operation gets "
                "one flavor for all its resources",
                key=False,
            )
        queue.body["_flavors"] = flavors
        queue.flavor_refs = [(n, doc, (*where[n], "name")) for n in flavors]

    # --- output --------------------------------------------------------------------------

    def finish_queue(self, queue: _Queue) -> None:
        body = queue.body
        flavors: dict[str, dict[str, dict[str, Any]]] = body.pop("_flavors", {})
        known = set(self.flavors) | set(self.target.flavors)
        entries: list[dict[str, Any]] = []
        plain: dict[str, dict[str, Any]] | None = None
        for name, doc, at in queue.flavor_refs:
            if name in self.empty_flavors:
                if len(flavors) == 1:
                    plain = flavors[name]
                else:
                    self.note(
                        doc,
                        at,
                        f"flavor {name!r} (no nodeLabels) cannot be one of "
                        "several flavors of a queue: its quota is dropped; give it "
                        "nodeLabels",
                        key=False,
                    )
                continue
            if name not in known:
                self.note(
                    doc,
                    at,
                    f"flavor {name!r}: no ResourceFlavor of that name among "
                    "the imported files nor in the repo: its quota is dropped; import "
                    "its ResourceFlavor",
                    key=False,
                )
                continue
            entry: dict[str, Any] = {"name": name, "quota": flavors[name]["quota"]}
            entries.append(self.limits(entry, flavors[name], queue, doc, at))
        if plain is not None:
            body.update(
                self.limits({"quota": plain["quota"]}, plain, queue, *queue.flavor_refs[0][1:])
            )
        elif entries:
            body["flavors"] = entries
        elif queue.flavor_refs:  # every quota dropped: a queue without one has no limit
            body["paused"] = True
            _, doc, at = queue.flavor_refs[0]
            self.note(
                doc,
                at[: at.index("resourceGroups") + 1],
                f"no quota of ClusterQueue {queue.name!r} could be kept: written "
                "`paused: true`, as without a quota it would dispatch without limit; "
                "import its ResourceFlavors (or set its quota), then unpause it",
            )

    def limits(
        self,
        entry: dict[str, Any],
        source: dict[str, dict[str, Any]],
        queue: _Queue,
        doc: Document,
        at: PathKey,
    ) -> dict[str, Any]:
        for key in ("borrowingLimit", "lendingLimit"):
            if not source[key]:
                continue
            if queue.cohort is None:
                self.note(
                    doc,
                    at,
                    f"{key}: the queue has no cohort, so there is nothing to "
                    "borrow or lend: dropped",
                    key=False,
                )
                continue
            entry[key] = source[key]
        return entry

    def files(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        head = "Imported from Kueue {} (reconciler import kueue)."
        for name, (source, body) in self.flavors.items():
            if name in self.target.flavors:
                continue
            out.append((f"flavors/{name}.yaml", render([head.format(source)], body)))
        for name, (source, body, _) in self.cohorts.items():
            out.append(
                (
                    f"cohorts/{name}.yaml",
                    render(
                        [
                            head.format(source),
                            "maxBorrowDuration has no Kueue equivalent: a default. Only an "
                            "operation whose",
                            "timeout is at most this long may borrow; a lender waits at most "
                            "this long.",
                        ],
                        body,
                    ),
                )
            )
        for name, queue in self.queues.items():
            self.finish_queue(queue)
            if name in self.target.queues:
                continue
            out.append((f"queues/{name}.yaml", render([head.format(queue.source)], queue.body)))
        out.extend(self.projects())
        return out

    def projects(self) -> list[tuple[str, str]]:
        by_ns: dict[str, list[tuple[Document, PathKey, str]]] = {}
        for doc, at, ns, cq in self.local:
            by_ns.setdefault(ns, []).append((doc, at, cq))
        existing = dict((ns, p) for p, ns in self.target.project_namespaces)
        known = set(self.queues) | set(self.target.queues)
        out: list[tuple[str, str]] = []
        for ns, refs in by_ns.items():
            queues: list[str] = []
            for doc, at, cq in refs:
                if cq not in known:
                    self.note(
                        doc,
                        (*at, "spec", "clusterQueue"),
                        f"clusterQueue {cq!r}: no "
                        "ClusterQueue of that name among the imported files nor in the "
                        "repo: not added",
                        key=False,
                    )
                elif cq not in queues:
                    queues.append(cq)
            if not queues:
                continue
            if ns in existing:
                doc, at, _ = refs[0]
                self.note(
                    doc,
                    (*at, "metadata", "namespace"),
                    f"namespace {ns!r} is project "
                    f"{existing[ns]!r}: add {', '.join(queues)} to allowedQueues in "
                    f"projects/{existing[ns]}/project.yaml (the import writes only new "
                    "files)",
                    key=False,
                )
                continue
            project = dns_label(ns)
            body: dict[str, Any] = {"kind": "Project", "name": project}
            if project != ns:
                body["namespace"] = ns
            body["allowedQueues"] = queues
            body["defaults"] = {"queue": queues[0]}
            out.append(
                (
                    f"projects/{project}/project.yaml",
                    render(
                        [
                            f"Imported from Kueue LocalQueues of namespace {ns} "
                            "(reconciler import kueue).",
                            "Its operations go in projects/" + project + "/operations/.",
                        ],
                        body,
                    ),
                )
            )
        return out


def _get(data: Any, path: PathKey) -> Any:
    for part in path:
        if isinstance(data, dict) and isinstance(part, str):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return None
    return data


def _never(preemption: Any) -> bool:
    """Whether a ClusterQueue's ``preemption`` preempts nothing (every policy ``Never``, as
    ``kubectl get -o yaml`` shows the defaults)."""
    if not isinstance(preemption, dict):
        return False
    for key, policy in preemption.items():
        if key == "borrowWithinCohort":
            policy = policy.get("policy") if isinstance(policy, dict) else policy
        if policy != "Never":
            return False
    return True


def _quantity(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return False
    try:
        parse_quantity(value)
    except (ValueError, ArithmeticError):
        return False
    return True


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return int(number) if number.is_integer() else number
    return None


def import_kueue(sources: Sequence[Source], *, target: Target) -> ImportResult:
    """Convert Kueue manifests into files of the repo, with what has no equivalent reported."""
    importer = _Importer(target)
    for source in sources:
        for doc in parse_all(source, importer.report):
            importer.document(doc)
    report = importer.report
    if report.errors:
        return ImportResult((), tuple(report.findings), tuple(report.errors))
    files = importer.files()
    return ImportResult(tuple(files), tuple(report.findings), ())
