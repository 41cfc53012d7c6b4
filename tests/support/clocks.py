"""Clocks a test moves by hand: the Reconciler's wall clock and a monotonic one."""

from __future__ import annotations

from datetime import datetime, timedelta

from support.builders import NOW


class SteppedClock:
    """A wall clock (``now()``) at ``at`` until the test moves it (``at = ...`` or
    ``advance``); ``monotonic()`` moves with it."""

    def __init__(self, at: datetime = NOW, monotonic: float = 0.0) -> None:
        self.at = at
        self._monotonic = monotonic

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)
        self._monotonic += seconds


class VirtualClock:
    """Monotonic seconds (called as ``clock()``), moved only by the test: ``clock.t = ...``."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t
