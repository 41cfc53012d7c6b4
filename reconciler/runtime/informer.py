"""A list-then-watch cache of the objects we manage on one cluster, like client-go's
informers: list once, then watch from the list's resourceVersion, resume from the last
event's resourceVersion after a dropped connection, and relist when the apiserver answers
410 Gone (the version was compacted away).

``on_trigger`` is told of each event by which a Job's run ends (``core/decision/trigger.py``), and
of every relist after the first (events may have been missed), so that the loop can run a
cycle at once instead of at its interval.

An optional kind (a PyTorchJob: its CRD may not be installed) that the cluster does not
serve, or does not let us list, is an empty, synced cache: none of its objects can be ours
there. The informer lists it again every ``absent_retry`` seconds, so a CRD installed later
is seen without a restart.

With ``track``, the informer also keeps what changed since it was last asked (``changes``):
per uid, the object now or its deletion, in the order the cache changed. The cycle's
``Observer`` reads that, not the whole cache, and observes again only the workloads that
changed. A list (the first, after a 410, a kind no longer served) gives everything anew."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from reconciler.adapters.kube import MANAGED_SELECTOR, Kube, KubeError, NotServed, WatchExpired
from reconciler.core.decision.trigger import Trigger, event_trigger
from reconciler.core.observation.observe import CacheChanges, Change

log = logging.getLogger("reconciler.informer")


class Informer:
    def __init__(
        self,
        kube: Kube,
        kind: str,
        *,
        watch_timeout: int = 30,
        selector: str = MANAGED_SELECTOR,
        fields: str = "",
        on_trigger: Callable[[Trigger], None] | None = None,
        absent_retry: float = 30.0,
        narrow: bool = False,
        track: bool = False,
    ) -> None:
        """``selector`` and ``fields``: the label and field selectors of the objects
        cached (by default, the ones we manage); ``on_trigger`` is told of the events that
        should start a cycle; with ``narrow``, the cache keeps only the fields observation
        reads of each object (``Kube.watch_managed``): for the caches that only the
        observer and the triggers read; with ``track``, it keeps what changed for
        ``changes``, which one reader must then ask regularly."""
        self.kube = kube
        self.kind = kind
        self.selector = selector
        self.fields = fields
        self.watch_timeout = watch_timeout
        self.on_trigger = on_trigger
        self.narrow = narrow
        self._items: dict[str, Mapping[str, Any]] = {}  # by uid
        self._version: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._tried = threading.Event()  # set by the first list, or by a failure
        self._thread: threading.Thread | None = None
        self.relists = 0
        self.error = ""
        self.absent_retry = absent_retry
        self.served = True  # False while the cluster does not serve the kind (NotServed)
        self._retry = threading.Event()  # ends the wait to list an unserved kind again
        self.track = track
        self._changed: dict[str, Change] = {}  # since the last ``changes``, by uid
        self._reset = True  # the next ``changes`` gives everything (nothing read yet)

    # --- reading -----------------------------------------------------------------------

    def wait_synced(self, timeout: float) -> bool:
        """Whether the cache has listed, waiting up to ``timeout`` for it; False at once
        when a list or watch failed since (the caller lists afresh, and says why)."""
        self._tried.wait(timeout)
        return self._synced.is_set()

    @property
    def healthy(self) -> bool:
        return self._synced.is_set() and not self.error

    def items(self) -> tuple[Mapping[str, Any], ...]:
        with self._lock:
            return tuple(self._items.values())

    def changes(self, *, reset: bool = False) -> CacheChanges:
        """What changed since the last call (with ``track``), in the order the cache
        changed; everything it holds, as a reset, at the first call, after a list, or
        with ``reset`` (the reader's copy came from elsewhere, e.g. a fresh list)."""
        with self._lock:
            if self._reset or reset or not self.track:
                out = CacheChanges({u: (o, True) for u, o in self._items.items()}, reset=True)
            else:
                out = CacheChanges(self._changed)
            self._changed = {}
            self._reset = False
        return out

    @property
    def changed(self) -> bool:
        """Whether ``changes`` has anything to give now. Read without the lock: a hint that
        may be late by one event, for a reader that asks again soon (the loop's folds)."""
        return self._reset or bool(self._changed)

    def _log(self, uid: str, change: Change) -> None:
        """Keep a change for ``changes`` (under the lock). An object inserted anew goes
        last, as in the cache; a change in place keeps an insertion's mark. A log that a
        reader left unread grows no larger than the cache: it becomes a reset."""
        if not self.track or self._reset:
            return
        if change[1]:
            self._changed.pop(uid, None)
        elif change[0] is not None and uid in self._changed:
            change = (change[0], self._changed[uid][1])
        self._changed[uid] = change
        if len(self._changed) > 2 * len(self._items) + 1024:
            self._forget_changes()

    def _forget_changes(self) -> None:
        self._changed = {}
        self._reset = True

    @property
    def resource_version(self) -> str | None:
        with self._lock:
            return self._version

    # --- the loop ----------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"informer-{self.kind}", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._retry.set()

    def retry_now(self) -> None:
        """List an unserved kind again now, not at the end of ``absent_retry`` (the
        cluster's discovery says it serves the kind now)."""
        self._retry.set()

    def _relist(self) -> None:
        listed = self.kube.list_managed(
            self.kind, selector=self.selector, fields=self.fields, narrow=self.narrow
        )
        self.served = True
        with self._lock:
            self._items = {str(o["metadata"]["uid"]): o for o in listed.items}
            self._version = listed.resource_version
            self._forget_changes()
        relisted = self._synced.is_set()  # not the first list: a cycle is waiting for that
        self._synced.set()
        self._tried.set()
        if relisted and self.on_trigger is not None:
            self.on_trigger(Trigger.RELISTED)

    def _forget(self) -> bool:
        """Hold nothing (the cluster does not serve the kind); whether it held anything."""
        with self._lock:
            held = bool(self._items)
            self._items = {}
            self._version = None
            self._forget_changes()
        return held

    def _apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid"))
        with self._lock:
            before = self._items.get(uid)
            if event_type in ("ADDED", "MODIFIED"):
                self._items[uid] = obj
                self._log(uid, (obj, before is None))
            elif event_type == "DELETED" and before is not None:
                del self._items[uid]
                self._log(uid, (None, False))
            if meta.get("resourceVersion"):
                self._version = str(meta["resourceVersion"])
        if self.on_trigger is not None:
            trigger = event_trigger(self.kind, event_type, before, obj)
            if trigger is not None:
                self.on_trigger(trigger)

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                if self._version is None:
                    self._relist()
                    self.error = ""
                for event in self.kube.watch_managed(
                    self.kind,
                    str(self._version),
                    timeout_seconds=self.watch_timeout,
                    selector=self.selector,
                    fields=self.fields,
                    narrow=self.narrow,
                ):
                    self.error = ""  # the watch is back
                    self._apply(event.type, event.object)
                    if self._stop.is_set():
                        return
                self.error = ""
                backoff = 0.5
            except NotServed as exc:
                was_served = self.served
                held = self._forget()
                self.served = False
                self.error = ""
                if was_served:
                    log.info(
                        "%s not served: %s (listing again every %.0fs)",
                        self.kind,
                        exc,
                        self.absent_retry,
                    )
                relisted = self._synced.is_set()
                self._synced.set()
                self._tried.set()
                if relisted and held and self.on_trigger is not None:
                    self.on_trigger(Trigger.RELISTED)  # what it held is gone
                self._retry.wait(self.absent_retry)
                self._retry.clear()
            except WatchExpired:
                self.relists += 1
                log.info("%s watch expired (410): relisting", self.kind)
                with self._lock:
                    self._version = None
            except KubeError as exc:
                self.error = str(exc)
                self._tried.set()
                # Before the first list, the cycle waiting on this cache reports the cluster
                # (one line per attempt, runtime/cycle.py): this would say it three times.
                level = logging.WARNING if self._synced.is_set() else logging.DEBUG
                log.log(level, "%s watch failed: %s (retrying in %.1fs)", self.kind, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
