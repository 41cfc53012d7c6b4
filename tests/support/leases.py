"""Leases in memory: named records with resourceVersion checks and labels, as the API
server keeps them (the shard and leader tests' ``LeaseDirectory``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from reconciler.adapters.kube import KubeError
from reconciler.adapters.lease import LeaseConflict, LeaseNotFound, LeaseRecord


class MemoryLeases:
    """Every Lease of one namespace; ``down`` makes each call fail as an unreachable API."""

    def __init__(self) -> None:
        self.records: dict[str, LeaseRecord] = {}
        self.labels: dict[str, dict[str, str]] = {}
        self.version = 0
        self.down = False

    def lease(self, name: str, labels: Mapping[str, str]) -> NamedLease:
        return NamedLease(self, name, dict(labels))

    def list(self, selector: str) -> Mapping[str, LeaseRecord]:
        self.check()
        wanted = dict(term.split("=", 1) for term in selector.split(","))
        return {
            name: record
            for name, record in self.records.items()
            if wanted.items() <= self.labels[name].items()
        }

    def delete(self, name: str, record: LeaseRecord) -> None:
        self.check()
        current = self.records.get(name)
        if current is None:
            raise LeaseNotFound("not found", 404)
        if current.resource_version != record.resource_version:
            raise LeaseConflict("stale", 409)
        del self.records[name]
        del self.labels[name]

    def holders(self, prefix: str) -> dict[str, str]:
        """The holder of each Lease whose name starts with ``prefix`` ("" when free)."""
        return {n: r.holder for n, r in sorted(self.records.items()) if n.startswith(prefix)}

    def check(self) -> None:
        if self.down:
            raise KubeError("connection refused")

    def store(self, name: str, record: LeaseRecord, labels: dict[str, str]) -> LeaseRecord:
        self.version += 1
        self.records[name] = replace(record, resource_version=str(self.version))
        self.labels[name] = labels
        return self.records[name]


class NamedLease:
    """One Lease of a ``MemoryLeases``: a write with a stale resourceVersion conflicts."""

    def __init__(self, leases: MemoryLeases, name: str, labels: dict[str, str]) -> None:
        self.leases = leases
        self.name = name
        self.labels = labels

    def get(self) -> LeaseRecord | None:
        self.leases.check()
        return self.leases.records.get(self.name)

    def create(self, record: LeaseRecord) -> LeaseRecord:
        self.leases.check()
        if self.name in self.leases.records:
            raise LeaseConflict("already exists", 409)
        return self.leases.store(self.name, record, self.labels)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        self.leases.check()
        current = self.leases.records[self.name]
        if record.resource_version != current.resource_version:
            raise LeaseConflict("stale", 409)
        return self.leases.store(self.name, record, self.labels)
