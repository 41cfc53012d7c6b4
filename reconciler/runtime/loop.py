"""The long-running loop: one cycle per interval until stopped."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import watchfiles

from reconciler.runtime.cycle import CycleResult, Reconciler

log = logging.getLogger("reconciler.loop")


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
            log.exception("cycle failed")
        else:
            on_cycle(result)
        remaining = max(0.0, interval - (time.monotonic() - started))
        if wake is None:
            stop.wait(remaining)
        else:
            wake.wait(remaining)
            wake.clear()


def watch_files(repo: Path, wake: threading.Event, stop: threading.Event) -> None:
    """Set ``wake`` after each (debounced) batch of saved changes under ``repo``."""
    for _changes in watchfiles.watch(
        repo,
        debounce=300,
        stop_event=stop,
        watch_filter=lambda _change, path: "/.git/" not in path,
    ):
        wake.set()
