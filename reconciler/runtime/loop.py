"""The long-running loop: one cycle per interval until stopped.

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
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import watchfiles

from reconciler.runtime.cycle import CycleResult, Reconciler

log = logging.getLogger("reconciler.loop")

POLL = 0.05  # seconds between the main thread's checks of the stop flag


def run_forever(
    reconciler: Reconciler,
    interval: float,
    stop: threading.Event,
    on_cycle: Callable[[CycleResult], None] = lambda _r: None,
    wake: threading.Event | None = None,
) -> None:
    """Run cycles every ``interval`` seconds (or sooner when ``wake`` is set) until ``stop``."""
    while not stop.is_set():
        started = time.monotonic()
        try:
            result = reconciler.run_once()
        except Exception:  # one bad cycle must not end the reconciler
            if stop.is_set():  # e.g. a create refused by a pool closed for shutdown
                log.info("cycle ended by shutdown", exc_info=True)
                return
            log.exception("cycle failed")
        else:
            on_cycle(result)
        remaining = max(0.0, interval - (time.monotonic() - started))
        if wake is None:
            stop.wait(remaining)
        else:
            wake.wait(remaining)
            wake.clear()


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

    def __init__(self, stop: threading.Event, wake: threading.Event | None = None) -> None:
        self.stop = stop
        self.wake = wake
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
    ) -> None:
        self._on_cycle = on_cycle
        self._thread = threading.Thread(
            target=self._run, args=(reconciler, interval), name="reconcile-loop", daemon=True
        )
        self._thread.start()

    def _run(self, reconciler: Reconciler, interval: float) -> None:
        try:
            run_forever(reconciler, interval, self.stop, self._hand_off, wake=self.wake)
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
        if self.wake is not None:
            self.wake.set()  # end the wait for the next cycle at once

    def finish(self, timeout: float | None = None) -> bool:
        """Stop the loop: wait for a hand-off (``on_cycle``) in progress, up to ``timeout``
        seconds, and start no other. True when the loop thread has ended; False when it
        was left in a cycle (or in a hand-off that outlived ``timeout``)."""
        self._set_stop()
        held = self._handoff.acquire(timeout=-1 if timeout is None else timeout)
        self._finished = True
        if held:
            self._handoff.release()
        else:
            log.warning("shutdown: left a status write in progress after %ss", timeout)
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


def watch_files(repo: Path, wake: threading.Event, stop: threading.Event) -> None:
    """Set ``wake`` after each (debounced) batch of saved changes under ``repo``."""
    for _changes in watchfiles.watch(
        repo,
        debounce=300,
        stop_event=stop,
        watch_filter=lambda _change, path: "/.git/" not in path,
    ):
        wake.set()
