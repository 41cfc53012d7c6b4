"""A ``coordination.k8s.io/v1`` Lease, read and written directly with the client.

Writes carry the ``resourceVersion`` that was read (optimistic concurrency, like client-go's
``LeaseLock``): a write based on a stale read fails with ``LeaseConflict``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from reconciler.adapters.kube import KubeError

_UNREACHABLE = (OSError, urllib3.exceptions.HTTPError)


class LeaseConflict(KubeError):
    """The Lease changed since it was read (HTTP 409): read it again."""


class LeaseNotFound(KubeError):
    """The Lease does not exist (HTTP 404)."""


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease says about its holder. ``resource_version`` is empty before creation."""

    holder: str
    duration_seconds: int
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0
    resource_version: str = ""

    def same_claim(self, other: LeaseRecord | None) -> bool:
        """True when ``other`` records the same claim (holder, times, transitions)."""
        return other is not None and (
            self.holder,
            self.duration_seconds,
            self.acquire_time,
            self.renew_time,
            self.transitions,
        ) == (
            other.holder,
            other.duration_seconds,
            other.acquire_time,
            other.renew_time,
            other.transitions,
        )


def _format_time(value: datetime | None) -> str | None:
    # MicroTime: RFC 3339 with exactly six fractional digits, in UTC.
    return None if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _record(obj: dict[str, Any]) -> LeaseRecord:
    spec = obj.get("spec") or {}
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=_parse_time(spec.get("acquireTime")),
        renew_time=_parse_time(spec.get("renewTime")),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=str(obj["metadata"].get("resourceVersion", "")),
    )


def _error(exc: ApiException, what: str) -> KubeError:
    cls: type[KubeError] = KubeError
    if exc.status == 409:
        cls = LeaseConflict
    elif exc.status == 404:
        cls = LeaseNotFound
    message = str(exc.reason)
    with contextlib.suppress(ValueError):
        message = str(json.loads(exc.body or "{}").get("message", message))
    return cls(f"{what}: {message}", status=int(exc.status or 0))


class LeaseClient:
    """Get, create and update one named Lease (with ``labels``, which ``list_leases``
    selects by)."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        request_timeout: float = 5.0,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.coordination = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        self.request_timeout = request_timeout  # a hung call must not outlive a renew deadline
        self.labels = dict(labels or {})

    def _body(self, record: LeaseRecord) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if self.labels:
            metadata["labels"] = self.labels
        if record.resource_version:
            metadata["resourceVersion"] = record.resource_version
        spec = {
            "holderIdentity": record.holder,
            "leaseDurationSeconds": record.duration_seconds,
            "acquireTime": _format_time(record.acquire_time),
            "renewTime": _format_time(record.renew_time),
            "leaseTransitions": record.transitions,
        }
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    @staticmethod
    def _decode(response: Any) -> LeaseRecord:
        return _record(cast(dict[str, Any], json.loads(response.data)))

    def get(self) -> LeaseRecord | None:
        """The Lease as stored, or None when it does not exist."""
        try:
            resp = self.coordination.read_namespaced_lease(
                self.name,
                self.namespace,
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _error(exc, f"reading Lease {self.namespace}/{self.name}") from exc
        except _UNREACHABLE as exc:  # connection refused, timeouts
            raise KubeError(f"reading Lease {self.namespace}/{self.name}: {exc}") from exc
        return self._decode(resp)

    def create(self, record: LeaseRecord) -> LeaseRecord:
        """Create the Lease; ``LeaseConflict`` when another replica created it first."""
        try:
            resp = self.coordination.create_namespaced_lease(
                self.namespace,
                cast(Any, self._body(record)),
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
        except ApiException as exc:
            raise _error(exc, f"creating Lease {self.namespace}/{self.name}") from exc
        except _UNREACHABLE as exc:
            raise KubeError(f"creating Lease {self.namespace}/{self.name}: {exc}") from exc
        return self._decode(resp)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        """Replace the Lease if it still has ``record.resource_version``, else
        ``LeaseConflict`` (the API refuses Lease updates without one)."""
        try:
            resp = self.coordination.replace_namespaced_lease(
                self.name,
                self.namespace,
                cast(Any, self._body(record)),
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
        except ApiException as exc:
            raise _error(exc, f"updating Lease {self.namespace}/{self.name}") from exc
        except _UNREACHABLE as exc:
            raise KubeError(f"updating Lease {self.namespace}/{self.name}: {exc}") from exc
        return self._decode(resp)


def delete_lease(
    api: client.ApiClient,
    namespace: str,
    name: str,
    resource_version: str,
    request_timeout: float = 5.0,
) -> None:
    """Delete the Lease if it still has ``resource_version`` (else ``LeaseConflict``; gone
    already: ``LeaseNotFound``)."""
    coordination = client.CoordinationV1Api(api)
    try:
        coordination.delete_namespaced_lease(
            name,
            namespace,
            body=client.V1DeleteOptions(
                preconditions=client.V1Preconditions(resource_version=resource_version)
            ),
            _request_timeout=request_timeout,
        )
    except ApiException as exc:
        raise _error(exc, f"deleting Lease {namespace}/{name}") from exc
    except _UNREACHABLE as exc:
        raise KubeError(f"deleting Lease {namespace}/{name}: {exc}") from exc


def list_leases(
    api: client.ApiClient, namespace: str, selector: str, request_timeout: float = 5.0
) -> dict[str, LeaseRecord]:
    """The Leases of ``namespace`` that ``selector`` (a label selector) matches, by name."""
    coordination = client.CoordinationV1Api(api)
    try:
        resp = coordination.list_namespaced_lease(
            namespace,
            label_selector=selector,
            _preload_content=False,
            _request_timeout=request_timeout,
        )
    except ApiException as exc:
        raise _error(exc, f"listing Leases {selector} in {namespace}") from exc
    except _UNREACHABLE as exc:
        raise KubeError(f"listing Leases {selector} in {namespace}: {exc}") from exc
    items = cast(dict[str, Any], json.loads(cast(Any, resp).data)).get("items") or []
    return {str(item["metadata"]["name"]): _record(item) for item in items}
