"""A cluster's free capacity, as a fleet queue's planner sees it (pure).

What must live here: the observation of a cluster's nodes and bound pods into a
:class:`ClusterCapacity` (``observe_capacity``), an operation's placement constraints
(``placement_of``: nodeSelector, tolerations, required node affinity) and the free amount
of the nodes a placement may use (``ClusterCapacity.free``). The rules follow
kube-scheduler's filters, simplified to what can be summed per cluster:

- a node counts when its ``Ready`` condition is ``True`` and it is not cordoned
  (``spec.unschedulable``);
- a placement may use a node when every ``nodeSelector`` label is equal on the node, every
  ``NoSchedule``/``NoExecute`` taint is tolerated (``PreferNoSchedule`` never excludes),
  and, when the pod requires node affinity, one of its ``nodeSelectorTerms`` matches (its
  ``matchExpressions`` and ``matchFields`` all hold);
- a node's free amount is its ``allocatable`` minus the effective requests of every pod
  bound to it (``spec.nodeName``) that has not terminated: anyone's pods, not only ours;
- our own pods not bound yet (a Job just dispatched, its pod not scheduled) are
  ``reserved``: they will take room somewhere, so they are taken from every placement.

It is a prediction used to choose a cluster, not placement: the free amounts are summed
over the nodes a placement may use (a pod still needs one node with the room), and
kube-scheduler still places the pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from reconciler.core.decision.render import LABEL_MANAGED_BY, MANAGER
from reconciler.core.observation.observe import effective_pod_requests
from reconciler.core.quantity import QuantityError, parse_quantity, sum_quantities

_EXCLUDING = frozenset({"NoSchedule", "NoExecute"})
_TERMINATED = frozenset({"Succeeded", "Failed"})
_ZERO = Decimal(0)


@dataclass(frozen=True, slots=True, order=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # or "Exists"
    value: str = ""
    effect: str = ""  # "" tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``matchExpressions`` (or ``matchFields``) entry of a node selector term."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()

    def holds(self, value: str | None) -> bool:
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if op in ("Gt", "Lt") and value is not None and len(self.values) == 1:
            try:
                have, bound = int(value), int(self.values[0])
            except ValueError:
                return False
            return have > bound if op == "Gt" else have < bound
        return False


@dataclass(frozen=True, slots=True)
class Term:
    """A ``nodeSelectorTerms`` entry: every requirement holds. An empty term matches no
    node (as in Kubernetes)."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    def matches(self, node: NodeCapacity) -> bool:
        if not self.expressions and not self.fields:
            return False
        labels = node.labels
        for r in self.expressions:
            if not r.holds(labels.get(r.key)):
                return False
        # only metadata.name is a node field selector
        return all(r.holds(node.name if r.key == "metadata.name" else None) for r in self.fields)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where an operation's pods may go: hashable, so the nodes it may use are computed
    once per placement and cluster."""

    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    required: tuple[Term, ...] | None = None  # None: no required node affinity

    def admits(self, node: NodeCapacity) -> bool:
        labels = node.labels
        for key, value in self.node_selector:
            if labels.get(key) != value:
                return False
        for taint in node.taints:
            if taint.effect in _EXCLUDING and not any(t.tolerates(taint) for t in self.tolerations):
                return False
        if self.required is not None:
            return any(term.matches(node) for term in self.required)
        return True


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """One Ready, schedulable node: what it offers, and what bound pods request of it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allocatable: Mapping[str, Decimal] = field(default_factory=dict)
    requested: Mapping[str, Decimal] = field(default_factory=dict)

    def free(self, resource: str) -> Decimal:
        left = self.allocatable.get(resource, _ZERO) - self.requested.get(resource, _ZERO)
        return left if left > 0 else _ZERO


@dataclass(frozen=True, slots=True)
class ClusterCapacity:
    """A cluster's usable nodes (Ready, not cordoned; by name), our pods not bound yet
    (``reserved``), and how many nodes do not count."""

    nodes: tuple[NodeCapacity, ...] = ()
    reserved: Mapping[str, Decimal] = field(default_factory=dict)
    not_ready: int = 0
    cordoned: int = 0

    def free(self, placement: Placement | None = None) -> dict[str, Decimal]:
        """Per resource: the free amount of the nodes ``placement`` may use (all usable
        nodes when None), less the reserved amounts; never negative."""
        out: dict[str, Decimal] = {}
        for node in self.nodes:
            if placement is not None and not placement.admits(node):
                continue
            for resource in node.allocatable:
                out[resource] = out.get(resource, _ZERO) + node.free(resource)
        for resource, amount in self.reserved.items():
            if resource in out:
                out[resource] = max(_ZERO, out[resource] - amount)
        return dict(sorted(out.items()))

    def allocatable(self) -> dict[str, Decimal]:
        out: dict[str, Decimal] = {}
        for node in self.nodes:
            sum_quantities(node.allocatable, out)
        return dict(sorted(out.items()))


