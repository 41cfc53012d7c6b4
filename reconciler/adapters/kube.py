"""Thin Kubernetes adapter: apply rendered workloads, list and watch what we manage.

Only I/O lives here; what to apply and what an object's state means are decided in core.
"""

from __future__ import annotations

import base64
import functools
import stat
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, ParamSpec, TypedDict, TypeVar, cast

import msgspec
import orjson
import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client import rest
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from reconciler.adapters import http1
from reconciler.core.decision.render import LABEL_MANAGED_BY, MAIN_CONTAINER, MANAGER
from reconciler.core.decision.render_kubeflow import API_VERSION as KUBEFLOW_API_VERSION
from reconciler.core.decision.render_kubeflow import KIND as PYTORCHJOB
from reconciler.core.decision.render_kubeflow import PLURAL as PYTORCHJOB_PLURAL
from reconciler.core.observation.observe import OBSERVED_FIELDS, cached
from reconciler.core.plan import BACKEND_APIS

MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGER}"
# Capacity observation (fleet queues): every Node, and every pod not terminated (anyone's).
ALL_OBJECTS = ""
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
APPLY_PATCH = "application/apply-patch+yaml"
CONNECTION_POOL_SIZE = 32
# Seconds to connect (TCP and TLS handshake) and to wait for each read of a response. The
# client's default is to wait forever: an apiserver that accepts connections and never
# answers would hang a cycle, and with it the process's shutdown. Every call without its
# own timeout gets these (a watch waits its ``timeout_seconds`` plus WATCH_READ_GRACE;
# a followed log has no read timeout).
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 30.0
WATCH_READ_GRACE = 30.0
# Seconds a watch waits, once it has read all that had come, before it reads again: the
# events that come meanwhile are read at once, with one wake-up of its thread instead of one
# each (in a dispatch, several events a second per watch; each wake-up also takes the GIL
# from the cycle). An event is seen at most this much later; cycles on events are at least
# 0.2 s apart anyway (runtime/loop.py DEFAULT_MIN_GAP), and an event that comes after a
# quiet spell is read at once.
WATCH_GATHER = 0.05


class KubeError(RuntimeError):
    """A Kubernetes call failed; ``status`` is the HTTP status (0 when unreachable)."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class NamespaceForbidden(KubeError):
    """The operation's namespace is missing and RBAC forbids creating it (or reading it)."""


class WatchExpired(KubeError):
    """The watch's resourceVersion is too old (HTTP 410): relist, then watch again."""


class NotServed(KubeError):
    """The cluster does not serve the kind (HTTP 404 on its collection: a custom resource
    whose CRD is not installed), or RBAC forbids listing it (403): none of its objects can
    be ours to see there."""


# The API versions of the workload kinds the reconciler creates (and of their Events).
API_VERSIONS = {"Job": "batch/v1", "Service": "v1", PYTORCHJOB: KUBEFLOW_API_VERSION}
_KUBEFLOW_GROUP, _KUBEFLOW_VERSION = KUBEFLOW_API_VERSION.split("/")
# Where each kind is listed and watched in every namespace.
_WATCH_PATHS = {
    "Job": "/apis/batch/v1/jobs",
    "Pod": "/api/v1/pods",
    "Service": "/api/v1/services",
    "Node": "/api/v1/nodes",
    PYTORCHJOB: f"/apis/{KUBEFLOW_API_VERSION}/{PYTORCHJOB_PLURAL}",
}
# Where each workload kind is created (the collection in ``{namespace}``).
_CREATE_PATHS = {
    "Job": "/apis/batch/v1/namespaces/{namespace}/jobs",
    "Service": "/api/v1/namespaces/{namespace}/services",
    PYTORCHJOB: f"/apis/{KUBEFLOW_API_VERSION}/namespaces/{{namespace}}/{PYTORCHJOB_PLURAL}",
}


@dataclass(frozen=True)
class ApplyResult:
    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    created: bool  # False when the object already existed and was adopted
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ObjectList:
    items: tuple[Mapping[str, Any], ...]
    resource_version: str


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Identity:
    """A bearer token's user, as the API server authenticated it (``review_token``)."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceAccess:
    """A ``SubjectAccessReview``'s resource attributes; ``namespace`` empty: cluster-wide."""

    group: str
    resource: str
    verb: str
    namespace: str = ""


