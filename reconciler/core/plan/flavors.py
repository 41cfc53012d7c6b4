"""Flavors: which of a queue's flavors an operation may use (docs/dispatch.md, "Flavors").

What must live here: the rule that makes a flavor *eligible* for an operation (its
``nodeLabels`` do not contradict the operation's own nodeSelector or required node
affinity), memoised per placement, and the placement of an operation once a flavor is
assigned (its labels and tolerations added, for check 10's choice of nodes). Which
eligible flavor *fits* is check 8's (``planner.admit``, ``cohorts.py``): a flavor is tried
in the queue's order, and the first that fits wins.

A label the flavor does not name never contradicts: the operation may still pin a node
property the flavor says nothing about.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from reconciler.core.observation.capacity import Placement, Toleration, placement_of
from reconciler.core.plan.model import PendingReason
from reconciler.core.types import CompiledOperation, FlavorSpec, QueueSpec

if TYPE_CHECKING:
    from reconciler.core.plan.state import QueueState

_QUOTA = PendingReason.QUOTA_EXCEEDED


class FlavorSlots(NamedTuple):
    """One of a queue's flavors while planning: its name, its spec (None: not defined,
    which the compiler rules out) and its quota slots ``lo..hi`` in the queue's state."""

    name: str
    spec: FlavorSpec | None
    lo: int
    hi: int


def contradiction(labels: Mapping[str, str], placement: Placement) -> str | None:
    """Why nodes with ``labels`` can never take a pod with ``placement`` (a phrase), or
    None when they may."""
    for key, value in placement.node_selector:
        have = labels.get(key)
        if have is not None and have != value:
            return f"its nodeSelector wants {key}={value}, the flavor's nodes have {have}"
    if placement.required is None:
        return None
    for term in placement.required:
        if not term.expressions and not term.fields:
            continue  # matches no node at all: the scheduler's concern, not a flavor's
        if all(r.key not in labels or r.holds(labels[r.key]) for r in term.expressions):
            return None
    return "no term of its required node affinity matches the flavor's nodeLabels"


def _pinned(spec: Mapping[str, Any]) -> bool:
    """Whether the spec has a nodeSelector or node affinity at all (most have neither).
    Asked once per candidate: duck-typed, as an ABC ``isinstance`` costs more than the
    rest of it."""
    try:
        env = spec["run"]["environment"]
        return bool(env.get("nodeSelector") or env.get("affinity"))
    except (KeyError, TypeError, AttributeError):
        return False


class EligibleFlavors:
    """The flavors (their numbers, in order) an operation may use, memoised per placement:
    an operation with no nodeSelector and no affinity may use all of them."""

    __slots__ = ("_all", "_by_placement", "_by_selector", "_flavors")

    def __init__(self, flavors: tuple[FlavorSlots, ...]) -> None:
        self._flavors = flavors
        self._all = tuple(range(len(flavors)))
        self._by_placement: dict[Placement, tuple[int, ...]] = {}
        self._by_selector: dict[tuple[tuple[str, str], ...], tuple[int, ...]] = {}

    def __call__(self, op: CompiledOperation) -> tuple[int, ...]:
        """Asked once per candidate: the common cases (no pins; a nodeSelector alone) are
        memoised on the selector's items, without building a placement."""
        try:
            env = op.spec["run"]["environment"]
            selector = env.get("nodeSelector")
            affinity = env.get("affinity")
        except (KeyError, TypeError, AttributeError):
            return self._all
        if not (selector or affinity) or not self._flavors:
            return self._all
        if affinity:
            return self._of(placement_of(op.spec))
        key = tuple(selector.items())
        got = self._by_selector.get(key)
        if got is None:
            got = self._by_selector[key] = self._of(placement_of(op.spec))
        return got

    def _of(self, placement: Placement) -> tuple[int, ...]:
        got = self._by_placement.get(placement)
        if got is None:
            got = self._by_placement[placement] = tuple(
                k
                for k, f in enumerate(self._flavors)
                if f.spec is None or contradiction(f.spec.node_labels, placement) is None
            )
        return got

    def conflicts(self, op: CompiledOperation) -> tuple[tuple[str, str], ...]:
        """Each flavor and why the operation may not use it (for an operation with none)."""
        placement = placement_of(op.spec)
        out = []
        for f in self._flavors:
            why = contradiction(f.spec.node_labels, placement) if f.spec is not None else None
            if why is not None:
                out.append((f.name, why))
        return tuple(out)


