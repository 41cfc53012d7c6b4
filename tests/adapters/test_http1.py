"""Creates written and read straight on a kept-alive connection (``adapters/http1.py``),
against a scripted HTTP/1.1 server: answers of a fixed length or chunked (split anywhere,
with trailers), a connection the server closes while idle (replaced once), one closed
before an answer or silent (an error, in bounded time), ``Connection: close``, the bearer
token refreshed per request, and a 409 that ``create_or_adopt`` adopts."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from support.apiserver import Server, chunked, fixed, serving

import reconciler.adapters.kube as kube_module
from reconciler.adapters import http1
from reconciler.adapters.kube import Kube, KubeError

JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "j", "namespace": "ns", "annotations": {"a": "1"}},
    "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}},
}
CREATED = b'{"kind":"Job","metadata":{"name":"j","uid":"u-1","resourceVersion":"7","annotations":{"a":"1"},"managedFields":[{"manager":"x"}]},"spec":{}}'  # noqa: E501


@pytest.fixture
def server_kube(tmp_path: Path) -> Iterator[Callable[..., tuple[Server, Kube]]]:
    with serving(tmp_path) as make:
        yield make


def test_a_create_is_posted_and_its_answer_read_whole(server_kube: Any) -> None:
    server, kube = server_kube(
        lambda _h: fixed("201 Created", CREATED), lambda _h: chunked("201 Created", CREATED)
    )
    for _ in range(2):
        result = kube.create_or_adopt(JOB)
        assert (result.created, result.uid, result.resource_version) == (True, "u-1", "7")
        assert result.annotations == {"a": "1"}
    assert server.connections == 1  # kept alive between the two
    head, body = server.requests[0]
    lines = head.decode().split("\r\n")
    target = "/apis/batch/v1/namespaces/ns/jobs?fieldManager=dispatch-reconciler"
    assert lines[0] == f"POST {target} HTTP/1.1"
    assert f"Host: 127.0.0.1:{server.port}" in lines
    assert "authorization: bearer t" in [line.lower() for line in lines]
    assert body.startswith(b'{"apiVersion":"batch/v1"')


def test_the_token_is_refreshed_for_each_create(server_kube: Any) -> None:
    server, kube = server_kube(*[lambda _h: fixed("201 Created", CREATED)] * 2)
    tokens = iter(["first", "second"])

    def refresh(configuration: Any) -> None:
        configuration.api_key["BearerToken"] = f"Bearer {next(tokens)}"  # as kubeconfig sets it

    kube.api.configuration.refresh_api_key_hook = refresh
    kube.create_or_adopt(JOB)
    kube.create_or_adopt(JOB)
    seen = [head.lower() for head, _ in server.requests]
    assert b"authorization: bearer first" in seen[0]
    assert b"authorization: bearer second" in seen[1]


def test_an_existing_workload_is_adopted(server_kube: Any) -> None:
    conflict = b'{"kind":"Status","status":"Failure","reason":"AlreadyExists","code":409}'
    server, kube = server_kube(
        lambda _h: fixed("409 Conflict", conflict), lambda _h: fixed("200 OK", CREATED)
    )
    result = kube.create_or_adopt(JOB)
    assert (result.created, result.uid) == (False, "u-1")
    assert server.requests[1][0].startswith(b"GET /apis/batch/v1/namespaces/ns/jobs/j")


def test_another_error_is_the_apiservers_message(server_kube: Any) -> None:
    invalid = b'{"kind":"Status","reason":"Invalid","message":"spec.template: Required","code":422}'
    _, kube = server_kube(lambda _h: fixed("422 Unprocessable Entity", invalid))
    with pytest.raises(KubeError, match=r"spec\.template: Required") as raised:
        kube.create_or_adopt(JOB)
    assert (raised.value.status, raised.value.reason) == (422, "Invalid")


def test_a_connection_closed_while_idle_is_replaced_once(server_kube: Any) -> None:
    # the first answer says nothing of closing, then the server closes the connection
    # when the next request comes: that request goes again on a new connection
    server, kube = server_kube(
        lambda _h: fixed("201 Created", CREATED),
        lambda _h: None,
        lambda _h: fixed("201 Created", CREATED),
    )
    kube.create_or_adopt(JOB)
    assert kube.create_or_adopt(JOB).uid == "u-1"
    assert server.connections == 2
    assert len(server.requests) == 3


def test_connection_close_is_honoured(server_kube: Any) -> None:
    server, kube = server_kube(
        lambda _h: fixed("201 Created", CREATED, "Connection: close\r\n"),
        lambda _h: fixed("201 Created", CREATED),
    )
    kube.create_or_adopt(JOB)
    kube.create_or_adopt(JOB)
    assert server.connections == 2


def test_a_new_connection_closed_without_an_answer_fails(server_kube: Any) -> None:
    server, kube = server_kube(lambda _h: None, lambda _h: None)
    with pytest.raises(KubeError, match="unreachable"):
        kube.create_or_adopt(JOB)
    assert len(server.requests) == 1  # a fresh connection is not tried again


def test_an_answer_cut_short_fails_and_its_connection_is_dropped(server_kube: Any) -> None:
    server, kube = server_kube(
        lambda _h: [b"HTTP/1.1 201 Created\r\nContent-Length: 500\r\n\r\n{", b""],
        lambda _h: fixed("201 Created", CREATED),
    )
    with pytest.raises(KubeError, match="unreachable"):
        kube.create_or_adopt(JOB)
    assert kube.create_or_adopt(JOB).uid == "u-1"
    assert server.connections == 2


def test_a_silent_server_fails_the_create_in_bounded_time(
    server_kube: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube_module, "READ_TIMEOUT", 0.3)
    _, kube = server_kube(lambda _h: [])  # reads the request, never answers
    started = time.monotonic()
    with pytest.raises(KubeError, match="unreachable"):
        kube.create_or_adopt(JOB)
    assert time.monotonic() - started < 5.0


def test_a_line_break_in_a_header_is_refused() -> None:
    pool = urllib3.HTTPConnectionPool("127.0.0.1", 9)
    with pytest.raises(ValueError, match="line break"):
        http1.request(
            pool, "POST", "/x", "h", {"X-A": "a\r\nX-B: b"}, b"", connect_timeout=1, read_timeout=1
        )


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\nContent-Encoding: deflate\r\nContent-Length: 3\r\n\r\nabc",
    ],
)
def test_what_is_not_http_is_an_error(server_kube: Any, answer: bytes) -> None:
    _, kube = server_kube(lambda _h: [answer])
    with pytest.raises(KubeError, match="unreachable"):
        kube.create_or_adopt(JOB)


class _FlakyConnection(urllib3.connection.HTTPConnection):
    """Its first ``fails`` connects fail, as a refused or timed-out connect does."""

    fails = 0
    tries = 0

    def connect(self) -> None:
        _FlakyConnection.tries += 1
        if _FlakyConnection.tries <= _FlakyConnection.fails:
            raise urllib3.exceptions.NewConnectionError(self, "refused")
        super().connect()


@pytest.mark.parametrize(("fails", "works"), [(3, True), (4, False)])
def test_a_failed_connect_is_tried_again_three_times(fails: int, works: bool) -> None:
    server = Server([lambda _h: fixed("201 Created", CREATED)])
    try:
        pool = urllib3.HTTPConnectionPool("127.0.0.1", server.port)
        pool.ConnectionCls = _FlakyConnection
        _FlakyConnection.fails, _FlakyConnection.tries = fails, 0

        def post() -> http1.Answer:
            return http1.request(
                pool, "POST", "/x", "h", {}, b"{}", connect_timeout=1, read_timeout=1
            )

        if works:
            assert post().status == 201
        else:
            with pytest.raises(urllib3.exceptions.NewConnectionError):
                post()
        assert _FlakyConnection.tries == 4
    finally:
        server.close()


def test_a_closed_pool_is_replaced(server_kube: Any) -> None:
    server, kube = server_kube(*[lambda _h: fixed("201 Created", CREATED)] * 3)
    kube.create_or_adopt(JOB)
    kube.create_or_adopt(JOB)
    assert server.connections == 1  # the pool kept between creates, and its connection
    manager = kube.api.rest_client.pool_manager
    pool = manager.connection_from_url(server.url())
    manager.clear()  # the manager forgets its pools (ApiClient.close, an eviction)...
    pool.close()  # ...and the one the Kube kept is closed
    assert kube.create_or_adopt(JOB).uid == "u-1"
    assert server.connections == 2
