"""Leader election on a Lease, with client-go's semantics.

1. Read the Lease. None: create it holding it (a lost create race is a conflict).
2. When the record differs from the one last observed, note it and the local time.
3. Held by another identity and not expired: follow. Expiry is judged on the local
   monotonic clock, from when the record was last seen to change, plus the record's
   ``leaseDurationSeconds``; the holder's clock is never trusted.
4. Otherwise write our claim with the resourceVersion just read; a conflict means someone
   else wrote first, and we follow.

``is_leader()`` is False at once when a renewal fails (conflict, another holder, API error)
and when ``renew_deadline`` has passed since the last successful renewal, even if the
renew thread is stuck in a call. ``renew_deadline < lease_duration``, so a leader stops
acting before any follower may take over.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from kubernetes import client

from reconciler.adapters.clock import SystemClock
from reconciler.adapters.kube import KubeError
from reconciler.adapters.lease import LeaseClient, LeaseConflict, LeaseRecord

log = logging.getLogger("reconciler.leader")


class Clock(Protocol):
    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...


class LeaseStore(Protocol):
    def get(self) -> LeaseRecord | None: ...

    def create(self, record: LeaseRecord) -> LeaseRecord: ...

    def update(self, record: LeaseRecord) -> LeaseRecord: ...


def default_identity() -> str:
    """Unique per process: the host name plus a random suffix."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    """Holds or follows one Lease. Call ``start()`` for the background renew loop, or
    ``try_acquire_or_renew()`` yourself every ``retry_period``."""

    def __init__(
        self,
        kube_api: client.ApiClient | None,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Clock | None = None,
        *,
        lease: LeaseStore | None = None,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        if not identity:
            raise ValueError("identity must not be empty")
        if not lease_duration > renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if not renew_deadline > 1.2 * retry_period:
            raise ValueError("renew_deadline must be greater than 1.2 * retry_period")
        if lease is None:
            if kube_api is None:
                raise ValueError("pass kube_api or lease")
            lease = LeaseClient(kube_api, namespace, name, request_timeout=renew_deadline / 2)
        self.lease = lease
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock: Clock = clock or SystemClock()
        self.on_change = on_change
        self._lock = threading.Lock()
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None  # monotonic, taken before the write was sent
        self._leading = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- state -------------------------------------------------------------------------

    def is_leader(self) -> bool:
        """True while the last renewal is younger than the renew deadline. Past it, leading
        stops here and now (logged, ``on_change``), even while a renewal call still hangs."""
        with self._lock:
            valid = self._valid(self.clock.monotonic())
            expired = self._leading and not valid
        if expired:
            self._set_leading(
                False, f"renewal failed: none succeeded within {self.renew_deadline:g}s"
            )
        return valid

    def _valid(self, now: float) -> bool:
        return (
            self._leading
            and self._renewed_at is not None
            and now - self._renewed_at < self.renew_deadline
        )

    def holder(self) -> str:
        """The holder last observed ("" when unknown or released)."""
        with self._lock:
            return self._observed.holder if self._observed else ""

    def _set_leading(self, leading: bool, why: str) -> None:
        with self._lock:
            was = self._leading
            self._leading = leading
            if not leading:
                self._renewed_at = None
        if was != leading:
            if leading:
                log.info("became leader", extra={"lease": self.name, "identity": self.identity})
            else:
                log.warning(
                    "lost leadership: %s",
                    why,
                    extra={"lease": self.name, "identity": self.identity},
                )
            if self.on_change is not None:
                self.on_change(leading)

    def _stored(self, record: LeaseRecord, sent_at: float) -> None:
        with self._lock:
            self._observed = record
            self._observed_at = sent_at
            self._renewed_at = sent_at
        self._set_leading(True, "")

    # --- one attempt ---------------------------------------------------------------------

    def observe(self) -> bool:
        """Read the Lease and note it when it changed, claiming nothing; True when it is free
        for us (absent, released, ours, or expired as this replica has seen it). A replica
        that reads a Lease before it needs it judges its expiry from the holder's last
        renewal, not from when it first looked. An API error is not free."""
        sent_at = self.clock.monotonic()
        try:
            current = self.lease.get()
        except KubeError:
            return False
        if current is None:
            return True
        with self._lock:
            if not current.same_claim(self._observed):
                self._observed, self._observed_at = current, sent_at
            expires = self._observed_at + current.duration_seconds
        return not current.holder or current.holder == self.identity or sent_at >= expires

    def try_acquire_or_renew(self) -> bool:
        """One attempt to acquire or renew; True when we hold the Lease afterwards."""
        sent_at = self.clock.monotonic()
        now = self.clock.now()
        duration = max(1, math.ceil(self.lease_duration))
        try:
            current = self.lease.get()
            if current is None:
                claim = LeaseRecord(self.identity, duration, now, now, 0)
                self._stored(self.lease.create(claim), sent_at)
                return True
            with self._lock:
                if not current.same_claim(self._observed):
                    self._observed, self._observed_at = current, sent_at
                expires = self._observed_at + current.duration_seconds
            if current.holder and current.holder != self.identity and sent_at < expires:
                self._set_leading(False, f"the lease is held by {current.holder}")
                return False
            if current.holder == self.identity:
                acquired, transitions = current.acquire_time or now, current.transitions
            else:
                acquired, transitions = now, current.transitions + 1
            claim = LeaseRecord(
                self.identity, duration, acquired, now, transitions, current.resource_version
            )
            self._stored(self.lease.update(claim), sent_at)
            return True
        except LeaseConflict:
            self._set_leading(False, "the lease was written by another replica")
            return False
        except KubeError as exc:
            self._set_leading(False, f"renewal failed: {exc}")
            return False

    def release(self) -> bool:
        """Give the Lease up (clean shutdown) so another replica takes over at once.

        Stops leading first, then writes an empty holder with a 1 s duration, guarded by
        the last resourceVersion we wrote. False when we did not hold it."""
        with self._lock:
            held = self._leading and self._observed is not None
            record = self._observed
        self._set_leading(False, "released")
        if not held or record is None or record.holder != self.identity:
            return False
        now = self.clock.now()
        empty = LeaseRecord("", 1, None, now, record.transitions, record.resource_version)
        try:
            stored = self.lease.update(empty)
        except KubeError as exc:  # conflict: someone else holds it already
            log.warning("could not release the lease: %s", exc, extra={"lease": self.name})
            return False
        with self._lock:
            self._observed = stored
        log.info("released the lease", extra={"lease": self.name, "identity": self.identity})
        return True

    # --- background loop -------------------------------------------------------------------

    def start(self) -> None:
        """Try to acquire, then renew every ``retry_period``, in a daemon thread."""
        if self._thread is not None:
            raise RuntimeError("the elector is already running")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"leader-{self.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.try_acquire_or_renew()
            except Exception:  # never let the loop die: an unknown error loses the lease
                log.exception("leader election attempt failed", extra={"lease": self.name})
                self._set_leading(False, "unexpected error")
            self._stop.wait(self.retry_period)

    def stop(self, release: bool = True) -> None:
        """Stop renewing; with ``release``, give the Lease up. Without it, the Lease
        expires on its own (as after a crash)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=self.renew_deadline + 5)
        if release:
            self.release()
        else:
            self._set_leading(False, "stopped")