def connect(kubeconfig: Path | None = None, context: str | None = None) -> client.ApiClient:
    """An API client from a kubeconfig file, or the in-cluster service account; a
    ``KubeError`` (one line) when it cannot be loaded."""
    configuration = client.Configuration()
    try:
        if kubeconfig is None:
            config.load_incluster_config(client_configuration=configuration)
        else:
            _check_shape(yaml.safe_load(kubeconfig.read_bytes()))
            config.load_kube_config(
                config_file=str(kubeconfig),
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
    except _BAD_KUBECONFIG as exc:
        where = f"kubeconfig {kubeconfig}" if kubeconfig is not None else "the in-cluster config"
        raise KubeError(f"cannot load {where}: {_one_line(exc)}") from exc
    # room for the watches, the pool of creates and the Event senders at once
    configuration.connection_pool_maxsize = CONNECTION_POOL_SIZE
    # No retries inside urllib3: each of its retries logged a "Retrying" warning (three per
    # failed attempt on a cluster that is down) before our own line. The runtime retries
    # with its own backoff and logs one line per failed attempt (docs/reliability.md).
    configuration.retries = NO_RETRIES
    return bounded(client.ApiClient(configuration))


def bounded(
    api: client.ApiClient, timeout: tuple[float, float] = (CONNECT_TIMEOUT, READ_TIMEOUT)
) -> client.ApiClient:
    """``api`` with ``timeout`` (connect, read) on every request that sets none itself."""
    send = api.rest_client.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        kwargs["_request_timeout"] = kwargs.get("_request_timeout") or timeout
        return send(method, url, *args, **kwargs)

    api.rest_client.request = request  # type: ignore[method-assign]  # one instance's
    return api


_UNREACHABLE = (OSError, urllib3.exceptions.HTTPError)
# urllib3's pools retry nothing: a failed request is one error, retried by the caller.
NO_RETRIES = urllib3.Retry(total=0, connect=0, read=0, redirect=0, status=0, other=0)


def _byte_lines(resp: Any, what: str, amt: int | None = 4096) -> Generator[bytes, None, None]:
    """Split a streamed body into lines (bytes, without the newline); the connection is
    released when done. ``amt=None`` yields each chunk as it arrives (a watch: no waiting
    for a full buffer)."""
    pending = b""
    done = False
    try:
        for chunk in resp.stream(amt, decode_content=True):
            pending += chunk
            *complete, pending = pending.split(b"\n")
            yield from complete
        done = True
        if pending:
            yield pending
    except _UNREACHABLE as exc:
        raise KubeError(f"{what}: {exc}") from exc
    finally:
        if not done:  # left mid-stream: the connection must not go back to the pool
            resp.close()
        resp.release_conn()


def _lines(resp: Any, what: str, amt: int | None = 4096) -> Iterator[str]:
    """``_byte_lines`` as text (a followed log)."""
    for line in _byte_lines(resp, what, amt):
        yield line.decode("utf-8", errors="replace")


@functools.lru_cache(maxsize=1024)
def _split_url(url: str) -> tuple[str, str, int | None, str, str]:
    """``url``'s scheme, host, port, request target (path and query) and Host header, as
    urllib3 parses it; remembered, as the creates of a namespace all post to one URL."""
    parsed = urllib3.util.parse_url(url)
    return str(parsed.scheme), str(parsed.host), parsed.port, parsed.request_uri, str(parsed.netloc)


def _loads(data: bytes | str) -> Any:
    """JSON from the apiserver, parsed with orjson (a watch event of a Job, a few KiB, in a
    fraction of the standard library's time: every event of every watched object passes
    here). ``ValueError`` when it is not JSON."""
    return orjson.loads(data)


T = TypeVar("T")


class _Event(TypedDict, Generic[T]):
    type: str
    object: T


# ``continue`` is a Python keyword: the functional form
_ListMeta = TypedDict("_ListMeta", {"resourceVersion": Any, "continue": Any}, total=False)


class _Page(TypedDict, Generic[T], total=False):
    items: list[T] | None
    metadata: _ListMeta | None


@dataclass(frozen=True, slots=True)
class _Narrow:
    """Decoders of a watch event and of a list page straight into the fields observation
    reads of a kind (``core.observation.observe.OBSERVED_FIELDS``)."""

    event: msgspec.json.Decoder[Any]
    page: msgspec.json.Decoder[Any]
    one: msgspec.json.Decoder[Any]


@functools.cache
def _narrow(kind: str) -> _Narrow | None:
    shape = OBSERVED_FIELDS.get(kind)
    if shape is None:
        return None
    return _Narrow(
        msgspec.json.Decoder(_Event[shape]),  # type: ignore[valid-type]
        msgspec.json.Decoder(_Page[shape]),  # type: ignore[valid-type]
        msgspec.json.Decoder(shape),
    )


def _parse(data: bytes, decoder: msgspec.json.Decoder[Any] | None) -> Any:
    """``data`` decoded by ``decoder`` (the fields observation reads), or whole, by
    ``_loads``, when there is none or the data does not fit it (then ``ValueError`` if it
    is not JSON at all)."""
    if decoder is not None:
        try:
            return decoder.decode(data)
        except msgspec.DecodeError:  # not the shape (ValidationError), or not JSON
            pass
    return _loads(data)


class _CreatedMeta(TypedDict, total=False):
    uid: Any
    resourceVersion: Any
    annotations: Any


class _Created(TypedDict, total=False):
    metadata: _CreatedMeta | None


# What ``create_or_adopt`` reads of a create's answer: the object's metadata it reports.
_CREATED = msgspec.json.Decoder(_Created)


def narrowed(kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` as the narrow watch caches keep it: the fields observation reads (the whole
    object, less ``managedFields``, for a kind without a narrow shape)."""
    narrow = _narrow(kind)
    data: dict[str, Any] = _parse(orjson.dumps(obj), narrow.one if narrow else None)
    return cached(data)


def _json(resp: Any, decoder: msgspec.json.Decoder[Any] | None = None) -> dict[str, Any]:
    """The body of a ``_preload_content=False`` response as plain JSON: the API's own
    field names, without the client's model objects (several times faster to read); with
    ``decoder``, only the fields it decodes (``_parse``)."""
    try:
        data: dict[str, Any] = _parse(resp.data, decoder)
        return data
    finally:
        resp.release_conn()


def _error(exc: ApiException, what: str) -> KubeError:
    reason = ""
    message = str(exc.reason)
    try:
        body = _loads(exc.body or "{}")
        reason = str(body.get("reason", ""))
        message = str(body.get("message", message))
    except ValueError:
        pass
    cls = WatchExpired if exc.status == 410 else KubeError
    return cls(f"{what}: {message}", status=int(exc.status or 0), reason=reason)


def _list_error(exc: ApiException, kind: str) -> KubeError:
    """A failed list of ``kind``: ``NotServed`` for an optional kind the cluster does not
    serve (404) or does not let us list (403); else the usual error."""
    if kind == PYTORCHJOB and exc.status in (403, 404):
        error = _error(exc, f"listing {kind}s")
        return NotServed(str(error), error.status, error.reason)
    return _error(exc, f"listing {kind}s")


P = ParamSpec("P")
R = TypeVar("R")


def _transport(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn connection failures into ``KubeError`` so callers handle one error type."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeError(f"{fn.__name__}: cluster unreachable: {_failure(exc)}") from exc

    return wrapper


def _failure(exc: BaseException) -> str:
    """What failed: with no retries (``NO_RETRIES``), urllib3's "Max retries exceeded with
    url: ..." wraps the one failure, which is what is said."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        return str(exc.reason)
    return str(exc)


def connect_cluster(
    kubeconfig: Mapping[str, Any], context: str | None, override: Path | None = None
) -> client.ApiClient:
    """An API client for a Cluster file's ``kubeconfig`` (path | inCluster | secret); a
    ``KubeError`` (one line) for any failure to build it, so only this cluster is
    unreachable."""
    where = str(override or kubeconfig.get("path") or "")
    try:
        if override is not None:
            return connect(override, context)
        if kubeconfig.get("inCluster"):
            return connect(None)
        if "path" in kubeconfig:
            return connect(_kubeconfig_file(Path(str(kubeconfig["path"])).expanduser()), context)
        secret = kubeconfig["secret"]
        return _client_from_secret(
            str(secret["name"]),
            str(secret.get("namespace") or _own_namespace()),
            str(secret.get("key", "kubeconfig")),
            context,
        )
    except KubeError:
        raise
    except _BAD_KUBECONFIG as exc:
        named = f" {where}" if where else ""
        raise KubeError(f"cannot load kubeconfig{named}: {_one_line(exc)}") from exc


# What the client's config loader raises on a file that is not a kubeconfig: besides its
# own ConfigException, YAML errors, and TypeError/AttributeError/IndexError where a list
# stands for a map (it indexes the parsed document without checking its shape). Input,
# one cluster's: the cluster is unreachable, never the cycle.
_BAD_KUBECONFIG = (
    ConfigException,
    yaml.YAMLError,
    OSError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    IndexError,
)


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a map"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "nothing" if value is None else f"a {type(value).__name__}"


def _check_shape(doc: Any) -> None:
    """The shape the client's loader indexes without checking, said in its terms: a map,
    whose ``clusters``, ``contexts`` and ``users`` are lists of maps with a ``name``, and
    whose strings are strings. Raises ``ValueError``."""
    if not isinstance(doc, Mapping):
        raise ValueError(f"not a kubeconfig: expected a map, not {_kind(doc)}")
    for key, inner in (("clusters", "cluster"), ("contexts", "context"), ("users", "user")):
        items = doc.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            raise ValueError(f"{key}: expected a list, not {_kind(items)}")
        for i, item in enumerate(items):
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                raise ValueError(f"{key}[{i}]: expected a map with a name")
            body = item.get(inner)
            if body is not None and not isinstance(body, Mapping):
                raise ValueError(f"{key}[{i}].{inner}: expected a map, not {_kind(body)}")
            for field_name, value in (body or {}).items():
                if field_name in _TEXT_FIELDS and not isinstance(value, str):
                    raise ValueError(
                        f"{key}[{i}].{inner}.{field_name}: expected a string, not {_kind(value)}"
                    )
    current = doc.get("current-context")
    if current is not None and not isinstance(current, str):
        raise ValueError(f"current-context: expected a string, not {_kind(current)}")


# Fields of a cluster, context or user the loader uses as strings.
_TEXT_FIELDS = frozenset(
    {
        "server",
        "certificate-authority",
        "certificate-authority-data",
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
        "token",
        "tokenFile",
        "cluster",
        "user",
        "namespace",
        "username",
        "password",
        "tls-server-name",
        "proxy-url",
    }
)


def _one_line(exc: BaseException) -> str:
    """The loader's message on one line (YAML errors span several), type-named when empty."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"not YAML: {exc.problem} (line {mark.line + 1}, column {mark.column + 1})"
    if isinstance(exc, yaml.reader.ReaderError):
        return f"not YAML: character #x{exc.character:04x} is not allowed (byte {exc.position})"
    text = " ".join(str(exc).split())
    if isinstance(exc, (TypeError, AttributeError, IndexError)):
        return f"not a kubeconfig ({text or type(exc).__name__})"
    return text or type(exc).__name__


MAX_KUBECONFIG_BYTES = 1 << 20


def _kubeconfig_file(path: Path) -> Path:
    """``path``, if it names a regular file of at most 1 MiB: a Cluster file (written by
    anyone with access to the repo) must not make the reconciler read ``/dev/zero``, a FIFO
    or a 10 GB file on its host."""
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path} is not a regular file")
    if info.st_size > MAX_KUBECONFIG_BYTES:
        raise ValueError(f"{path} is larger than {MAX_KUBECONFIG_BYTES} bytes")
    return path


def _own_namespace() -> str:
    path = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    return path.read_text().strip() if path.exists() else "default"


def _client_from_secret(
    name: str, namespace: str, key: str, context: str | None
) -> client.ApiClient:
    """A remote cluster's kubeconfig stored in a Secret of the home (in-cluster) cluster."""
    home = client.CoreV1Api(connect(None))
    try:
        secret = home.read_namespaced_secret(name, namespace)
    except ApiException as exc:
        raise _error(exc, f"reading kubeconfig Secret {namespace}/{name}") from exc
    data = (secret.data or {}).get(key)
    if not data:
        raise KubeError(f"Secret {namespace}/{name} has no key {key!r}")
    loaded = yaml.safe_load(base64.b64decode(data))
    _check_shape(loaded)
    api: client.ApiClient = config.new_client_from_config_dict(loaded, context=context)
    return bounded(api)


def preload_clients() -> None:
    """Import the client's API classes ``Kube`` uses now. The kubernetes package imports
    each on first use, which takes about 0.6 s of CPU: a process that will connect (``reconciler
    run``) pays it at start, not in its first cycle; the other commands never pay it."""
    for name in ("CoreV1Api", "BatchV1Api", "CustomObjectsApi"):
        getattr(client, name)


class Kube:
    """The calls the reconciler makes against one cluster."""

    def __init__(self, api: client.ApiClient, field_manager: str = MANAGER) -> None:
        self.api = api
        self.field_manager = field_manager
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._pools: dict[tuple[str, str, int | None], Any] = {}

    def _direct(self, manager: urllib3.PoolManager, url: str) -> tuple[Any, str, str]:
        """The connection pool of ``url``'s host in ``manager``, the request target and
        the Host header, for ``http1``: the URL parsed once (``_split_url``) and the pool
        kept while it is open (``manager`` holds one pool for the API server's host),
        rather than both looked up for every create (urllib3's ``connection_from_url`` and
        ``parse_url``: about 60 µs of CPU a request)."""
        scheme, host, port, target, netloc = _split_url(url)
        key = (scheme, host, port)
        pool = self._pools.get(key)
        if pool is None or pool.pool is None:  # not yet, or closed
            pool = manager.connection_from_host(host, port=port, scheme=scheme)
            self._pools[key] = pool
        return pool, target, netloc

    @_transport
    def ensure_namespace(self, name: str) -> None:
        """Create namespace ``name`` if it is missing. ``NamespaceForbidden`` when RBAC
        allows neither reading it nor creating it."""
        try:
            self.core.read_namespace(name)
        except ApiException as exc:
            if exc.status == 403:
                raise NamespaceForbidden(
                    f"namespace {name}: the reconciler may not read namespaces "
                    "(grant get on namespaces)",
                    403,
                    "Forbidden",
                ) from None
            if exc.status != 404:
                raise _error(exc, f"reading namespace {name}") from exc
            try:
                self.core.create_namespace(cast(Any, {"metadata": {"name": name}}))
            except ApiException as create_exc:
                if create_exc.status == 403:
                    raise NamespaceForbidden(
                        f"namespace {name} does not exist and the reconciler may not create "
                        "it: create it, or grant create on namespaces "
                        "(Helm value rbac.createNamespaces=true)",
                        403,
                        "Forbidden",
                    ) from None
                if create_exc.status != 409:
                    raise _error(create_exc, f"creating namespace {name}") from create_exc

    def _create(self, kind: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        path = _CREATE_PATHS.get(kind)
        if path is None:
            raise KubeError(f"cannot create {kind}: not a workload kind")
        return self._post(path, namespace, body)

    def _post(self, path: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``body`` (plain JSON: a rendered manifest) to the collection ``path`` in
        ``namespace`` with our field manager; the created object as plain JSON.

        What the client's generated create methods send, through the same ``ApiClient``:
        its host, auth headers (``param_serialize``: a refreshed token included), TLS
        connection pool, and a non-2xx answer raised as the same ``ApiException``. The
        request is written and its answer read straight on a kept-alive connection of
        that pool (``http1.request``: a reused connection the server closed before
        answering is replaced and the create sent again, once), without
        ``http.client``'s and urllib3's per-request Python; through a proxy, by urllib3
        as before. Without the generated methods' per-call costs, which were most of the
        reconciler's CPU per create (docs/benchmarks.md, "Cost per operation"):
        pydantic's validation of every argument, a recursive copy of the manifest, then
        the standard library's ``json.dumps``; the body is serialised once, by orjson.
        The timeouts are ``bounded``'s defaults. Of the answer, only the metadata
        ``create_or_adopt`` reports is decoded (uid, resourceVersion, annotations)."""
        method, url, headers, _, _ = self.api.param_serialize(
            "POST",
            path,
            path_params={"namespace": namespace},
            query_params=[("fieldManager", self.field_manager)],
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            auth_settings=["BearerToken"],
        )
        payload = orjson.dumps(body)
        manager = self.api.rest_client.pool_manager
        answer: Any
        if type(manager) is urllib3.PoolManager:  # not through a proxy: straight on a socket
            pool, target, host = self._direct(manager, url)
            answer = http1.request(
                pool,
                method,
                target,
                host,
                headers,
                payload,
                connect_timeout=CONNECT_TIMEOUT,
                read_timeout=READ_TIMEOUT,
            )
            content = answer.data
        else:
            try:
                raw = manager.request(
                    method,
                    url,
                    body=payload,
                    headers=headers,
                    timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT, read=READ_TIMEOUT),
                    preload_content=False,
                )
            except urllib3.exceptions.SSLError as exc:  # as the client's REST layer says it
                raise ApiException(status=0, reason=f"{type(exc).__name__}\n{exc}") from exc
            answer = rest.RESTResponse(raw)
            try:
                content = answer.read()
            finally:
                raw.release_conn()
        if not 200 <= answer.status <= 299:
            raise ApiException.from_response(http_resp=answer, body=None, data=None)
        data: dict[str, Any] = _parse(content, _CREATED)  # what create_or_adopt reads
        return data

    def _read(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        if kind == "Job":
            return _json(self.batch.read_namespaced_job(name, namespace, _preload_content=False))
        if kind == PYTORCHJOB:
            return _json(
                self.custom.get_namespaced_custom_object(
                    _KUBEFLOW_GROUP,
                    _KUBEFLOW_VERSION,
                    namespace,
                    PYTORCHJOB_PLURAL,
                    name,
                    _preload_content=False,
                )
            )
        return _json(self.core.read_namespaced_service(name, namespace, _preload_content=False))

    @property
    def server(self) -> str:
        """The API server's URL, as the kubeconfig gives it."""
        return str(self.api.configuration.host)

    @_transport
    def read_secret(self, namespace: str, name: str, key: str) -> bytes:
        """The value at ``key`` of Secret ``namespace/name`` (a webhook's signing key, a Git
        host's token): a ``KubeError`` when it cannot be read or has no such key."""
        try:
            secret = self.core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            raise _error(exc, f"reading Secret {namespace}/{name}") from exc
        data = (secret.data or {}).get(key)
        if not data:
            raise KubeError(f"Secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(data)

    @_transport
    def create_or_adopt(self, manifest: Mapping[str, Any]) -> ApplyResult:
        """Create the object; if it already exists (``AlreadyExists``), adopt it instead of
        duplicating. The create response, not a watch, says it now exists."""
        kind = str(manifest["kind"])
        meta = manifest["metadata"]
        name, namespace = str(meta["name"]), str(meta["namespace"])
        created = True
        try:
            obj = self._create(kind, namespace, dict(manifest))
        except ApiException as exc:
            if exc.status != 409:
                raise _error(exc, f"creating {kind} {namespace}/{name}") from exc
            created = False
            try:
                obj = self._read(kind, namespace, name)
            except ApiException as read_exc:
                raise _error(read_exc, f"reading {kind} {namespace}/{name}") from read_exc
        got = obj.get("metadata") or {}
        return ApplyResult(
            kind=kind,
            namespace=namespace,
            name=name,
            uid=str(got.get("uid")),
            resource_version=str(got.get("resourceVersion")),
            created=created,
            annotations=dict(got.get("annotations") or {}),
        )

    @_transport
    def apply_metadata(
        self,
        kind: str,
        namespace: str,
        name: str,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        *,
        force: bool = False,
    ) -> None:
        """Server-side apply of labels/annotations we own (e.g. status annotations).

        Without ``force``, a field another manager owns is a conflict, reported as an
        error. Pass ``force`` only for keys reserved to the reconciler."""
        body = {
            "apiVersion": API_VERSIONS.get(kind, "v1"),
            "kind": kind,
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": dict(labels or {}),
                "annotations": dict(annotations or {}),
            },
        }
        kwargs: dict[str, Any] = {
            "field_manager": self.field_manager,
            "force": force,
            "_content_type": APPLY_PATCH,
        }
        try:
            if kind == "Job":
                self.batch.patch_namespaced_job(name, namespace, body, **kwargs)
            elif kind == PYTORCHJOB:
                self.custom.patch_namespaced_custom_object(
                    _KUBEFLOW_GROUP,
                    _KUBEFLOW_VERSION,
                    namespace,
                    PYTORCHJOB_PLURAL,
                    name,
                    body,
                    **kwargs,
                )
            else:
                self.core.patch_namespaced_service(name, namespace, body, **kwargs)
        except ApiException as exc:
            raise _error(exc, f"applying metadata to {kind} {namespace}/{name}") from exc

    @_transport
    def emit_event(
        self,
        namespace: str,
        involved: Mapping[str, str],
        reason: str,
        message: str,
        event_type: str = "Normal",
        now: datetime | None = None,
    ) -> None:
        """A core/v1 Event on one of our objects, as ``kubectl describe`` shows them."""
        stamp = (now or datetime.now(UTC)).isoformat().replace("+00:00", "Z")
        body = {
            "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
            "involvedObject": {**involved, "namespace": namespace},
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": self.field_manager},
            "reportingComponent": self.field_manager,
            "reportingInstance": self.field_manager,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            _json(
                self.core.create_namespaced_event(
                    namespace, cast(Any, body), _preload_content=False
                )
            )
        except ApiException as exc:
            raise _error(exc, f"emitting event {reason} in {namespace}") from exc

    @_transport
    def delete_workload(self, namespace: str, name: str, kind: str = "Job") -> bool:
        """Delete a workload (its pods in the background: the garbage collector deletes
        what it owns) and the headless Service of its name, if any. False if absent."""
        found = False
        try:
            if kind == PYTORCHJOB:
                self.custom.delete_namespaced_custom_object(
                    _KUBEFLOW_GROUP,
                    _KUBEFLOW_VERSION,
                    namespace,
                    PYTORCHJOB_PLURAL,
                    name,
                    propagation_policy="Background",
                )
            else:
                self.batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
            found = True
        except ApiException as exc:
            if exc.status != 404:
                raise _error(exc, f"deleting {kind} {namespace}/{name}") from exc
        try:
            self.core.delete_namespaced_service(name, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise _error(exc, f"deleting Service {namespace}/{name}") from exc
        return found

    @_transport
    def served_backends(self, wanted: Iterable[str]) -> frozenset[str]:
        """Which of the optional backends ``wanted`` (``run.distributed.backend`` values)
        the cluster serves: its discovery document lists the backend's kind
        (``core.plan.BACKEND_APIS``), e.g. the Kubeflow Training Operator's PyTorchJob CRD."""
        served = set()
        for backend in wanted:
            api_kind = BACKEND_APIS.get(backend)
            if api_kind is None:
                continue
            api_version, kind = api_kind
            what = f"discovering {api_version}"
            try:
                request = self.api.param_serialize(
                    "GET", f"/apis/{api_version}", auth_settings=["BearerToken"]
                )
                resp: Any = self.api.call_api(
                    *request, _request_timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)
                )
                resp.read()
            except _UNREACHABLE as exc:
                raise KubeError(f"{what}: {exc}") from exc
            if resp.status == 404:
                continue  # the group/version is not served
            if resp.status >= 400:
                raise KubeError(f"{what}: HTTP {resp.status}", resp.status)
            doc = _loads(resp.data)
            resources = doc.get("resources") or []
            if any(r.get("kind") == kind and "/" not in r.get("name", "") for r in resources):
                served.add(backend)
        return frozenset(served)

    def list_labelled(
        self, kind: str, label_selector: str, namespace: str | None = None
    ) -> tuple[Mapping[str, Any], ...]:
        """Jobs, PyTorchJobs or Pods matching ``label_selector`` in ``namespace`` (None:
        all), as dicts. ``NotServed`` when the cluster does not serve the kind."""
        raw: dict[str, Any] = {"label_selector": label_selector, "_preload_content": False}
        try:
            if namespace is None:
                page = _json(self._lister(kind)(**raw))
            elif kind == "Job":
                page = _json(self.batch.list_namespaced_job(namespace, **raw))
            elif kind == PYTORCHJOB:
                page = _json(
                    self.custom.list_namespaced_custom_object(
                        _KUBEFLOW_GROUP, _KUBEFLOW_VERSION, namespace, PYTORCHJOB_PLURAL, **raw
                    )
                )
            else:
                page = _json(self.core.list_namespaced_pod(namespace, **raw))
        except ApiException as exc:
            raise _list_error(exc, kind) from exc
        except _UNREACHABLE as exc:
            raise KubeError(f"listing {kind}s: {exc}") from exc
        return tuple(page.get("items") or ())

    @_transport  # the body is read here too: a connection cut mid-log is a KubeError
    def read_logs(
        self,
        namespace: str,
        pod: str,
        container: str = MAIN_CONTAINER,
        follow: bool = False,
        tail_lines: int | None = None,
        limit_bytes: int | None = None,
    ) -> str | Iterator[str]:
        """A container's log through the ``pods/log`` API: the whole text (at most
        ``limit_bytes`` of it, when set), or with ``follow`` an iterator of lines (without
        newlines) until the stream ends."""
        what = f"reading the log of {namespace}/{pod} (container {container})"
        kwargs: dict[str, Any] = {"container": container, "_preload_content": False}
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        if limit_bytes is not None:
            kwargs["limit_bytes"] = limit_bytes
        if follow:
            kwargs["follow"] = True
            kwargs["_request_timeout"] = (CONNECT_TIMEOUT, None)  # a quiet pod is not a hang
        try:
            resp: Any = self.core.read_namespaced_pod_log(pod, namespace, **kwargs)
        except ApiException as exc:
            raise _error(exc, what) from exc
        except _UNREACHABLE as exc:
            raise KubeError(f"{what}: {exc}") from exc
        if not follow:
            try:
                return bytes(resp.data).decode("utf-8", errors="replace")
            finally:
                resp.release_conn()
        return _lines(resp, what)

    @_transport
    def review_token(self, token: str) -> Identity | None:
        """The token's user (``TokenReview``), or None when the API server does not
        authenticate it: invalid, expired, or meant for another audience."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview"}
        try:
            resp = client.AuthenticationV1Api(self.api).create_token_review(
                cast(Any, {**body, "spec": {"token": token}}), _preload_content=False
            )
        except ApiException as exc:
            raise _error(exc, "TokenReview") from exc
        status = _json(resp).get("status") or {}
        if not status.get("authenticated"):
            return None
        user = status.get("user") or {}
        extra = user.get("extra") or {}
        return Identity(
            username=str(user.get("username", "")),
            uid=str(user.get("uid", "")),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra=tuple(sorted((str(k), tuple(str(v) for v in vs)) for k, vs in extra.items())),
        )

    @_transport
    def review_access(self, who: Identity, access: ResourceAccess) -> bool:
        """Whether the API server's authorizers (RBAC) allow ``who`` ``access``
        (``SubjectAccessReview``). The resource needs no CRD: its attributes are evaluated,
        never looked up."""
        attributes = {"group": access.group, "resource": access.resource, "verb": access.verb}
        if access.namespace:
            attributes["namespace"] = access.namespace
        spec: dict[str, Any] = {
            "user": who.username,
            "groups": list(who.groups),
            "resourceAttributes": attributes,
        }
        if who.uid:
            spec["uid"] = who.uid
        if who.extra:
            spec["extra"] = {key: list(values) for key, values in who.extra}
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        try:
            resp = client.AuthorizationV1Api(self.api).create_subject_access_review(
                cast(Any, body), _preload_content=False
            )
        except ApiException as exc:
            raise _error(exc, "SubjectAccessReview") from exc
        status = _json(resp).get("status") or {}
        return bool(status.get("allowed")) and not status.get("denied")

    def _lister(self, kind: str) -> Any:
        if kind == PYTORCHJOB:
            return functools.partial(
                self.custom.list_cluster_custom_object,
                _KUBEFLOW_GROUP,
                _KUBEFLOW_VERSION,
                PYTORCHJOB_PLURAL,
            )
        listers = {
            "Job": self.batch.list_job_for_all_namespaces,
            "Pod": self.core.list_pod_for_all_namespaces,
            "Service": self.core.list_service_for_all_namespaces,
            "Node": self.core.list_node,
        }
        return listers[kind]

    @_transport
    def list_managed(
        self,
        kind: str,
        page_size: int = 500,
        *,
        selector: str = MANAGED_SELECTOR,
        fields: str = "",
        narrow: bool = False,
    ) -> ObjectList:
        """Every object of ``kind`` that we manage (or, with another label ``selector``
        and a field selector, those), in pages, as plain dicts. For an optional kind (a
        PyTorchJob), ``NotServed`` when the cluster does not serve it. With ``narrow``,
        each object holds only the fields observation reads (``narrowed``)."""
        items: list[Mapping[str, Any]] = []
        token: str | None = None
        lister = self._lister(kind)
        extra = {"field_selector": fields} if fields else {}
        shape = _narrow(kind) if narrow else None
        while True:
            try:
                page = _json(
                    lister(
                        label_selector=selector,
                        limit=page_size,
                        _continue=token,
                        _preload_content=False,
                        **extra,
                    ),
                    shape.page if shape else None,
                )
            except ApiException as exc:
                raise _list_error(exc, kind) from exc
            items.extend(cached(item) for item in page.get("items") or ())
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return ObjectList(tuple(items), str(meta.get("resourceVersion")))

    def watch_managed(
        self,
        kind: str,
        resource_version: str,
        timeout_seconds: int = 60,
        *,
        selector: str = MANAGED_SELECTOR,
        fields: str = "",
        narrow: bool = False,
    ) -> Iterator[WatchEvent]:
        """Events after ``resource_version`` (bookmarks included), until the apiserver
        ends the watch after ``timeout_seconds``. Raises ``WatchExpired`` on 410 (an
        answer or an ``ERROR`` event): relist; ``NotServed`` for a PyTorchJob the cluster
        does not serve; ``KubeError`` for another error, a lost connection, a read that
        waits more than ``timeout_seconds`` + ``WATCH_READ_GRACE``, or an event longer
        than ``http1.MAX_LINE``. With ``narrow``, each event's object holds only the fields
        observation reads (``narrowed``), decoded without building the rest
        (docs/benchmarks.md, "Cost per operation"). The stream is read straight off a
        connection of the client's pool (``_watch_lines``). Closing the iterator before
        the end closes its connection."""
        what = f"watching {kind}s"
        shape = _narrow(kind) if narrow else None
        decoder = shape.event if shape else None
        try:
            lines = self._watch_lines(kind, selector, fields, resource_version, timeout_seconds)
        except ApiException as exc:
            if kind == PYTORCHJOB and exc.status in (403, 404):
                error = _error(exc, what)
                raise NotServed(str(error), error.status, error.reason) from exc
            raise _error(exc, what) from exc
        except _UNREACHABLE as exc:
            raise KubeError(f"{what}: connection lost: {exc}") from exc
        try:
            for line in lines:
                if not line.strip():
                    continue
                try:
                    event = _parse(line, decoder)
                    if decoder is not None and event.get("type") == "ERROR":
                        event = _loads(line)  # its Status whole: code, message
                except ValueError as exc:
                    raise KubeError(f"{what}: bad event: {line[:200]!r}") from exc
                raw = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if raw.get("code") == 410:
                        raise WatchExpired(f"{what}: {raw.get('message')}", 410)
                    raise KubeError(f"{what}: {raw.get('message')}", int(raw.get("code") or 0))
                yield WatchEvent(type=str(event.get("type")), object=cached(raw))
        except _UNREACHABLE as exc:
            raise KubeError(f"{what}: connection lost: {exc}") from exc
        finally:
            lines.close()

    def _watch_lines(
        self, kind: str, selector: str, fields: str, resource_version: str, timeout_seconds: int
    ) -> Generator[bytes, None, None]:
        """The lines of a watch of ``kind`` in every namespace: its request as the
        client's generated list method makes it (``param_serialize``: the host, the auth
        headers with a refreshed token), sent on a connection of the client's pool (its
        TLS settings: CA, client certificate), and the chunked stream read straight off
        that socket in blocks of up to 64 KiB, de-chunked and split into lines
        (``http1.stream``), without urllib3's response object and ``http.client``'s chunk
        reader (several calls for each chunk). Each read waits at most
        ``timeout_seconds`` + ``WATCH_READ_GRACE``. Through a proxy, by urllib3 as before
        (``_byte_lines``). An error answer is raised as the client's ``ApiException``; a
        failure to connect or a lost connection as an ``OSError`` or urllib3's
        ``HTTPError``, when the watch opens or from the lines."""
        read_timeout = timeout_seconds + WATCH_READ_GRACE
        query: list[tuple[str, Any]] = [("labelSelector", selector)]
        if fields:
            query.append(("fieldSelector", fields))
        query += [
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", True),
            ("timeoutSeconds", timeout_seconds),
            ("watch", True),
        ]
        method, url, headers, _, _ = self.api.param_serialize(
            "GET",
            _WATCH_PATHS[kind],
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        manager = self.api.rest_client.pool_manager
        if type(manager) is not urllib3.PoolManager:  # through a proxy: urllib3 as before
            resp = self.api.rest_client.request(
                method, url, headers=headers, _request_timeout=(CONNECT_TIMEOUT, read_timeout)
            )
            if not 200 <= resp.status <= 299:
                try:
                    resp.read()
                finally:
                    resp.response.release_conn()
                raise ApiException.from_response(http_resp=resp, body=None, data=None)
            return _byte_lines(resp.response, f"watching {kind}s: connection lost", amt=None)
        pool, target, host = self._direct(manager, url)
        stream = http1.stream(
            pool,
            method,
            target,
            host,
            headers,
            connect_timeout=CONNECT_TIMEOUT,
            read_timeout=read_timeout,
        )
        if not 200 <= stream.status <= 299:
            raise ApiException(http_resp=stream.read())
        return stream.lines(WATCH_GATHER)


def list_pytorchjobs(kube: Kube) -> tuple[Mapping[str, Any], ...]:
    """The PyTorchJobs we manage on a cluster, listed fresh; none where the cluster does not
    serve the CRD (or does not let us list it)."""
    try:
        return kube.list_managed(PYTORCHJOB).items
    except NotServed:
        return ()
