"""The long-running loop: a cycle per interval, sooner on events, until stopped.

``Loop`` runs it in a daemon thread so that the main thread, which takes SIGTERM and
SIGINT, never waits on a cluster: a cycle blocked reading an unreachable apiserver is
abandoned at shutdown (its thread ends with the process). See docs/operations.md,
"Shutdown"."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import watchfiles

from reconciler.core.decision.trigger import Pace, Trigger
from reconciler.runtime.cycle import CycleResult, Reconciler

log = logging.getLogger("reconciler.loop")

# seconds ``finish`` gives a loop that was only waiting to end (one left in a cluster read
# is not waited for: it ends with the process)
LOOP_END = 0.2
POLL = 0.05  # seconds between the main thread's checks of the stop flag
DEFAULT_MIN_GAP = 0.2  # seconds: at most one cycle per this, however many events come
# seconds between two folds of the watches' changes while the loop waits (``Wakeup.wait``):
# what a push's cycle may wait for one in progress, and the batch each fold observes
IDLE_EVERY = 0.1


class Wakeup:
    """Asks the loop for a cycle before its interval (``core/decision/trigger.py``): the watch
    threads on an event that frees a slot, the file watcher on a save, the Lease on
    leadership gained, the status publisher when a write it put off is due.

    ``request`` notes only the first request since the last cycle started (the pace
    serves every later one with the same cycle) and costs one lock: it is called from the
    watch threads for each event that frees a slot. ``interrupt`` ends the wait at once,
    whatever the pace says (shutdown). ``clock`` is injected for tests (a virtual clock);
    ``poke`` makes a waiting loop read it again.

    It also knows whether a cycle is running (``begin_cycle`` to ``end_cycle``): the
    estimate worker, which shares the interpreter (the GIL) with the cycle thread, holds
    its simulation until the cycle ends (``wait_idle``), so a page view never slows a
    cycle down."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._cond = threading.Condition()
        self._requested: float | None = None  # the first request since the cycle started
        self._due: float | None = None  # a cycle asked for at this time
        self._interrupted = False
        self.counts: Counter[Trigger] = Counter()  # requests, by trigger (for metrics)
        self.waiting_until: float | None = None  # when the waiting loop will cycle
        self._running = False  # a cycle is running
        self._idling = False  # ``wait``'s ``idle`` is running

    def request(self, trigger: Trigger) -> None:
        """A cycle as soon as the pace allows."""
        with self._cond:
            self.counts[trigger] += 1
            if self._requested is None:
                self._requested = self.clock()
                self._cond.notify_all()

    def request_at(self, when: float) -> None:
        """A cycle at ``when`` (on ``clock``) at the latest."""
        with self._cond:
            if self._due is None or when < self._due:
                self._due = when
                self._cond.notify_all()

    def interrupt(self) -> None:
        """End the current wait now (``stop`` was set)."""
        with self._cond:
            self._interrupted = True
            self._cond.notify_all()

    def is_set(self) -> bool:
        """True once interrupted."""
        with self._cond:
            return self._interrupted

    def poke(self) -> None:
        """Make the waiting loop read ``clock`` again (a test moved a virtual clock)."""
        with self._cond:
            self._cond.notify_all()

    @property
    def pending(self) -> float | None:
        """When the first request since the last cycle started came (None: none)."""
        with self._cond:
            return self._requested

    def begin_cycle(self) -> None:
        """A cycle starts: the requests so far are served by it. One that comes during
        the cycle asks for the next, as the cycle may have read the caches before it."""
        with self._cond:
            self._requested = None
            self._due = None
            self._running = True

    def end_cycle(self) -> None:
        """The cycle (and what is done with its result) ended."""
        with self._cond:
            self._running = False
            self._cond.notify_all()

    @property
    def running(self) -> bool:
        """Whether a cycle is running."""
        with self._cond:
            return self._running

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Until no cycle is running (or ``interrupt``), at most ``timeout`` seconds;
        whether none is."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._running or self._interrupted, timeout)

    def wait(self, pace: Pace, last_started: float, idle: Callable[[], None] | None = None) -> None:
        """Until the next cycle is due (``pace``), or ``interrupt``; meanwhile ``idle``
        after each ``IDLE_EVERY`` seconds that nothing woke the wait (outside the lock: a
        request made during it is kept, and served as soon as it returns)."""
        while True:
            with self._cond:
                left = self._left(pace, last_started)
                if left <= 0:
                    self.waiting_until = None
                    return
                if idle is None or left <= IDLE_EVERY:
                    self._cond.wait(left)
                    continue
                if self._cond.wait(IDLE_EVERY):
                    continue  # a request, a poke, an interrupt: read the pace again
                self._idling = True
            try:
                idle()
            finally:
                with self._cond:
                    self._idling = False
                    self._cond.notify_all()

    def wait_not_idling(self, timeout: float | None = None) -> bool:
        """Until no ``idle`` runs (one cannot be cut short), at most ``timeout`` seconds;
        whether none does."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._idling, timeout)

    def _left(self, pace: Pace, last_started: float) -> float:
        """Seconds until the next cycle is due (0 once interrupted); under the lock."""
        if self._interrupted:
            return 0.0
        deadline = pace.next_cycle(last_started, self._requested, self._due)
        self.waiting_until = deadline
        return deadline - self.clock()


def run_forever(
    reconciler: Reconciler,
    interval: float,
    stop: threading.Event,
    on_cycle: Callable[[CycleResult], None] = lambda _r: None,
    wake: Wakeup | None = None,
    *,
    min_gap: float = DEFAULT_MIN_GAP,
) -> None:
    """Run cycles every ``interval`` seconds, or sooner when ``wake`` asks (at most one per
    ``min_gap`` seconds), until ``stop``; between cycles, the watches' changes are folded
    into the observer (``Reconciler.fold_watch_changes``). Whoever sets ``stop`` must
    ``wake.interrupt()`` (``Loop`` does) to end a wait before its time."""
    wakeup = wake if wake is not None else Wakeup()
    pace = Pace(interval, min(min_gap, interval))
    while not stop.is_set():
        started = wakeup.clock()
        wakeup.begin_cycle()
        try:
            result = reconciler.run_once()
        except Exception:  # one bad cycle must not end the reconciler
            if stop.is_set():  # e.g. a create refused by a pool closed for shutdown
                log.info("cycle ended by shutdown", exc_info=True)
                return
            log.exception("cycle failed")
        else:
            on_cycle(result)
        finally:
            wakeup.end_cycle()
        if stop.is_set():
            return
        wakeup.wait(pace, started, lambda: _fold(reconciler))


def _fold(reconciler: Reconciler) -> None:
    """``Reconciler.fold_watch_changes`` between cycles; a failure is logged and left to the
    next cycle's read, which starts the observer's copy of the cluster afresh."""
    try:
        reconciler.fold_watch_changes()
    except Exception:
        log.exception("folding the watch changes failed")


class Loop:
    """``run_forever`` in a daemon thread, so that the main thread, which takes the
    signals, never waits on a cluster.

    ``request_stop`` is the signal handler: it only sets a flag (a handler that sets an
    Event can deadlock on the Event's lock if the main thread holds it); ``wait()``, in the
    main thread, turns the flag into ``stop`` (and ``wake``) within ``POLL`` seconds.

    ``on_cycle`` (metrics, the status commit) is the only step of a cycle waited for at
    shutdown: ``finish()`` waits for one in progress and lets no later one start, so a
    status commit is made whole or not at all. The cycle itself (reads, plan, converge) is
    left where it stands and ends with the process; a leader must close its writes first
    (its ``is_leader`` false once ``stopping``, then ``Reconciler.close``, which waits for
    the creates already sent): see ``reconciler run``."""

    def __init__(self, stop: threading.Event, wake: Wakeup | None = None) -> None:
        self.stop = stop
        self.wake = wake if wake is not None else Wakeup()
        self.error: BaseException | None = None
        self._requested = False
        self._on_cycle: Callable[[CycleResult], None] = lambda _r: None
        self._handoff = threading.Lock()
        self._finished = False
        self._thread: threading.Thread | None = None

    @property
    def stopping(self) -> bool:
        """True from the moment a stop was asked for (even from a signal handler)."""
        return self._requested or self.stop.is_set()

    def request_stop(self, *_: object) -> None:
        """Ask the loop to stop; safe in a signal handler (takes no lock)."""
        self._requested = True

    def start(
        self,
        reconciler: Reconciler,
        interval: float,
        on_cycle: Callable[[CycleResult], None] = lambda _r: None,
        *,
        min_gap: float = DEFAULT_MIN_GAP,
    ) -> None:
        self._on_cycle = on_cycle
        self._thread = threading.Thread(
            target=self._run,
            args=(reconciler, interval, min_gap),
            name="reconcile-loop",
            daemon=True,
        )
        self._thread.start()

    def _run(self, reconciler: Reconciler, interval: float, min_gap: float) -> None:
        try:
            run_forever(reconciler, interval, self.stop, self._hand_off, self.wake, min_gap=min_gap)
        except BaseException as exc:  # raised again in the main thread by wait()
            self.error = exc
            self._requested = True

    def _hand_off(self, result: CycleResult) -> None:
        with self._handoff:
            if not self._finished:
                self._on_cycle(result)

    def wait(self) -> None:
        """Block until a stop is asked for or the loop has ended; then set ``stop`` (and
        ``wake``). Re-raises what ended the loop, if anything did."""
        thread = self._thread
        while thread is not None and thread.is_alive() and not self.stopping:
            thread.join(POLL)
        self._set_stop()
        if self.error is not None:
            raise self.error

    def _set_stop(self) -> None:
        self._requested = True
        self.stop.set()
        self.wake.interrupt()  # end the wait for the next cycle at once

    def finish(self, timeout: float | None = None) -> bool:
        """Stop the loop: wait for a hand-off (``on_cycle``) or a fold of the watches'
        changes in progress, each up to ``timeout`` seconds, and start no other. True when
        the loop thread has ended; False when it was left in a cycle (or in a hand-off or
        fold that outlived ``timeout``)."""
        self._set_stop()
        held = self._handoff.acquire(timeout=-1 if timeout is None else timeout)
        self._finished = True
        if held:
            self._handoff.release()
        else:
            log.warning("shutdown: left a status write in progress after %ss", timeout)
        if self._thread is not None:  # a loop only waiting ends within a step
            # or once the fold it is in ends (its cluster views stay whole): that one is
            # waited for as long as the hand-off is
            self.wake.wait_not_idling(timeout)
            self._thread.join(LOOP_END if timeout is None else min(LOOP_END, timeout))
        return self._thread is None or not self._thread.is_alive()


def exit_process(code: int = 0) -> NoReturn:
    """End a long-running command once its shutdown is done, without the interpreter's
    finalization. Daemon threads may still run then (a cycle left blocked on a cluster
    read, watch threads, the file watcher's Rust loop): finalizing around them can abort
    the process (SIGABRT, a daemon thread holding stderr's lock at shutdown), and the
    collections at exit walk the whole heap (0.3 to 0.5 s) to free memory the OS takes back
    anyway. Logs and stdio are flushed first; sockets and files are closed by the OS."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def watch_files(repo: Path, changed: Callable[[], None], stop: threading.Event) -> None:
    """Call ``changed`` (which asks for a cycle) after each (debounced) batch of saved
    changes under ``repo``."""
    for _changes in watchfiles.watch(
        repo,
        debounce=300,
        stop_event=stop,
        watch_filter=lambda _change, path: "/.git/" not in path,
    ):
        changed()
