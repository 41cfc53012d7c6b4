"""The Git webhook receiver (``runtime/webhook.py``): signature and token checks, payload
parsing, branch filtering, and, through the real HTTP server and loop, that a signed push
fetches and runs a cycle at once while a bad one triggers nothing."""

from __future__ import annotations

import collections
import hmac
import http.client
import json
import select
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from click.testing import CliRunner
from support.builders import World
from support.clocks import SteppedClock, VirtualClock
from support.fake_kube import FakeCluster, FakeKube

from reconciler.cli.main import cli
from reconciler.core.decision.trigger import Trigger
from reconciler.core.types import ClusterSpec, RepoSnapshot
from reconciler.runtime import http as http_server
from reconciler.runtime.cycle import CycleResult, Reconciler
from reconciler.runtime.http import HttpServer
from reconciler.runtime.loop import Loop, Wakeup
from reconciler.runtime.metrics import Metrics
from reconciler.runtime.service import PacedSource, Runtime
from reconciler.runtime.webhook import (
    MAX_BODY,
    SECRET_ENV,
    Receiver,
    Reply,
    WebhookConfigError,
    load_secret,
    sign,
)

SECRET = b"It's a Secret to Everybody"
PATIENCE = 10.0
INTERVAL = 60.0


def push(ref: str = "refs/heads/main", **extra: Any) -> bytes:
    return json.dumps({"ref": ref, "after": "ab" * 20, **extra}).encode()


class Pushes:
    def __init__(self) -> None:
        self.providers: list[str] = []

    def __call__(self, provider: str) -> None:
        self.providers.append(provider)


@pytest.fixture
def receiver() -> tuple[Receiver, Pushes]:
    pushes = Pushes()
    return Receiver(SECRET, "main", pushes), pushes


def github(body: bytes, event: str = "push", secret: bytes = SECRET) -> dict[str, str]:
    return {"X-GitHub-Event": event, "X-Hub-Signature-256": sign(secret, body)}


# --- signatures and tokens ----------------------------------------------------------------


def test_github_signature_is_hmac_sha256_of_the_body() -> None:
    # GitHub's documented example: secret "It's a Secret to Everybody", body "Hello, World!"
    assert sign(SECRET, b"Hello, World!") == (
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    )


def test_a_signed_github_push_to_the_branch_triggers(receiver: tuple[Receiver, Pushes]) -> None:
    hook, pushes = receiver
    body = push()
    reply = hook.handle(github(body), body)
    assert (reply.status, reply.triggered, reply.provider) == (202, True, "github")
    assert reply.message == "push to refs/heads/main: fetching refs/heads/main now"
    assert pushes.providers == ["github"]


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ({"X-GitHub-Event": "push"}, "without X-Hub-Signature-256"),
        ({"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=00"}, "does not match"),
        ({"X-GitHub-Event": "push", "X-Hub-Signature-256": "md5=00"}, "expected sha256="),
        ({"X-GitHub-Event": "push", "X-Hub-Signature-256": "garbage"}, "expected sha256="),
    ],
)
def test_a_github_push_without_a_good_signature_is_401(
    receiver: tuple[Receiver, Pushes], headers: dict[str, str], why: str
) -> None:
    hook, pushes = receiver
    reply = hook.handle(headers, push())
    assert reply.status == 401 and why in reply.message and not reply.triggered
    assert pushes.providers == []


