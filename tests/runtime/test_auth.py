"""``--auth kubernetes`` without a cluster: which access each path needs, the bearer
token's parsing, the review cache, and the answers over real HTTP (401, 403, 503) on the
example's pages. The reviews themselves (TokenReview, SubjectAccessReview, RBAC) are
exercised on the dev cluster: tests/cluster/test_auth_cluster.py."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from click.testing import CliRunner
from support.clocks import VirtualClock
from support.worlds import dispatched_states as _dispatched_states

from reconciler.adapters.kube import Identity, Kube, KubeError, ResourceAccess
from reconciler.cli.main import cli
from reconciler.core.compile import compile_repo
from reconciler.core.plan import plan_repo
from reconciler.core.types import ClusterSpec, RepoSnapshot
from reconciler.runtime import http
from reconciler.runtime.auth import (
    GROUP,
    QUEUES,
    AuthDecision,
    KubernetesAuth,
    auth_cluster,
    bearer_token,
    project_namespaces,
    required_access,
)
from reconciler.runtime.cycle import CycleResult
from reconciler.runtime.http import HttpServer
from reconciler.runtime.metrics import Metrics
from reconciler.runtime.web import WebApp

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NAMESPACES = {"vision": "team-a", "language": "team-b"}


def _ops(namespace: str) -> ResourceAccess:
    return ResourceAccess(GROUP, "operations", "get", namespace)


def _namespace_of(project: str) -> str:
    return NAMESPACES.get(project, project)


@pytest.mark.parametrize(
    ("path", "needed"),
    [
        ("/healthz", None),
        ("/readyz", None),
        ("/metrics", None),
        ("/healthz/", QUEUES),  # not the probe's path: a page that is not found
        ("/", QUEUES),
        ("/queues", QUEUES),
        ("/queues/team-a", QUEUES),
        ("/api/v1/queues", QUEUES),
        ("/api/v1/fleet", QUEUES),
        ("/api/v1/operations/vision", QUEUES),
        ("/nope", QUEUES),
        ("/operations/vision/train", _ops("team-a")),
        ("/operations/vision/nope/", _ops("team-a")),
        ("/operations/language/x", _ops("team-b")),
        ("/operations/other/x", _ops("other")),  # not in the config: its default namespace
        ("/api/v1/operations/language/x", _ops("team-b")),
        ("/operations/lang%75age/x", _ops("team-b")),  # unquoted, as the pages' routes are
        ("/operations/vision", QUEUES),
    ],
)
def test_each_path_needs_one_access(path: str, needed: ResourceAccess | None) -> None:
    assert required_access(path, _namespace_of) == needed


@pytest.mark.parametrize(
    ("headers", "token"),
    [
        ([("Authorization", "Bearer abc.def")], "abc.def"),
        ([("authorization", "bearer  abc ")], "abc"),
        ([], None),
        ([("Authorization", "Basic dXNlcjpwdw==")], None),
        ([("Authorization", "Bearer")], None),
        ([("Authorization", "Bearer a b")], None),
        ([("Authorization", "Bearer a"), ("Authorization", "Bearer b")], None),
        ([("Authorization", "Bearer " + "x" * ((16 << 10) + 1))], None),
    ],
)
def test_bearer_token(headers: list[tuple[str, str]], token: str | None) -> None:
    assert bearer_token(headers) == token


class Reviews:
    """The API server's answers: ``users`` by token, ``grants`` by user; each call counted.
    ``down`` makes every call fail as an unreachable cluster does."""

    def __init__(self) -> None:
        self.users = {"alice-token": "alice", "bob-token": "bob"}
        self.grants: dict[str, set[ResourceAccess]] = {"alice": {QUEUES, _ops("team-a")}}
        self.calls: list[str] = []
        self.down = False

    def review_token(self, token: str) -> Identity | None:
        self.calls.append("TokenReview")
        if self.down:
            raise KubeError("review_token: cluster unreachable: refused")
        name = self.users.get(token)
        return Identity(name, groups=("system:authenticated",)) if name else None

    def review_access(self, who: Identity, access: ResourceAccess) -> bool:
        self.calls.append(f"SubjectAccessReview {access.resource} {access.namespace}")
        if self.down:
            raise KubeError("review_access: cluster unreachable: refused")
        return access in self.grants.get(who.username, set())


def _auth(reviews: Reviews, clock: VirtualClock, entries: int = 100) -> KubernetesAuth:
    return KubernetesAuth(
        lambda: cast(Kube, reviews),
        _namespace_of,
        clock=clock,
        cache_seconds=30,
        cache_entries=entries,
    )


def _bearer(token: str) -> list[tuple[str, str]]:
    return [("Authorization", f"Bearer {token}")]


def test_decisions_and_their_cache() -> None:
    reviews, clock = Reviews(), VirtualClock()
    auth = _auth(reviews, clock)
    assert auth([], "/healthz").allowed and not reviews.calls
    missing = auth([], "/")
    assert missing.status == 401 and missing.headers[0][0] == "WWW-Authenticate"
    invalid = auth(_bearer("forged"), "/")
    assert (invalid.status, invalid.message) == (401, "the bearer token is invalid or expired")
    assert invalid.headers == missing.headers
    assert auth(_bearer("alice-token"), "/").allowed
    assert auth(_bearer("alice-token"), "/operations/vision/train").allowed
    denied = auth(_bearer("alice-token"), "/operations/language/x")
    assert denied.status == 403
    assert denied.message == (
        "forbidden: alice may not get operations.dispatch.reconciler.dev "
        "in the operation's namespace"
    )
    assert auth(_bearer("bob-token"), "/api/v1/queues").message == (
        "forbidden: bob may not get queues.dispatch.reconciler.dev"
    )
    calls = len(reviews.calls)
    # a page's refreshes within the cache's time: no API call
    for path in ("/", "/queues/team-a", "/operations/vision/other", "/operations/language/y"):
        auth(_bearer("alice-token"), path)
    auth(_bearer("forged"), "/")
    assert len(reviews.calls) == calls
    # a revoked grant ends when its review is forgotten
    reviews.grants["alice"].discard(QUEUES)
    clock.t = 29.9
    assert auth(_bearer("alice-token"), "/").allowed
    clock.t = 30.0
    assert auth(_bearer("alice-token"), "/").status == 403


def test_a_failed_review_is_503_and_not_remembered(caplog: pytest.LogCaptureFixture) -> None:
    reviews, clock = Reviews(), VirtualClock()
    auth = _auth(reviews, clock)
    reviews.down = True
    failed = auth(_bearer("alice-token"), "/")
    # the cause (an API server's address, the reconciler's own RBAC) is for the log only:
    # whoever asks need not be anyone yet
    assert failed == AuthDecision(503, "cannot check access now; see the reconciler's log")
    assert "cluster unreachable: refused" in caplog.text
    reviews.down = False
    assert auth(_bearer("alice-token"), "/").allowed


def test_the_cache_is_bounded() -> None:
    reviews, clock = Reviews(), VirtualClock()
    auth = _auth(reviews, clock, entries=4)
    for i in range(50):
        auth(_bearer(f"forged-{i}"), "/")
    assert len(auth._cache) == 4
    assert all("forged" not in str(key) for key in auth._cache)  # digests, not tokens


def test_forged_tokens_evict_the_least_recently_used_reviews_first() -> None:
    # a stream of forged tokens, each a review remembered, must not flush a user whose
    # page refreshes: every refresh would cost the API server two reviews again
    reviews, clock = Reviews(), VirtualClock()
    auth = _auth(reviews, clock, entries=4)
    assert auth(_bearer("alice-token"), "/").allowed  # two entries: who, and the access
    for i in range(20):
        auth(_bearer(f"forged-{i}"), "/")
        calls = len(reviews.calls)
        assert auth(_bearer("alice-token"), "/").allowed
        assert len(reviews.calls) == calls, i


@pytest.fixture
def cycle(template: RepoSnapshot) -> CycleResult:
    repo = compile_repo(replace(template, version="c0ffee" * 6 + "abcd"))
    states = _dispatched_states(repo, plan_repo(repo, [], NOW))
    plan = plan_repo(repo, [s.to_observed() for s in states.values()], NOW)
    return CycleResult(at=NOW, version=repo.version, compiled=repo, plan=plan, states=states)


def test_project_namespaces_and_the_reviewing_cluster(cycle: CycleResult) -> None:
    compiled = cycle.compiled
    assert compiled is not None
    assert project_namespaces(compiled) == NAMESPACES
    assert auth_cluster(compiled, None) == "local"
    assert auth_cluster(compiled, "local") == "local"
    with pytest.raises(KubeError, match="--auth-cluster nope: no such cluster in the config"):
        auth_cluster(compiled, "nope")
    several = replace(
        compiled,
        clusters={
            "b": ClusterSpec("b", kubeconfig={"path": "/k"}),
            "a": ClusterSpec("a", kubeconfig={"path": "/k"}),
            "home": ClusterSpec("home", kubeconfig={"inCluster": True}),
        },
    )
    assert auth_cluster(several, None) == "home"
    assert auth_cluster(replace(several, clusters={"b": several.clusters["b"]}), None) == "b"
    with pytest.raises(KubeError, match="no cluster"):
        auth_cluster(replace(compiled, clusters={}), None)


def _get(url: str, token: str | None = None, method: str = "GET") -> tuple[int, Any, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, resp.headers, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()


@pytest.fixture
def served(cycle: CycleResult) -> Iterator[tuple[str, Reviews]]:
    reviews = Reviews()

    def read_logs(cluster: str, namespace: str, pod: str, tail: int, container: str) -> str:
        return f"log of {namespace}/{pod}\n"

    app = WebApp(lambda: cycle, read_logs=read_logs)
    authorize = _auth(reviews, VirtualClock())
    server = HttpServer(
        "127.0.0.1:0", Metrics().registry, lambda: True, web=app, authorize=authorize
    )
    server.start()
    try:
        yield server.url, reviews
    finally:
        server.stop()


def test_pages_api_and_logs_over_http(served: tuple[str, Reviews], cycle: CycleResult) -> None:
    url, _ = served
    for probe in ("/healthz", "/readyz", "/metrics"):
        assert _get(url + probe)[0] == 200
    status, headers, body = _get(url + "/")
    assert status == 401 and headers["WWW-Authenticate"] == 'Bearer realm="dispatch-reconciler"'
    assert body == "authentication required: send Authorization: Bearer <token>\n"
    status, headers, body = _get(url + "/api/v1/queues", "forged")
    assert (status, headers["Content-Type"]) == (401, "application/json")
    assert json.loads(body) == {"error": "the bearer token is invalid or expired"}
    assert "WWW-Authenticate" in headers
    status, headers, _ = _get(url + "/", method="HEAD")
    assert status == 401 and "WWW-Authenticate" in headers

    assert _get(url + "/", "alice-token")[0] == 200
    assert _get(url + "/api/v1/queues", "alice-token")[0] == 200
    mine = next(s for s in cycle.states.values() if s.operation.startswith("vision/"))
    status, _, body = _get(url + "/operations/" + mine.operation, "alice-token")
    assert status == 200 and f"log of team-a/{mine.pod}" in body
    assert _get(url + "/api/v1/operations/" + mine.operation, "alice-token")[0] == 200

    # another team's operation: the same 403 whether it exists or not, and no log
    theirs = next(s for s in cycle.states.values() if s.operation.startswith("language/"))
    denied = _get(url + "/operations/" + theirs.operation, "alice-token")
    assert denied[0] == 403 and "log of" not in denied[2]
    assert denied[0::2] == _get(url + "/operations/language/nope", "alice-token")[0::2]
    # nor does it tell which projects there are, or their namespaces
    assert denied[0::2] == _get(url + "/operations/nosuch/nope", "alice-token")[0::2]
    status, headers, body = _get(url + "/api/v1/operations/" + theirs.operation, "alice-token")
    assert status == 403 and headers["Content-Type"] == "application/json"
    assert "WWW-Authenticate" not in headers
    assert json.loads(body)["error"].startswith("forbidden: alice may not get operations")
    # a user without the queues grant sees no page, found or not
    assert _get(url + "/", "bob-token")[0] == 403
    assert _get(url + "/queues/nope", "bob-token")[0] == 403


def test_an_unreachable_reviewer_is_503(served: tuple[str, Reviews]) -> None:
    url, reviews = served
    reviews.down = True
    status, _, body = _get(url + "/api/v1/queues", "alice-token")
    assert (status, json.loads(body)) == (
        503,
        {"error": "cannot check access now; see the reconciler's log"},
    )
    assert _get(url + "/healthz")[0] == 200


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "--repo", ".", "--auth-cluster", "x"], "--auth-cluster needs --auth kubernetes"),
        (["run", "--repo", ".", "--auth", "kubernetes"], "--auth protects the pages of --http"),
    ],
)
def test_auth_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and message in result.stderr, result.stderr


def test_stalled_reviews_hold_no_thread_of_the_pages_or_metrics(cycle: CycleResult) -> None:
    """Reviews wait on the API server (up to its read timeout): forged tokens sent while it
    hangs must not take the threads that compute /metrics and the pages."""
    reviews, release = Reviews(), threading.Event()
    answered = reviews.review_token

    def hanging(token: str) -> Identity | None:
        if token.startswith("forged"):
            release.wait(10)
        return answered(token)

    reviews.review_token = hanging  # type: ignore[method-assign]
    server = HttpServer(
        "127.0.0.1:0",
        Metrics().registry,
        lambda: True,
        web=WebApp(lambda: cycle),
        authorize=_auth(reviews, VirtualClock()),
    )
    server.start()
    stalled = [
        threading.Thread(target=_get, args=(server.url + "/", f"forged-{i}"), daemon=True)
        for i in range(2 * http.WORKERS)
    ]
    try:
        for thread in stalled:
            thread.start()
        time.sleep(0.3)
        started = time.monotonic()
        assert _get(server.url + "/metrics")[0] == 200
        assert time.monotonic() - started < 1
    finally:
        release.set()
        for thread in stalled:
            thread.join(5)
        server.stop()
