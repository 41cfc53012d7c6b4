"""Injectable fault points, so tests can say "die after the 2nd create, before the status
write" instead of relying on sleeps and luck.

``RECONCILER_FAULTS="after-create=2"`` makes the process SIGKILL itself the 2nd time it
reaches ``after-create``. Unset, every point is a no-op. The points, in cycle order:

- ``after-load``: the config read and compiled, nothing observed yet;
- ``after-observe``: the clusters listed, nothing planned;
- ``after-plan``: planned, nothing created;
- ``after-create``: after each workload created or adopted (``=3``: mid-converge, after
  the 3rd), before its Event and before the status write;
- ``after-stop``: after each workload deleted by a stop;
- ``before-status``: the cycle done, its status not written;
- ``after-status``: the status written (or found unchanged), metrics not updated yet.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Mapping

POINTS = (
    "after-load",
    "after-observe",
    "after-plan",
    "after-create",
    "after-stop",
    "before-status",
    "after-status",
)


class FaultPoints:
    def __init__(self, spec: Mapping[str, int] | None = None) -> None:
        unknown = set(spec or {}) - set(POINTS)
        if unknown:
            raise ValueError(f"unknown fault points {sorted(unknown)}; known: {', '.join(POINTS)}")
        self._remaining = dict(spec or {})
        self._lock = threading.Lock()  # creates hit after-create from a pool of threads

    @classmethod
    def from_env(cls, value: str | None = None) -> FaultPoints:
        text = os.environ.get("RECONCILER_FAULTS", "") if value is None else value
        spec: dict[str, int] = {}
        for item in filter(None, (part.strip() for part in text.split(","))):
            name, _, count = item.partition("=")
            spec[name] = int(count or "1")
        return cls(spec)

    def hit(self, point: str) -> None:
        with self._lock:
            left = self._remaining.get(point)
            if left is None:
                return
            if left <= 1:
                os.kill(os.getpid(), signal.SIGKILL)  # like kill -9: no cleanup, no flush
            self._remaining[point] = left - 1
