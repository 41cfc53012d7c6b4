"""When to run the next cycle (pure): which watch events free a slot, and the pace.

A cycle runs every ``interval`` seconds as a fallback. Sooner, when something happens that
can change what the planner decides: a watch event by which an operation's run ends
(``event_trigger``), a new config (a Git host's webhook on a push, a save with ``--watch``),
leadership gained. ``Pace`` spaces those cycles: at most one per ``min_gap`` seconds, so a burst of
events (100 Jobs finishing within a second) makes a few cycles, not a hundred.

The effectful side (a condition variable the watch threads notify, the loop that waits on
it) is ``runtime/loop.py``'s ``Wakeup`` and ``run_forever``. Times here are seconds on a
monotonic clock, passed in.

What must live here: which watch events start a cycle (``event_trigger``) and how often
cycles run (``Pace``). The loop that waits on them is ``runtime/loop.py``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.core.decision.render_kubeflow import KIND as PYTORCHJOB
from reconciler.core.observation.observe import workload_end_phase
from reconciler.core.types import Phase


class Trigger(enum.StrEnum):
    """Why a cycle was asked for before its interval."""

    FINISHED = "Finished"  # a Job's run succeeded
    FAILED = "Failed"  # a Job's run failed
    DELETED = "Deleted"  # a Job is being deleted, or is gone
    RELISTED = "Relisted"  # a watch was listed again: events may have been missed
    CONFIG = "Config"  # a new config (files saved, with --watch)
    WEBHOOK = "Webhook"  # a Git host's webhook: a push to the branch followed
    LEADING = "Leading"  # this replica just became the leader
    STATUS = "Status"  # a status write put off by its cadence is due


_BY_PHASE = {
    Phase.SUCCEEDED: Trigger.FINISHED,
    Phase.FAILED: Trigger.FAILED,
    Phase.STOPPED: Trigger.DELETED,
}


def event_trigger(
    kind: str,
    event_type: str,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
) -> Trigger | None:
    """The trigger of one watch event, or None when it cannot free quota or concurrency.

    ``before`` is the object as the cache held it (None: not held), ``after`` as the event
    carries it. Only a Job's run ending frees a slot: it gains ``Complete``,
    ``SuccessCriteriaMet``, ``Failed`` or ``FailureTarget``, is marked for deletion, or is
    deleted. Everything else is left to the next cycle: the Job we just created (ADDED),
    our own phase annotations (MODIFIED, same end), and every Pod event. A pod that
    succeeds leaves its Job ``Running``/``Finishing`` until the Job controller marks it
    (``core/observation/observe.py``), so a cycle on the pod's event would plan the same slots and,
    through the debounce, delay the cycle that the Job's event asks for. A PyTorchJob is
    a Job here: its run ends with its ``Succeeded`` or ``Failed`` condition."""
    if kind not in ("Job", PYTORCHJOB):
        return None

    def job_end_phase(obj: Mapping[str, Any]) -> Phase | None:
        return workload_end_phase(kind, obj)

    if event_type == "DELETED":
        # gone before it ended: it held its slot until now; gone after: nothing changes
        held = before if before is not None else after
        return Trigger.DELETED if held is None or job_end_phase(held) is None else None
    if event_type not in ("ADDED", "MODIFIED") or after is None:
        return None  # BOOKMARK, ERROR: no object change
    ended = job_end_phase(after)
    if ended is None:
        return None
    if before is not None and job_end_phase(before) is ended:
        return None  # already ended so: an annotation, a status update
    return _BY_PHASE[ended]


@dataclass(frozen=True, slots=True)
class Pace:
    """The fallback ``interval`` and the debounce ``min_gap`` (seconds, ``min_gap`` ≤
    ``interval``)."""

    interval: float
    min_gap: float = 0.2

    def __post_init__(self) -> None:
        if self.min_gap < 0 or self.interval < 0:
            raise ValueError("interval and min_gap must not be negative")

    def next_cycle(
        self, last_started: float, requested: float | None, due: float | None = None
    ) -> float:
        """When the next cycle starts. ``last_started``: when the last one started;
        ``requested``: when the first request since then came (None: none); ``due``: a
        cycle asked for at that time (a status write put off), if any.

        A request after a quiet spell is served at once; one that comes sooner than
        ``min_gap`` after the last cycle started waits for the gap, and every request in
        between is served by that same cycle. Never later than the fallback."""
        gap = last_started + self.min_gap
        soonest = last_started + self.interval
        if requested is not None:
            soonest = min(soonest, max(requested, gap))
        if due is not None:
            soonest = min(soonest, max(due, gap))
        return soonest