def held_flavor(
    spec: QueueSpec,
    flavors: Mapping[str, FlavorSpec],
    op: CompiledOperation | None,
    name: str | None,
) -> str:
    """The flavor an active run of the queue ``spec`` holds quota in: the one it was
    dispatched with, else (dispatched before the queue had it) the first its operation may
    use, else the first."""
    names = [f.name for f in spec.flavors]
    if name in names:
        return name
    if op is not None and _pinned(op.spec):
        placement = placement_of(op.spec)
        for n in names:
            f = flavors.get(n)
            if f is None or contradiction(f.node_labels, placement) is None:
                return n
    return names[0]


def flavored_placement(placement: Placement, flavor: FlavorSpec | None) -> Placement:
    """``placement`` with the flavor's labels as nodeSelector entries and its tolerations
    (what the rendered pod will have)."""
    if flavor is None:
        return placement
    selector = dict(placement.node_selector)
    for key, value in flavor.node_labels.items():
        selector.setdefault(key, value)
    tolerations = placement.tolerations + tuple(
        Toleration(
            str(t.get("key") or ""),
            str(t.get("operator") or "Equal"),
            str(t.get("value") or ""),
            str(t.get("effect") or ""),
        )
        for t in flavor.tolerations
    )
    return Placement(tuple(sorted(selector.items())), tolerations, placement.required)


def flavors_exceeded(
    q: QueueState, op: CompiledOperation, eligible: tuple[int, ...]
) -> list[int] | None:
    """Check 4 with flavors: None when some eligible flavor has room for the whole request
    alone (its quota, plus what it may borrow, and the queue's maxPods); else the slots
    each flavor is over (``-1`` first when the replicas alone are over maxPods)."""
    max_pods = q.spec.max_pods
    if max_pods is not None and op.replicas > max_pods:
        return [-1]
    get = op.requests.get
    limits = q.limits
    for k in eligible:
        span = q.flavors[k]
        for i in range(span.lo, span.hi):
            v = get(limits[i][0])
            if v is not None and v > limits[i][1]:
                break
        else:
            return None  # this flavor has room for it alone
    over: list[int] = []
    for k in eligible:
        span = q.flavors[k]
        over.extend(i for i in range(span.lo, span.hi) if (get(limits[i][0]) or 0) > limits[i][1])
    return over


def fit_flavor(
    q: QueueState, op: CompiledOperation, eligible: tuple[int, ...]
) -> tuple[int, Any, bool]:
    """Check 8 with flavors, for a cohort's member (a queue outside a cohort has the same
    rule inline in ``planner.admit``): ``(flavor, request in units, False)`` for the first
    eligible flavor whose own quota has room, what it lent counted as in use; else
    ``(-1, (reason, detail), may_borrow)``. ``may_borrow``: some flavor fits only by
    borrowing (the op is deferred to step 4b). A ``QuotaExceeded`` detail is one
    ``(slot, units)`` per flavor tried, or that pair alone when one flavor was."""
    cohort = q.cohort
    assert cohort is not None
    short: list[tuple[int, int]] = []
    other: tuple[PendingReason, Any] | None = None
    for k in eligible:
        req = q.request(op.requests, k)
        verdict = cohort.own_fit(q, req)
        if verdict is None:
            return k, req, False
        if verdict[0] is _QUOTA:
            short.append(verdict[1])
        elif other is None:
            other = verdict
    if other is not None and not short:
        return -1, other, False
    detail: Any = short[0] if len(short) == 1 else tuple(short)
    return -1, (_QUOTA, detail), True


def flavor_node_warnings(
    flavors: Mapping[str, FlavorSpec],
    nodes: Mapping[str, Sequence[Mapping[str, str]]],
    unread: Sequence[str] = (),
) -> list[str]:
    """One ``file:line:col: warning: ...`` per flavor whose ``nodeLabels`` match no node of
    any cluster read (``nodes``: each cluster's node labels; ``unread``: the clusters that
    could not be read, named in the warning since a flavor may match nodes there). Such a
    flavor's quota can be assigned, but its pods will never be placed. Nothing when no
    cluster was read: there is nothing to compare with."""
    if not nodes:
        return []
    out = []
    for name in sorted(flavors):
        flavor = flavors[name]
        wanted = flavor.node_labels.items()
        if any(
            all(labels.get(k) == v for k, v in wanted)
            for listed in nodes.values()
            for labels in listed
        ):
            continue
        where = str(flavor.location) if flavor.location is not None else flavor.source
        labels = ", ".join(f"{k}={v}" for k, v in sorted(wanted))
        read = ", ".join(sorted(nodes))
        not_read = f"; not read: {', '.join(sorted(unread))}" if unread else ""
        out.append(
            f"{where}: warning: flavor {name!r} matches no node: no node of cluster "
            f"{read} has all of its nodeLabels ({labels}){not_read}; an operation assigned "
            "it will not be placed until such nodes exist"
        )
    return out