# --- an operation's placement ----------------------------------------------------------


def placement_of(spec: Mapping[str, Any]) -> Placement:
    """The placement constraints of a compiled operation's spec (``run.environment``)."""
    run = spec.get("run") if isinstance(spec, Mapping) else None
    env = (run.get("environment") if isinstance(run, Mapping) else None) or {}
    selector = env.get("nodeSelector") or {}
    tolerations = tuple(
        Toleration(
            str(t.get("key") or ""),
            str(t.get("operator") or "Equal"),
            str(t.get("value") or ""),
            str(t.get("effect") or ""),
        )
        for t in env.get("tolerations") or ()
        if isinstance(t, Mapping)
    )
    affinity = env.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") or {}
    required_raw = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    required: tuple[Term, ...] | None = None
    if isinstance(required_raw, Mapping) and required_raw.get("nodeSelectorTerms") is not None:
        required = tuple(
            Term(_requirements(t.get("matchExpressions")), _requirements(t.get("matchFields")))
            for t in required_raw.get("nodeSelectorTerms") or ()
            if isinstance(t, Mapping)
        )
    return Placement(
        tuple(sorted((str(k), str(v)) for k, v in selector.items())), tolerations, required
    )


def _requirements(raw: Any) -> tuple[Requirement, ...]:
    return tuple(
        Requirement(
            str(r.get("key")), str(r.get("operator")), tuple(map(str, r.get("values") or ()))
        )
        for r in raw or ()
        if isinstance(r, Mapping)
    )


# --- observation -----------------------------------------------------------------------


def _quantities(raw: Any) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for name, value in (raw or {}).items() if isinstance(raw, Mapping) else ():
        try:
            out[str(name)] = parse_quantity(value)
        except QuantityError:
            continue  # the apiserver validated it; never fail observation on it
    return out


def _ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def _pod_total(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    spec = pod.get("spec") or {}
    total = effective_pod_requests(spec)
    sum_quantities(_quantities(spec.get("overhead")), total)
    total["pods"] = total.get("pods", _ZERO) + 1
    return total


def observe_capacity(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> ClusterCapacity:
    """The capacity summary of one cluster from its Node objects and its pods (all of
    them, as the apiserver lists them)."""
    usable: dict[str, tuple[Mapping[str, Any], dict[str, Decimal]]] = {}
    not_ready = cordoned = 0
    for node in nodes:
        meta = node.get("metadata") or {}
        if not _ready(node):
            not_ready += 1
            continue
        if (node.get("spec") or {}).get("unschedulable"):
            cordoned += 1
            continue
        usable[str(meta.get("name"))] = (node, {})
    reserved: dict[str, Decimal] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in _TERMINATED:
            continue
        meta = pod.get("metadata") or {}
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            if bound in usable:
                sum_quantities(_pod_total(pod), usable[bound][1])
        elif (meta.get("labels") or {}).get(LABEL_MANAGED_BY) == MANAGER and not meta.get(
            "deletionTimestamp"
        ):
            sum_quantities(_pod_total(pod), reserved)
    reserved.pop("pods", None)
    out: list[NodeCapacity] = []
    for name in sorted(usable):
        node, requested = usable[name]
        meta = node.get("metadata") or {}
        taints = tuple(
            sorted(
                Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect")))
                for t in (node.get("spec") or {}).get("taints") or ()
                if isinstance(t, Mapping)
            )
        )
        out.append(
            NodeCapacity(
                name,
                {str(k): str(v) for k, v in sorted((meta.get("labels") or {}).items())},
                taints,
                dict(sorted(_quantities((node.get("status") or {}).get("allocatable")).items())),
                dict(sorted(requested.items())),
            )
        )
    return ClusterCapacity(tuple(out), dict(sorted(reserved.items())), not_ready, cordoned)
