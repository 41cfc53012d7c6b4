"""Watches read straight off a connection of the client's pool (``Kube.watch_managed``
through ``http1.stream``), against a scripted HTTP/1.1 server: the request the client's
list method would send (selectors, resourceVersion, bookmarks, timeoutSeconds, the bearer
token), events in chunks cut anywhere, a 410 (an answer or an ERROR event), a PyTorchJob
not served, a read that waits too long, an event that never ends, a connection cut
mid-chunk, what happens to the connection after a watch ends or is left, and a watch
through a proxy (urllib3 reads it, as before)."""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes import client, config
from support.apiserver import Server, fixed, serving
from support.helpers import write_kubeconfig

import reconciler.adapters.kube as kube_module
from reconciler.adapters import http1
from reconciler.adapters.kube import Kube, KubeError, NotServed, WatchExpired, bounded

POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "12"}}


def event(kind: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


def streamed(
    body: bytes, size: int = 5, piece: int = 11, end: bool = True, extra: bytes = b""
) -> list[bytes]:
    """A 200 answer (with the headers ``extra``) with ``body`` in chunks of ``size`` bytes,
    sent ``piece`` bytes at a time (so reads end anywhere); with ``end``, the last chunk
    and a trailer."""
    wire = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + extra
    wire += b"Transfer-Encoding: chunked\r\n\r\n"
    for i in range(0, len(body), size):
        part = body[i : i + size]
        wire += f"{len(part):x};n={i}\r\n".encode() + part + b"\r\n"
    if end:
        wire += b"0\r\nX-Trailer: t\r\n\r\n"
    return [wire[i : i + piece] for i in range(0, len(wire), piece)]


@pytest.fixture
def watching(tmp_path: Path) -> Iterator[Callable[..., tuple[Server, Kube]]]:
    with serving(tmp_path) as make:
        yield make


def test_a_watch_sends_the_list_request_and_reads_events_cut_anywhere(watching: Any) -> None:
    pods = [{**POD, "metadata": {**POD["metadata"], "resourceVersion": str(v)}} for v in (12, 13)]
    body = event("ADDED", pods[0]) + b"\n" + event("BOOKMARK", pods[1]) + event("DELETED", POD)
    server, kube = watching(lambda _h: streamed(body), lambda _h: streamed(b""))
    events = list(kube.watch_managed("Pod", "11", timeout_seconds=7, selector="a=b", fields="x!=y"))
    assert [(e.type, e.object["metadata"]["resourceVersion"]) for e in events] == [
        ("ADDED", "12"),
        ("BOOKMARK", "13"),
        ("DELETED", "12"),
    ]
    head = server.requests[0][0].decode()
    lines = head.split("\r\n")
    assert lines[0] == (
        "GET /api/v1/pods?labelSelector=a%3Db&fieldSelector=x%21%3Dy&resourceVersion=11"
        "&allowWatchBookmarks=true&timeoutSeconds=7&watch=true HTTP/1.1"
    )
    assert "authorization: bearer t" in [line.lower() for line in lines]
    assert "accept: application/json" in [line.lower() for line in lines]
    # a watch read to its end hands its connection back for the next one
    assert list(kube.watch_managed("Job", "5")) == []
    assert server.connections == 1
    assert server.requests[1][0].startswith(b"GET /apis/batch/v1/jobs?labelSelector=")


def test_a_narrow_watch_decodes_the_fields_observation_reads(watching: Any) -> None:
    job = {
        "metadata": {
            "name": "j",
            "uid": "u",
            "resourceVersion": "3",
            "managedFields": [{"manager": "m"}],
        },
        "spec": {"template": {"spec": {"volumes": [{"name": "v"}]}}},
        "status": {"conditions": [{"type": "Complete", "status": "True"}]},
    }
    _, kube = watching(lambda _h: streamed(event("MODIFIED", job), size=64))
    [got] = list(kube.watch_managed("Job", "1", narrow=True))
    assert got.object["status"]["conditions"][0]["type"] == "Complete"
    assert "managedFields" not in got.object["metadata"]
    assert "volumes" not in got.object["spec"]["template"]["spec"]


def test_gone_is_watch_expired_as_an_answer_or_an_event(watching: Any) -> None:
    gone = {"kind": "Status", "status": "Failure", "message": "too old", "code": 410}
    _, kube = watching(
        lambda _h: fixed("410 Gone", orjson.dumps(gone)),
        lambda _h: streamed(event("ADDED", POD) + event("ERROR", gone)),
    )
    with pytest.raises(WatchExpired, match="too old"):
        list(kube.watch_managed("Pod", "1"))
    events = kube.watch_managed("Pod", "1", narrow=True)
    assert next(events).type == "ADDED"
    with pytest.raises(WatchExpired, match="too old"):
        next(events)


def test_a_pytorchjob_not_served_is_not_served(watching: Any) -> None:
    missing = {"kind": "Status", "reason": "NotFound", "message": "not found", "code": 404}
    server, kube = watching(
        lambda _h: fixed("404 Not Found", orjson.dumps(missing)),
        lambda _h: fixed("403 Forbidden", b'{"message": "no", "code": 403}'),
    )
    with pytest.raises(NotServed):
        list(kube.watch_managed("PyTorchJob", "1"))
    with pytest.raises(KubeError, match="no") as raised:
        list(kube.watch_managed("Job", "1"))
    assert raised.value.status == 403 and not isinstance(raised.value, NotServed)
    assert server.requests[0][0].startswith(b"GET /apis/kubeflow.org/v1/pytorchjobs?")


def test_a_watch_left_mid_way_closes_its_connection(watching: Any) -> None:
    body = event("ADDED", POD) * 3
    server, kube = watching(
        lambda _h: streamed(body, end=False), lambda _h: fixed("200 OK", b'{"kind":"JobList"}')
    )
    events = kube.watch_managed("Pod", "1")
    assert next(events).type == "ADDED"
    events.close()  # the informer stops
    assert kube.list_managed("Job").items == ()  # on a new connection, not the watch's
    assert server.connections == 2


def test_a_connection_cut_mid_chunk_is_a_lost_connection(watching: Any) -> None:
    pieces = streamed(event("ADDED", POD) * 2, size=4096, end=False)
    cut = b"".join(pieces)[:-20]
    _, kube = watching(lambda _h: [cut, b""])
    events = kube.watch_managed("Pod", "1")
    assert next(events).type == "ADDED"
    with pytest.raises(KubeError, match=r"connection lost: .*closed in the middle"):
        next(events)


def test_a_silent_watch_ends_after_its_read_timeout(
    watching: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube_module, "WATCH_READ_GRACE", 0.3)
    _, kube = watching(lambda _h: streamed(event("ADDED", POD), end=False))
    started = time.monotonic()
    events = kube.watch_managed("Pod", "1", timeout_seconds=0)
    assert next(events).type == "ADDED"
    with pytest.raises(KubeError, match="connection lost"):
        next(events)
    assert time.monotonic() - started < 5.0


def test_an_event_that_never_ends_is_an_error_not_a_growing_buffer(
    watching: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http1, "MAX_LINE", 50_000)
    _, kube = watching(lambda _h: streamed(b"{" + b" " * 200_000, size=8192, piece=8192))
    with pytest.raises(KubeError, match="longer than 50000 bytes"):
        list(kube.watch_managed("Pod", "1"))


def test_a_gzip_watch_is_read(watching: Any) -> None:
    body = gzip.compress(event("ADDED", POD) + event("MODIFIED", POD))
    _, kube = watching(lambda _h: streamed(body, size=7, extra=b"Content-Encoding: gzip\r\n"))
    assert [e.type for e in kube.watch_managed("Pod", "1")] == ["ADDED", "MODIFIED"]


def test_through_a_proxy_urllib3_reads_the_watch(tmp_path: Path) -> None:
    gone = {"kind": "Status", "message": "too old", "code": 410}
    server = Server(
        [
            lambda _h: streamed(event("ADDED", POD) + event("DELETED", POD)),
            lambda _h: fixed("410 Gone", orjson.dumps(gone)),
        ]
    )
    try:
        configuration = client.Configuration()
        config.load_kube_config(
            config_file=str(write_kubeconfig(tmp_path / "kubeconfig", "http://apiserver.test")),
            client_configuration=configuration,
        )
        configuration.proxy = server.url()
        kube = Kube(bounded(client.ApiClient(configuration)))
        assert [e.type for e in kube.watch_managed("Pod", "1")] == ["ADDED", "DELETED"]
        with pytest.raises(WatchExpired, match="too old"):
            list(kube.watch_managed("Pod", "1"))
        # the proxy was asked for the apiserver's URL, in absolute form
        assert server.requests[0][0].startswith(b"GET http://apiserver.test/api/v1/pods?")
    finally:
        server.close()
