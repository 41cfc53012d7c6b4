"""The start estimates of the latest decision, computed on a worker thread (docs/runtime.md).

Estimating is a forward simulation of every queue (``core/plan/estimate.py``): seconds of CPU
at tens of thousands of pending operations. Under ``run --http`` the pages and the API are
served by the dispatching process, so no reader computes it: a reader hands the decision
it shows to ``EstimateWorker.latest`` and gets, at once, the latest finished estimates
(``ESTIMATES_PENDING`` until the first is ready). One worker thread computes them, once per
decision, and only the newest decision waiting: a decision superseded before its turn is
never estimated. The cycle thread never waits on it.

Nor does the worker slow the cycle thread down: both share the interpreter (the GIL), and a
CPU-bound thread beside it would take about half of each cycle's time (and far more of a
cycle that waits on many requests, each answer waiting for the GIL again:
``bench/estimate_contention.py``). So the worker holds its simulation while a cycle runs
(``idle``: the loop's ``Wakeup.wait_idle``): before it starts and between the simulation's
steps (``estimate_starts``'s ``pause``). It uses the time between cycles.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from reconciler.core.decision.cycle import Decision
from reconciler.core.plan.estimate import (
    ESTIMATES_PENDING,
    NO_ESTIMATES,
    Estimates,
    estimate_decision,
)
from reconciler.core.types import CompiledRepo

Compute = Callable[[CompiledRepo, Decision], Estimates]
# returns once no cycle is running (``Wakeup.wait_idle``); what it returns is not looked at
Idle = Callable[[], object]
# starts ``target`` on a thread of its own (tests pass one that records it instead)
Spawn = Callable[[Callable[[], None]], None]

log = logging.getLogger("reconciler.estimates")


def _never_busy() -> None:
    """No cycle runs beside the worker (a test's, a CLI view's)."""


def _daemon(target: Callable[[], None]) -> None:
    threading.Thread(target=target, name="estimates", daemon=True).start()


class EstimateWorker:
    """The estimates of the latest decision handed to ``latest``, one computation per
    decision, on a thread of its own."""

    def __init__(
        self, compute: Compute | None = None, spawn: Spawn = _daemon, *, idle: Idle | None = None
    ) -> None:
        """``compute``: ``estimate_decision``, paused by ``idle`` between its steps."""
        self._idle = idle if idle is not None else _never_busy
        self._compute = compute if compute is not None else self._estimate
        self._spawn = spawn
        self._lock = threading.Lock()
        self._wanted: tuple[CompiledRepo, Decision] | None = None  # the newest not started
        self._running = False
        self._asked: Decision | None = None  # the newest decision handed in
        self._done: tuple[Decision, Estimates] | None = None  # the latest finished
        self.computed = 0  # how many estimates were computed (one per decision)

    def latest(self, compiled: CompiledRepo | None, decision: Decision | None) -> Estimates:
        """The latest finished estimates (of ``decision`` or of an earlier one), never
        computed here: a decision not seen before is queued for the worker.
        ``ESTIMATES_PENDING`` until the first is ready; ``NO_ESTIMATES`` with no
        decision."""
        if compiled is None or decision is None:
            return NO_ESTIMATES
        start = False
        with self._lock:
            if decision is not self._asked:
                self._asked = decision
                self._wanted = (compiled, decision)
                if not self._running:
                    self._running = start = True
        if start:
            self._spawn(self._work)
        with self._lock:
            done = self._done
        return done[1] if done is not None else ESTIMATES_PENDING

    def finished(self, decision: Decision) -> bool:
        """Whether the estimates of ``decision`` are the latest finished."""
        with self._lock:
            return self._done is not None and self._done[0] is decision

    def _estimate(self, compiled: CompiledRepo, decision: Decision) -> Estimates:
        return estimate_decision(compiled, decision, pause=self._wait)

    def _wait(self) -> None:
        self._idle()

    def _work(self) -> None:
        """Estimate the newest decision waiting, until none is."""
        while True:
            with self._lock:
                wanted, self._wanted = self._wanted, None
                if wanted is None:
                    self._running = False
                    return
            compiled, decision = wanted
            self._idle()
            try:
                estimates = self._compute(compiled, decision)
            except Exception:  # a bug in the estimate: the views show none, dispatch goes on
                log.exception("start estimates failed")
                estimates = NO_ESTIMATES
            with self._lock:
                self._done = (decision, estimates)
                self.computed += 1
