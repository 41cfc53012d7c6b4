"""``--auth kubernetes``: who may read the queue pages, ``/api/v1`` and operations' logs.

A request's ``Authorization: Bearer <token>`` (a CLI user's, or the one an auth proxy such
as oauth2-proxy sets) is checked with a ``TokenReview``, and what it asks for with a
``SubjectAccessReview``, both on one cluster's API server (``auth_cluster``):

- ``/healthz``, ``/readyz`` and ``/metrics``: open (the kubelet's probes, Prometheus);
- ``/operations/<project>/<op>`` and ``/api/v1/operations/<project>/<op>`` (the page shows
  the operation's log): ``get`` on ``operations.dispatch.reconciler.dev`` in the project's
  namespace;
- anything else (the queue pages, the rest of ``/api/v1``, a path that is not found):
  ``get`` on ``queues.dispatch.reconciler.dev``, cluster-wide.

What is asked depends on the path and the config only, never on whether the operation
exists, and a 403 names no namespace (the log does), so a denied user learns nothing of
which operations or projects there are. No token (or not a
bearer one) and a token the API server does not authenticate are 401 with
``WWW-Authenticate: Bearer``; a denial is 403; a review that fails (the cluster
unreachable) is 503, its cause in the log only, and is not remembered. Reviews are
remembered ``CACHE_SECONDS`` per token (by its SHA-256, never the token itself), at most
``CACHE_ENTRIES`` of them, the least recently used forgotten first: a page that refreshes
every 5 s costs no API call each time, and a revoked grant ends within ``CACHE_SECONDS``.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from reconciler.adapters.kube import (
    Identity,
    Kube,
    KubeError,
    ResourceAccess,
    connect_cluster,
)
from reconciler.core.types import CompiledRepo
from reconciler.runtime.service import Runtime

log = logging.getLogger("reconciler.auth")

GROUP = "dispatch.reconciler.dev"
QUEUES = ResourceAccess(GROUP, "queues", "get")
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
CACHE_SECONDS = 30.0
CACHE_ENTRIES = 4096
# A bearer token longer than this is refused unread (service account tokens are ~1 KiB,
# OIDC ID tokens a few).
MAX_TOKEN_BYTES = 16 << 10
CHALLENGE = (("WWW-Authenticate", 'Bearer realm="dispatch-reconciler"'),)


@dataclass(frozen=True, slots=True)
class AuthDecision:
    """What the server does with a request: ``status`` 0 serves it; 401, 403 or 503 answer
    ``message`` (one line) with ``headers``."""

    status: int = 0
    message: str = ""
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def allowed(self) -> bool:
        return self.status == 0


ALLOWED = AuthDecision()
# A review that failed: why (the API server's address, the reconciler's own RBAC) is for
# the log, not for whoever asked, who is no one yet.
UNCHECKED = AuthDecision(503, "cannot check access now; see the reconciler's log")
# (request headers as (name, value) pairs, path without the query) -> the decision
Authorize = Callable[[Iterable[tuple[str, str]], str], AuthDecision]


def required_access(path: str, namespace_of: Callable[[str], str]) -> ResourceAccess | None:
    """What ``path`` needs (None: open to anyone), split as the pages' routes split it
    (``runtime/web.py``: each segment unquoted)."""
    if path in OPEN_PATHS:
        return None
    parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
    if parts[:1] == ["operations"] and len(parts) == 3:
        project = parts[1]
    elif parts[:3] == ["api", "v1", "operations"] and len(parts) == 5:
        project = parts[3]
    else:
        return QUEUES
    return ResourceAccess(GROUP, "operations", "get", namespace_of(project))


def bearer_token(headers: Iterable[tuple[str, str]]) -> str | None:
    """The token of the one ``Authorization: Bearer <token>`` header, or None."""
    values = [v for k, v in headers if k.lower() == "authorization"]
    if len(values) != 1:
        return None
    scheme, _, token = values[0].strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token or len(token) > MAX_TOKEN_BYTES:
        return None
    return token


def project_namespaces(compiled: CompiledRepo) -> dict[str, str]:
    """Each project's namespace, from its operations (a project's operations all run in its
    namespace; one without any falls back to the default, its own name)."""
    return {op.project: op.namespace for op in compiled.operations}


def auth_cluster(compiled: CompiledRepo, wanted: str | None) -> str:
    """The cluster whose API server reviews tokens and access: ``wanted`` (``--auth-cluster``),
    else the first (by name) the reconciler reaches with its in-cluster service account (its
    home cluster), else the first by name. ``KubeError`` when there is none."""
    if wanted is not None:
        if wanted not in compiled.clusters:
            raise KubeError(f"--auth-cluster {wanted}: no such cluster in the config")
        return wanted
    names = sorted(compiled.clusters)
    home = [n for n in names if compiled.clusters[n].kubeconfig.get("inCluster")]
    if not (home or names):
        raise KubeError("the config has no cluster to review tokens with")
    return (home or names)[0]


class KubernetesAuth:
    """``auth(headers, path)``: the ``AuthDecision`` for one request, from reviews asked
    of ``kube()`` (the reviewing cluster's client; ``KubeError`` when there is none) and
    remembered by ``clock`` (monotonic seconds)."""

    def __init__(
        self,
        kube: Callable[[], Kube],
        namespace_of: Callable[[str], str],
        *,
        clock: Callable[[], float] = time.monotonic,
        cache_seconds: float = CACHE_SECONDS,
        cache_entries: int = CACHE_ENTRIES,
    ) -> None:
        self._kube = kube
        self._namespace_of = namespace_of
        self._clock = clock
        self._seconds = cache_seconds
        self._entries = cache_entries
        self._lock = threading.Lock()
        # (token digest, None) -> Identity | None; (token digest, access) -> allowed
        self._cache: OrderedDict[
            tuple[str, ResourceAccess | None], tuple[float, Identity | bool | None]
        ] = OrderedDict()

    def __call__(self, headers: Iterable[tuple[str, str]], path: str) -> AuthDecision:
        access = required_access(path, self._namespace_of)
        if access is None:
            return ALLOWED
        token = bearer_token(headers)
        if token is None:
            return AuthDecision(
                401, "authentication required: send Authorization: Bearer <token>", CHALLENGE
            )
        digest = hashlib.sha256(token.encode()).hexdigest()
        try:
            who = self._remembered(digest, None, lambda: self._kube().review_token(token))
            if not isinstance(who, Identity):
                return AuthDecision(401, "the bearer token is invalid or expired", CHALLENGE)
            identity = who
            allowed = self._remembered(
                digest, access, lambda: self._kube().review_access(identity, access)
            )
        except KubeError as exc:
            log.warning("auth: cannot review a request for %s: %s", path[:200], exc)
            return UNCHECKED
        if not allowed:
            where = f" in namespace {access.namespace}" if access.namespace else ""
            log.info(
                "auth: %s denied %s (%s %s.%s%s)",
                identity.username,
                path[:200],
                access.verb,
                access.resource,
                access.group,
                where,
            )
            # the namespace is the operator's to read: in the answer, it would tell which
            # projects there are (one not in the config is asked of its own name's)
            where = " in the operation's namespace" if access.namespace else ""
            return AuthDecision(
                403,
                f"forbidden: {identity.username} may not {access.verb} "
                f"{access.resource}.{access.group}{where}",
            )
        return ALLOWED

    def _remembered(
        self,
        digest: str,
        access: ResourceAccess | None,
        review: Callable[[], Identity | bool | None],
    ) -> Identity | bool | None:
        """The review's answer within ``cache_seconds`` of asking it, else asked now (a
        failure raises, and is not remembered)."""
        key = (digest, access)
        now = self._clock()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now:
                # the least recently used go first: forged tokens flush no active user
                self._cache.move_to_end(key)
                return hit[1]
        answer = review()
        with self._lock:
            self._cache[key] = (now + self._seconds, answer)
            self._cache.move_to_end(key)
            while len(self._cache) > self._entries:
                self._cache.popitem(last=False)
        return answer


def make_kubernetes_auth(
    runtime: Runtime, overrides: Mapping[str, Path], cluster: str | None
) -> KubernetesAuth:
    """``KubernetesAuth`` over ``runtime``'s latest config: its reviewing cluster
    (``auth_cluster``) and its projects' namespaces."""
    clients: dict[str, Kube] = {}
    namespaces: list[tuple[str, dict[str, str]]] = []  # (config version, project namespaces)
    lock = threading.Lock()

    def compiled() -> CompiledRepo | None:
        last = runtime.completed
        return last.compiled if last is not None else None

    def kube() -> Kube:
        config = compiled()
        if config is None:
            raise KubeError("no valid config has been loaded yet")
        name = auth_cluster(config, cluster)
        with lock:
            client = clients.get(name)
            if client is None:
                spec = config.clusters[name]
                api = connect_cluster(spec.kubeconfig, spec.context, overrides.get(name))
                client = clients[name] = Kube(api)
            return client

    def namespace_of(project: str) -> str:
        config = compiled()
        if config is None:
            return project
        with lock:
            if not namespaces or namespaces[0][0] != config.version:
                namespaces[:] = [(config.version, project_namespaces(config))]
            return namespaces[0][1].get(project, project)

    return KubernetesAuth(kube, namespace_of)