@pytest.mark.parametrize(
    "headers",
    [
        {"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=\xe9\xe9"},
        {"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + "\u0663" * 64},
        {"X-Signature": "sha512=\xff"},
        {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "\udcff\xe9"},
    ],
)
def test_a_signature_that_is_not_ascii_is_401_not_an_internal_error(
    receiver: tuple[Receiver, Pushes], headers: dict[str, str]
) -> None:
    """A header value is any byte (decoded as Latin-1): ``compare_digest`` of non-ASCII
    ``str`` raised TypeError, answered 500 as if it were our bug."""
    hook, pushes = receiver
    reply = hook.handle(headers, push())
    assert reply.status == 401 and not reply.triggered, reply.message
    assert pushes.providers == []


def test_a_signature_by_another_secret_or_of_another_body_is_refused(
    receiver: tuple[Receiver, Pushes],
) -> None:
    hook, pushes = receiver
    body = push()
    assert hook.handle(github(body, secret=b"other"), body).status == 401
    assert hook.handle(github(body), push("refs/heads/main", forged=True)).status == 401
    assert pushes.providers == []


def test_header_names_are_case_insensitive_and_hex_case_too(
    receiver: tuple[Receiver, Pushes],
) -> None:
    hook, _ = receiver
    body = push()
    signature = sign(SECRET, body)
    headers = {"x-github-event": "push", "x-hub-signature-256": "SHA256=" + signature[7:].upper()}
    assert hook.handle(headers, body).status == 202


def test_gitlab_token_is_compared_with_the_secret(receiver: tuple[Receiver, Pushes]) -> None:
    hook, pushes = receiver
    body = push(object_kind="push")
    ok = hook.handle({"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": SECRET.decode()}, body)
    assert (ok.status, ok.provider) == (202, "gitlab")
    bad = hook.handle({"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "guess"}, body)
    assert bad.status == 401 and "does not match" in bad.message
    missing = hook.handle({"X-Gitlab-Event": "Push Hook"}, body)
    assert missing.status == 401 and "without X-Gitlab-Token" in missing.message
    assert pushes.providers == ["gitlab"]


def test_the_gitlab_token_comparison_does_not_depend_on_its_length(
    receiver: tuple[Receiver, Pushes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``compare_digest`` returns at once on inputs of different lengths: comparing the
    token with the secret itself told the secret's length by timing. Both are hashed
    first, so every comparison is of two equal-length digests."""
    hook, _ = receiver
    compared: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def recording(a: bytes, b: bytes) -> bool:
        compared.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", recording)
    body = push(object_kind="push")
    for token in ("x", "guess" * 40, SECRET.decode()):
        hook.handle({"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": token}, body)
    assert len(compared) == 3 and all(a == b == compared[0][0] for a, b in compared)


def test_generic_hmac_accepts_sha256_and_sha512(receiver: tuple[Receiver, Pushes]) -> None:
    hook, pushes = receiver
    body = b'{"branch": "main"}'
    for algorithm in ("sha256", "sha512"):
        reply = hook.handle({"X-Signature": sign(SECRET, body, algorithm)}, body)
        assert (reply.status, reply.provider) == (202, "generic")
    assert hook.handle({"X-Signature": "sha1=" + "0" * 40}, body).status == 401
    assert pushes.providers == ["generic", "generic"]


def test_generic_without_a_ref_asks_for_a_fetch(receiver: tuple[Receiver, Pushes]) -> None:
    hook, pushes = receiver
    for body in (b"", b"{}", b"not json, but signed"):
        assert hook.handle({"X-Signature": sign(SECRET, body)}, body).triggered
    assert len(pushes.providers) == 3


# --- payloads ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ref", ["refs/heads/feature", "refs/tags/main", "refs/heads/main-2", "main"]
)
def test_a_push_to_another_ref_is_acknowledged_and_ignored(
    receiver: tuple[Receiver, Pushes], ref: str
) -> None:
    hook, pushes = receiver
    body = push(ref)
    reply = hook.handle(github(body), body)
    assert reply.status == 200 and not reply.triggered
    assert reply.message == f"push to {ref} ignored: following refs/heads/main"
    assert reply.result == "ignored"
    assert pushes.providers == []


def test_github_ping_and_other_events_are_answered_not_triggered(
    receiver: tuple[Receiver, Pushes],
) -> None:
    hook, pushes = receiver
    body = b'{"zen": "Keep it logically awesome."}'
    assert hook.handle(github(body, "ping"), body) == Reply(200, "pong", False, "github")
    issue = hook.handle(github(body, "issues"), body)
    assert issue.status == 200 and "only push is read" in issue.message
    tag = hook.handle(
        {"X-Gitlab-Event": "Tag Push Hook", "X-Gitlab-Token": SECRET.decode()}, push()
    )
    assert tag.status == 200 and not tag.triggered
    assert pushes.providers == []


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"{not json", "body is not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"after": "x"}', "no ref in the payload"),
        (b'{"ref": 7}', "no ref in the payload"),
        (b"\xff\xfe", "body is not JSON"),
    ],
)
def test_a_malformed_signed_push_is_400(
    receiver: tuple[Receiver, Pushes], body: bytes, why: str
) -> None:
    hook, pushes = receiver
    reply = hook.handle(github(body), body)
    assert reply.status == 400 and why in reply.message and reply.result == "invalid"
    assert pushes.providers == []


def test_a_signed_body_nested_too_deeply_is_bad_input_not_a_bug(
    receiver: tuple[Receiver, Pushes],
) -> None:
    """json.loads raises RecursionError (not ValueError) on 100 000 nested arrays: a signed
    sender's bad payload was a 500, as if it were our bug."""
    hook, pushes = receiver
    body = b"[" * 100_000 + b"]" * 100_000
    reply = hook.handle(github(body), body)
    assert reply.status == 400 and "not JSON" in reply.message, reply.message
    reply = hook.handle({"X-Signature": sign(SECRET, body)}, body)
    assert reply.status == 202  # generic: a body that is no JSON object just asks for a fetch
    assert pushes.providers == ["generic"]


def test_a_form_encoded_github_push_says_to_send_json(
    receiver: tuple[Receiver, Pushes],
) -> None:
    """GitHub's other content type (``payload=<url-encoded JSON>``) was answered "body is
    not JSON: Expecting value", which does not say what to change."""
    hook, pushes = receiver
    body = b"payload=" + urllib.parse.quote_plus(push().decode()).encode()
    headers = {**github(body), "Content-Type": "application/x-www-form-urlencoded"}
    reply = hook.handle(headers, body)
    assert reply.status == 400 and not reply.triggered
    assert reply.message == (
        "github push: sent as application/x-www-form-urlencoded: set the webhook's content "
        "type to application/json"
    )
    assert pushes.providers == []


@pytest.mark.parametrize(
    "ref",
    ["refs/heads/dev\nwebhook: push to refs/heads/main: fetching", "refs/heads/" + "x" * 200_000],
)
def test_an_ignored_ref_is_quoted_on_one_short_line(
    receiver: tuple[Receiver, Pushes], ref: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The payload's ref was echoed raw into the one-line answer and the log: a newline
    forged a second line, a 200 KB ref was answered and logged whole."""
    hook, pushes = receiver
    body = push(ref)
    with caplog.at_level("INFO", logger="reconciler.webhook"):
        reply = hook.handle(github(body), body)
    assert reply.status == 200 and not reply.triggered
    assert len(reply.body.splitlines()) == 1 and len(reply.body) < 400
    assert reply.message.startswith("push to refs/heads/")
    assert reply.message.endswith("ignored: following refs/heads/main")
    assert all("\n" not in r.getMessage() and len(r.getMessage()) < 400 for r in caplog.records)
    assert pushes.providers == []


def test_an_unknown_sender_is_400(receiver: tuple[Receiver, Pushes]) -> None:
    hook, pushes = receiver
    reply = hook.handle({"Content-Type": "application/json"}, push())
    assert reply.status == 400 and "X-GitHub-Event" in reply.message
    assert pushes.providers == []


def test_a_full_ref_branch_is_followed_as_is() -> None:
    pushes = Pushes()
    hook = Receiver(SECRET, "refs/heads/release", pushes)
    body = push("refs/heads/release")
    assert hook.handle(github(body), body).triggered


# --- the secret ---------------------------------------------------------------------------


def test_the_secret_comes_from_a_file_or_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_bytes(b"s3cret\n")
    assert load_secret(path, {}) == b"s3cret"  # echo's newline dropped
    assert load_secret(path, {SECRET_ENV: "other"}) == b"s3cret"  # the file wins
    assert load_secret(None, {SECRET_ENV: "from-env"}) == b"from-env"
    assert load_secret(None, {}) is None
    path.write_bytes(b"\n")
    with pytest.raises(WebhookConfigError, match="is empty"):
        load_secret(path, {})
    with pytest.raises(WebhookConfigError, match="cannot read"):
        load_secret(tmp_path / "missing", {})
    with pytest.raises(ValueError, match="must not be empty"):
        Receiver(b"", "main", Pushes())


# --- through the HTTP server and the loop -----------------------------------------------


def post(url: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


class Served:
    """The real Loop, Reconciler and HTTP server over a fake cluster; the config source is
    paced at ``INTERVAL`` on a virtual clock, so only a webhook can make it read again."""

    def __init__(self) -> None:
        world = World().queue("team-a", quota={"nvidia.com/gpu": 2})
        world.op("p/a", gpu=1)
        self.compiled = world.repo()
        self.cluster = FakeCluster("local")
        self.clock = VirtualClock()
        self.wake = Wakeup(self.clock)
        self.reads = 0
        self.source = PacedSource(self._fetch, INTERVAL, self.clock)
        self.reconciler = Reconciler(
            self.source,
            self._connect,  # type: ignore[arg-type]
            SteppedClock(),
        )
        self.metrics = Metrics()
        self.runtime = Runtime(
            self.reconciler, None, self.metrics, wakeup=self.wake, source=self.source
        )
        counts = self.metrics.webhook_requests
        self.receiver = Receiver(
            SECRET,
            "main",
            self.runtime.webhook_push,
            on_reply=lambda r: counts.labels(r.provider, r.result).inc(),
        )
        self.server = HttpServer(
            "127.0.0.1:0", self.metrics.registry, lambda: True, webhook=self.receiver
        )
        self.loop = Loop(threading.Event(), self.wake)
        self.results: list[CycleResult] = []
        self.cycled = threading.Condition()

    def _fetch(self) -> RepoSnapshot:
        self.reads += 1
        return RepoSnapshot(files={}, version=f"v{self.reads}")

    def _connect(self, spec: ClusterSpec) -> Any:
        return FakeKube(self.cluster)

    def _on_cycle(self, result: CycleResult) -> None:
        with self.cycled:
            self.results.append(result)
            self.cycled.notify_all()

    def wait_cycles(self, count: int) -> None:
        with self.cycled:
            assert self.cycled.wait_for(lambda: len(self.results) >= count, PATIENCE)

    def start(self) -> None:
        self.server.start()
        self.loop.start(self.reconciler, INTERVAL, self._on_cycle, min_gap=0.0)

    def stop(self) -> None:
        self.loop.request_stop()
        self.loop.wait()
        self.loop.finish()
        self.server.stop()
        self.cluster.close()
        self.reconciler.close()


@pytest.fixture
def served() -> Iterator[Served]:
    harness = Served()
    with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: harness.compiled):
        harness.start()
        yield harness
        harness.stop()


def test_a_signed_push_through_http_fetches_and_cycles_at_once(served: Served) -> None:
    served.wait_cycles(1)
    assert served.reads == 1
    body = push()
    status, text = post(served.server.url, "/api/webhook", body, github(body))
    assert (status, text) == (202, "push to refs/heads/main: fetching refs/heads/main now\n")
    served.wait_cycles(2)  # the virtual clock never moved: the interval did not pass
    assert served.reads == 2  # the fetch bypassed the source's pace
    assert served.wake.counts[Trigger.WEBHOOK] == 1
    sample = served.metrics.registry.get_sample_value(
        "reconciler_webhook_requests_total", {"provider": "github", "result": "triggered"}
    )
    assert sample == 1.0


def test_the_receiver_path_is_the_same_with_a_trailing_slash_or_a_query(served: Served) -> None:
    """A webhook URL set to ``.../api/webhook/`` was answered 405 "not allowed here: GET,
    HEAD, OPTIONS", while the pages' routes ignore a trailing slash."""
    served.wait_cycles(1)
    body = push()
    for path in ("/api/webhook/", "/api/webhook?from=github"):
        status, text = post(served.server.url, path, body, github(body))
        assert status == 202, (path, text)
    assert served.wake.counts[Trigger.WEBHOOK] == 2


def test_bad_requests_through_http_never_trigger(served: Served) -> None:
    served.wait_cycles(1)
    url, body = served.server.url, push()
    cases = [
        ("/api/webhook", body, {"X-GitHub-Event": "push"}, 401),
        ("/api/webhook", body, github(body, secret=b"wrong"), 401),
        ("/api/webhook", b"{", github(b"{"), 400),
        ("/api/webhook", body, {"Content-Type": "application/json"}, 400),
        ("/api/webhook", push("refs/heads/dev"), github(push("refs/heads/dev")), 200),
        ("/api/other", body, github(body), 405),  # not the receiver: GET, HEAD, OPTIONS
    ]
    for path, payload, headers, expected in cases:
        status, text = post(url, path, payload, headers)
        assert status == expected, (path, headers, text)
        assert text.endswith("\n") and len(text.splitlines()) == 1
    assert served.wake.counts[Trigger.WEBHOOK] == 0
    assert served.wake.pending is None and served.reads == 1
    with served.cycled:
        assert len(served.results) == 1


def test_the_body_is_bounded_before_it_is_read(served: Served) -> None:
    host, port = served.server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:  # announce more than the limit and send nothing: answered without reading
        conn.putrequest("POST", "/api/webhook")
        conn.putheader("X-GitHub-Event", "push")
        conn.putheader("Content-Length", str(MAX_BODY + 1))
        conn.endheaders()
        resp = conn.getresponse()
        assert resp.status == 413 and b"at most" in resp.read()
    finally:
        conn.close()
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.putrequest("POST", "/api/webhook")
        conn.putheader("X-GitHub-Event", "push")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        resp = conn.getresponse()
        assert resp.status == 411 and b"Content-Length" in resp.read()
    finally:
        conn.close()
    assert served.wake.counts[Trigger.WEBHOOK] == 0


def raw_post(url: str, head: bytes, body: bytes = b"", wait: float = 5.0) -> bytes:
    """Send ``head`` (the headers after the request line, no blank line) and ``body`` as
    given, byte for byte; the whole answer (until the server closes)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as sock:
        sock.sendall(b"POST /api/webhook HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n" + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


@pytest.mark.parametrize(
    ("length", "expected"),
    [
        (b"Content-Length: 1_0", b"400"),  # int() took it as 10
        (b"Content-Length: +10", b"400"),
        (b"Content-Length: \xd9\xa1\xd9\xa0", b"400"),  # Arabic-Indic digits, as UTF-8
        (b"Content-Length: 10\r\nContent-Length: 12", b"400"),  # which one?
        (b"Content-Length: " + b"9" * 5000, b"413"),
    ],
)
def test_content_length_is_plain_ascii_digits_and_said_once(
    served: Served, length: bytes, expected: bytes
) -> None:
    body = b"0123456789"
    answer = raw_post(
        served.server.url,
        b"X-Signature: " + sign(SECRET, body).encode() + b"\r\n" + length + b"\r\n",
        body,
    )
    status, _, rest = answer.partition(b"\r\n")
    assert status.split(b" ")[1] == expected, answer
    assert rest.endswith(b"\n") and len(rest.split(b"\r\n\r\n", 1)[1].splitlines()) == 1
    assert served.wake.counts[Trigger.WEBHOOK] == 0


def test_a_body_that_does_not_arrive_in_time_is_408(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The body must arrive within ``BODY_SECONDS`` of the headers, however slowly it
    trickles."""
    monkeypatch.setattr(http_server, "BODY_SECONDS", 0.5)
    body = push()
    host, port = served.server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(
            b"POST /api/webhook HTTP/1.1\r\nHost: x\r\nX-Signature: "
            + sign(SECRET, body).encode()
            + f"\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        )
        answer = b""
        for byte in body[:-1]:  # never the last byte; each one well within the old timeout
            sock.sendall(bytes([byte]))
            ready, _, _ = select.select([sock], [], [], 0.1)
            if ready:
                break
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"not received within" in answer
    assert served.wake.counts[Trigger.WEBHOOK] == 0


def test_webhook_bodies_read_at_once_are_few(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every connection could hold a 5 MiB body (64 of them: 320 MiB, unauthenticated, as
    the signature is checked once the body is in): at most ``MAX_WEBHOOK_BODIES`` bodies
    are read at once (1 here), another push is 503 (the interval is the fallback)."""
    assert http_server.MAX_WEBHOOK_BODIES == 4
    monkeypatch.setattr(http_server, "MAX_WEBHOOK_BODIES", 1)
    url = served.server.url
    host, port = url.removeprefix("http://").split(":")
    body = push()
    with socket.create_connection((host, int(port)), timeout=5) as slow:
        slow.sendall(
            b"POST /api/webhook HTTP/1.0\r\nX-Signature: x\r\nContent-Length: 1000\r\n\r\n{"
        )
        for _ in range(100):  # until the server reads that body
            status, text = post(url, "/api/webhook", body, github(body))
            if status == 503:
                break
            time.sleep(0.02)
        assert (status, text) == (503, "busy: other webhook bodies are being read; retry later\n")
    for _ in range(100):  # that body's slot is back once its client is gone
        status, text = post(url, "/api/webhook", body, github(body))
        if status != 503:
            break
        time.sleep(0.02)
    assert status == 202, text


def test_a_flood_of_pushes_is_answered_and_coalesced(served: Served) -> None:
    """200 signed pushes at once: every one gets an answer (202, or 503 when the bodies
    being read are too many), none a reset (socketserver's listen backlog of 5 reset a
    burst; a refusal closed with the request unread was reset too); the pushes only ask
    for cycles (one fetch each, however many pushes it serves), nothing is queued."""
    served.wait_cycles(1)
    body = push()
    answers: list[int | str] = []

    def one() -> None:
        try:
            answers.append(post(served.server.url, "/api/webhook", body, github(body))[0])
        except OSError as exc:
            answers.append(type(exc).__name__)

    threads = [threading.Thread(target=one) for _ in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(answers) <= {202, 503}, collections.Counter(answers)
    assert served.wake.counts[Trigger.WEBHOOK] == answers.count(202)
    served.wait_cycles(2)
    with served.cycled:
        assert served.reads == len(served.results)  # a fetch per cycle, not per push


def test_without_a_secret_there_is_no_receiver() -> None:
    metrics = Metrics()
    server = HttpServer("127.0.0.1:0", metrics.registry, lambda: True)
    server.start()
    try:
        body = push()
        status, text = post(server.url, "/api/webhook", body, github(body))
        assert status == 404 and "--webhook-secret-file" in text
    finally:
        server.stop()


def test_a_push_told_during_a_read_still_makes_the_next_read_fresh() -> None:
    """The webhook may come while a fetch (started before the push) is running: that read
    must not count as the fresh one."""
    clock = VirtualClock()
    reads: list[int] = []
    source: PacedSource

    def fetch() -> RepoSnapshot:
        reads.append(len(reads))
        if len(reads) == 2:
            source.expire()  # the push is told while this fetch runs
        return RepoSnapshot(files={}, version=f"v{len(reads)}")

    source = PacedSource(fetch, INTERVAL, clock)
    assert source().version == "v1"
    assert source().version == "v1"  # paced
    source.expire()
    assert source().version == "v2"  # expired during this read...
    assert source().version == "v3"  # ...so the next one reads again
    assert source().version == "v3"


# --- the CLI ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "env", "message"),
    [
        (["--webhook-secret-file", "{empty}"], {}, "the file is empty"),
        (["--webhook-secret-file", "{missing}"], {}, "cannot read"),
        (["--webhook-secret-file", "{good}"], {}, "needs --http"),
        ([], {SECRET_ENV: "from-env"}, "needs --http"),
        (["--webhook-secret-file", "{good}", "--watch", "--http", ":0"], {}, "not with --watch"),
    ],
)
def test_run_refuses_a_receiver_it_cannot_serve(
    tmp_path: Path, extra: list[str], env: dict[str, str], message: str
) -> None:
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "good").write_bytes(SECRET)
    paths = {"empty": tmp_path / "empty", "missing": tmp_path / "nope", "good": tmp_path / "good"}
    args = [a.format(**paths) for a in extra]
    result = CliRunner().invoke(
        cli, ["run", "--repo", str(tmp_path), *args], env={SECRET_ENV: "", **env}
    )
    assert result.exit_code == 2, result.output
    assert message in result.output
