"""Shards: each partition of the repo (``core/plan/partitions.py``) owned by one replica
through a Lease of its own, with leader election's semantics (``runtime/leader.py``).

Every ``retry_period`` a replica (``ShardManager.step``):

1. renews its membership Lease (``<name>-member-<hash of its identity>``, labelled) and
   lists the others: the live replicas are the members whose Lease has a holder and has
   not expired, as this replica has seen it (its own clock, never the holder's); one
   unchanged for ``FORGET_AFTER`` durations is deleted (a replica gone);
2. reads every partition's Lease (``<name>-shard-<partition id>``), so that an expired
   one is known from its holder's last renewal, not from when it was first looked at;
3. renews the partitions it holds; lets go of those no longer in the config, and of those
   above its fair share, ``ceil(partitions / live replicas)``, so a replica that joins
   gets its share;
4. below its share, takes free ones (never held, released, or expired), in an order of
   its own (a hash of its identity and the partition) so two replicas seldom race for one;
   but none while another replica holds a live Lease of a partition this one does not
   know: the two cut the partitions from a different config or status record (one has
   not read the newest yet), and a partition of one may share a cluster with the
   other's. Its holder lets it go once it cuts the same partitions, or it expires.

A partition is acted on only while its Lease is held within ``renew_deadline``
(``owns``), which is shorter than the Lease's duration: a replica that stops renewing
stops dispatching to a partition before another may take it. ``stop`` lets every Lease
go (the membership one too), so the others take its partitions at their next step.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from kubernetes import client

from reconciler.adapters.clock import SystemClock
from reconciler.adapters.kube import KubeError
from reconciler.adapters.lease import LeaseClient, LeaseRecord, delete_lease, list_leases
from reconciler.runtime.leader import Clock, LeaderElector, LeaseStore

log = logging.getLogger("reconciler.shards")

# a member's Lease unchanged for this many of its durations is a replica gone: deleted, so
# that restarts (a new identity each) do not pile Leases up in the namespace
FORGET_AFTER = 10

GROUP_LABEL = "reconciler.dev/shards"  # the ``--lease-name`` the replicas share
ROLE_LABEL = "reconciler.dev/lease"  # "member" or "shard"


class LeaseDirectory(Protocol):
    """Named Leases of one namespace, and a list of them by label."""

    def lease(self, name: str, labels: Mapping[str, str]) -> LeaseStore: ...

    def list(self, selector: str) -> Mapping[str, LeaseRecord]: ...

    def delete(self, name: str, record: LeaseRecord) -> None: ...


class KubeLeases:
    """A ``LeaseDirectory`` on the API server."""

    def __init__(self, api: client.ApiClient, namespace: str, request_timeout: float) -> None:
        self.api = api
        self.namespace = namespace
        self.request_timeout = request_timeout

    def lease(self, name: str, labels: Mapping[str, str]) -> LeaseStore:
        return LeaseClient(self.api, self.namespace, name, self.request_timeout, labels)

    def list(self, selector: str) -> Mapping[str, LeaseRecord]:
        return list_leases(self.api, self.namespace, selector, self.request_timeout)

    def delete(self, name: str, record: LeaseRecord) -> None:
        delete_lease(self.api, self.namespace, name, record.resource_version, self.request_timeout)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]


def fair_share(partitions: int, replicas: int) -> int:
    """The most partitions one replica takes: ``ceil(partitions / replicas)``."""
    return math.ceil(partitions / max(1, replicas))


class ShardManager:
    """Holds this replica's share of the partitions' Leases. ``assign`` the partition ids
    of the config in force, then ``start()`` (or call ``step()`` every ``retry_period``)."""

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
        leases: LeaseDirectory | None = None,
        on_change: Callable[[frozenset[str]], None] | None = None,
    ) -> None:
        if leases is None:
            if kube_api is None:
                raise ValueError("pass kube_api or leases")
            leases = KubeLeases(kube_api, namespace, renew_deadline / 2)
        self.leases = leases
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock: Clock = clock or SystemClock()
        self.on_change = on_change
        self._member = self._elector(
            f"{name}-member-{_digest(identity)}", {GROUP_LABEL: name, ROLE_LABEL: "member"}
        )
        self._selector = f"{GROUP_LABEL}={name},{ROLE_LABEL}=member"
        self._shards: dict[str, LeaderElector] = {}  # by partition id
        self._assigned: frozenset[str] = frozenset()
        self._members: dict[str, tuple[LeaseRecord, float]] = {}  # as last seen changed
        self._partitions: dict[str, tuple[LeaseRecord, float]] = {}  # likewise
        self._owned: frozenset[str] = frozenset()  # as the last step left them
        self.live = 1  # replicas counted by the last step
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _elector(self, lease: str, labels: Mapping[str, str]) -> LeaderElector:
        return LeaderElector(
            None,
            "",
            lease,
            self.identity,
            self.lease_duration,
            self.renew_deadline,
            self.retry_period,
            self.clock,
            lease=self.leases.lease(lease, labels),
        )

    def lease_name(self, partition: str) -> str:
        return f"{self.name}-shard-{partition}"

    # --- what the cycle asks -------------------------------------------------------------

    def assign(self, partitions: Iterable[str]) -> None:
        """The partitions of the config in force (the next step takes or lets go)."""
        with self._lock:
            self._assigned = frozenset(partitions)

    def owns(self, partition: str) -> bool:
        """Whether this replica may act on ``partition`` now (its Lease renewed within
        ``renew_deadline``)."""
        with self._lock:
            shard = self._shards.get(partition)
        return shard is not None and shard.is_leader()

    def retains(self) -> bool:
        """Whether this replica runs status retention: it holds the first partition (by
        id) of the config in force, so one replica squashes, not every shard. Its push is
        a compare-and-swap on the tip it squashed (``StatusBranch.retain``): a shard's
        write meanwhile makes it try again later, and is never overwritten."""
        with self._lock:
            first = min(self._assigned, default=None)
        return first is not None and self.owns(first)

    def owned(self) -> frozenset[str]:
        """The partitions this replica may act on now."""
        with self._lock:
            shards = dict(self._shards)
        return frozenset(p for p, shard in shards.items() if shard.is_leader())

    # --- one step ------------------------------------------------------------------------

    def _count_live(self) -> int:
        """This replica and the other members whose Lease is held and not expired."""
        now = self.clock.monotonic()
        try:
            listed = self.leases.list(self._selector)
        except KubeError as exc:
            log.warning("cannot list the replicas' Leases: %s", exc)
            return self.live  # the count of the last step stands
        seen: dict[str, tuple[LeaseRecord, float]] = {}
        for lease, record in listed.items():
            last = self._members.get(lease)
            seen[lease] = last if last is not None and record.same_claim(last[0]) else (record, now)
        self._members = seen
        for lease, (record, at) in seen.items():
            if lease != self._member.name and now >= at + FORGET_AFTER * record.duration_seconds:
                try:  # guarded by its resourceVersion: one renewed meanwhile is kept
                    self.leases.delete(lease, record)
                except KubeError:
                    continue  # renewed, or deleted by another replica
                log.info("shards: deleted the Lease of a replica gone", extra={"lease": lease})
        others = sum(
            1
            for lease, (record, at) in seen.items()
            if lease != self._member.name
            and record.holder
            and record.holder != self.identity
            and now < at + record.duration_seconds
        )
        return 1 + others

    def _unknown_held(self, assigned: frozenset[str]) -> bool:
        """Another replica holds a live Lease of a partition not in ``assigned`` (or the
        Leases cannot be listed: as if it did)."""
        now = self.clock.monotonic()
        try:
            listed = self.leases.list(f"{GROUP_LABEL}={self.name},{ROLE_LABEL}=shard")
        except KubeError as exc:
            log.warning("cannot list the partitions' Leases: %s", exc)
            return True
        seen: dict[str, tuple[LeaseRecord, float]] = {}
        for lease, record in listed.items():
            last = self._partitions.get(lease)
            seen[lease] = last if last is not None and record.same_claim(last[0]) else (record, now)
        self._partitions = seen
        known = {self.lease_name(p) for p in assigned}
        return any(
            lease not in known
            and record.holder
            and record.holder != self.identity
            and now < at + record.duration_seconds
            for lease, (record, at) in seen.items()
        )

    def step(self) -> None:
        """One round: membership, then renew, let go and take up to the fair share."""
        self._member.try_acquire_or_renew()
        live = self._count_live()
        with self._lock:
            assigned = self._assigned
            for partition in assigned - self._shards.keys():
                self._shards[partition] = self._elector(
                    self.lease_name(partition), {GROUP_LABEL: self.name, ROLE_LABEL: "shard"}
                )
            gone = {p: s for p, s in self._shards.items() if p not in assigned}
        for partition, shard in gone.items():  # no longer in the config: free for no one
            shard.stop(release=True)
            with self._lock:
                self._shards.pop(partition, None)
        share = fair_share(len(assigned), live)
        order = sorted(assigned, key=lambda p: _digest(self.identity, p))
        held: list[str] = []
        free: list[str] = []
        for partition in order:
            shard = self._shards[partition]
            if shard.holder() == self.identity and shard.is_leader():
                if shard.try_acquire_or_renew():
                    held.append(partition)
            elif shard.observe():
                free.append(partition)
        for partition in held[share:]:  # above the share: for a replica that joined
            self._shards[partition].release()
        held = held[:share]
        if free and len(held) < share and self._unknown_held(assigned):
            free = []  # the replicas cut different partitions: wait until they agree
        for partition in free:
            if len(held) >= share:
                break
            if self._shards[partition].try_acquire_or_renew():
                held.append(partition)
        owned = frozenset(held)
        with self._lock:
            changed, self._owned, self.live = owned != self._owned, owned, live
        if changed:
            log.info(
                "shards: holding %d of %d partitions (%d live replicas)",
                len(owned),
                len(assigned),
                live,
                extra={"identity": self.identity, "partitions": sorted(owned)},
            )
            if self.on_change is not None:
                self.on_change(owned)

    # --- background loop -----------------------------------------------------------------

    def start(self) -> None:
        """Step now, then every ``retry_period``, in a daemon thread."""
        if self._thread is not None:
            raise RuntimeError("the shard manager is already running")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="shards", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:  # never let the loop die: unrenewed Leases stop acting
                log.exception("shard step failed")
            self._stop.wait(self.retry_period)

    def stop(self, release: bool = True) -> None:
        """Stop stepping; with ``release``, let every Lease go (the others take the
        partitions at their next step). Without it, they expire (as after a crash)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=self.renew_deadline + 5)
        with self._lock:
            shards = list(self._shards.values())
        for shard in shards:
            shard.stop(release=release)
        self._member.stop(release=release)
        with self._lock:
            self._owned = frozenset()
