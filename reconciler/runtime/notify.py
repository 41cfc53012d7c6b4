"""Notifications and commit statuses, sent off the cycle thread.

``Notifier.on_cycle`` runs on the cycle thread and only decides (``core/reporting/notify.py``) and
queues: it never waits for a receiver. ``Outbox`` is one bounded queue and one worker
thread that sends each request with a timeout, tries again with a capped exponential
backoff up to ``attempts`` times, and gives up then; a request that finds the queue full
is dropped. Everything dropped is counted (``reconciler_notifications_dropped_total``), so
a receiver that hangs or refuses costs dispatch nothing and its losses are seen.

Delivery is at least once. Each cycle's transitions are derived against the states of the
cycle before (led or followed), and at a start against the states the status branch
recorded (``seed``): a change that happened while no process ran, or after the last status
write, is derived and sent by the next process, with the key it always has
(``Idempotency-Key``: operation, run uid, phase) for a receiver that had it to drop. A
change already on the status branch whose request was still queued or retried when the
process died is owed: the notices decided and not yet settled (sent, refused or given up)
ride on the status commits the cycles make anyway (``owed_file``: ``status/_notify.yaml``,
at most ``OWED_LIMIT``, the oldest dropped and counted), and the next leader sends them
again (``restore``, as it starts to lead). A settled one leaves the file at the next status
commit, so it is sent again only when the process dies before that commit: once, with its
key. With shards, each shard's entries sit beside the others' in that file, and a replica
that takes a partition owes its last owner's (``Notifier.take``).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reconciler.adapters import outbound
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.reporting.notify import (
    OWED_LIMIT,
    CommitReport,
    Owed,
    commit_report,
    commit_status_request,
    encode,
    encode_owed,
    notices,
    owed,
    read_owed,
)
from reconciler.core.types import CompiledRepo, SecretKey
from reconciler.runtime.metrics import Metrics
from reconciler.runtime.webhook import sign  # as GitHub signs its webhooks: sha256=<hex>

if TYPE_CHECKING:
    from reconciler.runtime.cycle import CycleResult

log = logging.getLogger("reconciler.notify")

NOTIFICATION = "notification"
COMMIT_STATUS = "commit_status"
SIGNATURE_HEADER = "X-Reconciler-Signature"
# Answers worth another attempt: the receiver is busy or broken for now.
_AGAIN = frozenset({408, 425, 429})


@dataclass(frozen=True, slots=True)
class Delivery:
    """One request to send: ``payload`` POSTed as JSON to ``url``; ``secret`` (read from
    ``cluster`` and ``namespace`` when it is sent) signs it (``auth="hmac"``) or is the Git
    host's token (``github``, ``gitlab``)."""

    kind: str
    url: str
    payload: Mapping[str, Any]  # the JSON body, encoded by the worker
    what: str  # for the log
    key: str = ""  # the idempotency key
    cluster: str = ""
    namespace: str = ""
    secret: SecretKey | None = None
    auth: str = ""


# (cluster, namespace, secret) -> its value; a KubeError (or any OSError) when unreadable
ReadSecret = Callable[[str, str, SecretKey], bytes]
# (url, body, headers, timeout, addresses never to send to) -> the answer's status
Send = Callable[[str, bytes, Mapping[str, str], float, Collection[outbound.Address]], int]


@dataclass
class Outbox:
    """One bounded queue of ``Delivery`` and the one thread that sends them."""

    metrics: Metrics
    read_secret: ReadSecret
    api_servers: Callable[[], Collection[str]] = lambda: ()  # their URLs: never sent to
    send: Send = outbound.post
    capacity: int = 256
    timeout: float = 5.0  # seconds: the connect and each read
    attempts: int = 5
    backoff: float = 1.0  # seconds before the second attempt, doubled each time
    max_backoff: float = 30.0
    # told of each request sent, refused or given up (not of one left at a stop)
    settled: Callable[[Delivery], None] = lambda _: None
    _queue: queue.Queue[Delivery | None] = field(init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _full: int = field(default=0, init=False)  # dropped since the queue was last not full

    def __post_init__(self) -> None:
        self._queue = queue.Queue(self.capacity)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="notify", daemon=True)
            self._thread.start()

    def put(self, delivery: Delivery) -> bool:
        """Queue ``delivery`` without waiting; False (counted) when the queue is full."""
        try:
            self._queue.put_nowait(delivery)
        except queue.Full:
            # one line when the queue fills, not one per request dropped (a dispatch of
            # thousands): the metric counts each
            self.metrics.notifications_dropped.labels(delivery.kind, "queue_full").inc()
            if not self._full:
                log.warning(
                    "%s: dropped (queue_full): %d requests queued; more are dropped, and "
                    "counted, until there is room",
                    delivery.what,
                    self.capacity,
                )
            self._full += 1
            return False
        if self._full:
            log.warning("the notification queue has room again: %d dropped", self._full)
            self._full = 0
        return True

    def finish(self) -> None:
        """Stop once what is queued now is sent (``close`` waits for it)."""
        with contextlib.suppress(queue.Full):  # full: ``close`` stops it at its timeout
            self._queue.put_nowait(None)

    def close(self, timeout: float = 10.0) -> bool:
        """Send what is queued for up to ``timeout`` seconds, then stop: what is left is
        counted as dropped, and a request in flight ends with its own timeout, sending
        nothing more. False when the worker was still busy."""
        thread = self._thread
        if thread is None:
            return True
        self.finish()
        thread.join(max(0.0, timeout))
        self._stop.set()  # no more waiting between attempts, nothing more sent
        while True:
            try:
                left = self._queue.get_nowait()
            except queue.Empty:
                break
            if left is not None:
                self._drop(left, "shutdown", "still queued at the stop")
        return not thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            item = self._queue.get()
            if item is None:
                return
            if self._stop.is_set():
                self._drop(item, "shutdown", "still queued at the stop")
                continue
            try:
                self._deliver(item)
            except Exception:  # a bug: this request is lost, never the worker
                log.exception("%s: not sent", item.what)
                self.metrics.notifications_dropped.labels(item.kind, "gave_up").inc()
                self.settled(item)

    def _deliver(self, item: Delivery) -> None:
        servers = self.api_servers()
        if _same_server(item.url, servers):
            self._drop(item, "refused", "its URL is a cluster's API server")
            return
        # however the URL spells its host, the address it connects to is checked too
        avoid = outbound.addresses(servers)
        body = encode(item.payload)  # once: every attempt sends the same bytes
        why = ""
        for attempt in range(1, self.attempts + 1):
            if attempt > 1:
                delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 2))
                if self._stop.wait(delay):
                    self._drop(item, "shutdown", f"stopped after {why}")
                    return
            try:
                headers = self._headers(item, body)
            except (OSError, RuntimeError, ValueError) as exc:  # KubeError; not UTF-8
                why = f"cannot read its secret: {exc}"
                log.warning("%s: %s (attempt %d of %d)", item.what, why, attempt, self.attempts)
                continue
            try:
                status = self.send(item.url, body, headers, self.timeout, avoid)
            except outbound.Refused as exc:
                self._drop(item, "refused", str(exc))
                return
            except ValueError as exc:  # a header http.client refuses (a token with a newline)
                self._drop(item, "refused", f"cannot be sent: {exc}")
                return
            except OSError as exc:
                why = f"no answer: {exc}"
            else:
                if 200 <= status < 300:
                    self.metrics.notifications_sent.labels(item.kind).inc()
                    log.info("%s: sent (%d)", item.what, status)
                    self.settled(item)
                    return
                why = f"answered {status}"
                if status < 500 and status not in _AGAIN:
                    self._drop(item, "refused", why)
                    return
            log.warning("%s: %s (attempt %d of %d)", item.what, why, attempt, self.attempts)
        self._drop(item, "gave_up", f"{why}, {self.attempts} attempts")

    def _headers(self, item: Delivery, body: bytes) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if item.key:
            headers["Idempotency-Key"] = item.key
        if item.secret is None:
            return headers
        secret = self.read_secret(item.cluster, item.namespace, item.secret)
        if item.auth == "hmac":
            headers[SIGNATURE_HEADER] = sign(secret, body)
        elif item.auth == "github":
            headers["Authorization"] = f"Bearer {secret.decode().strip()}"
            headers["Accept"] = "application/vnd.github+json"
        elif item.auth == "gitlab":
            headers["PRIVATE-TOKEN"] = secret.decode().strip()
        return headers

    def _drop(self, item: Delivery, reason: str, why: str) -> None:
        self.metrics.notifications_dropped.labels(item.kind, reason).inc()
        log.warning("%s: dropped (%s): %s", item.what, reason, why)
        if reason != "shutdown":  # left at a stop: still owed, the next leader sends it
            self.settled(item)


def _origin(url: str) -> tuple[str, int]:
    """``(host, port)`` of an http(s) URL, the host in lower case, the port defaulted."""
    scheme, _, rest = url.partition("://")
    netloc = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0].rsplit("@", 1)[-1]
    host, port = netloc, ""
    if netloc.startswith("["):
        host, _, after = netloc[1:].partition("]")
        port = after.removeprefix(":")
    elif ":" in netloc:
        host, _, port = netloc.rpartition(":")
    default = 443 if scheme.lower() == "https" else 80
    return host.rstrip(".").lower(), int(port) if port.isdigit() else default


def _same_server(url: str, servers: Collection[str]) -> bool:
    """Whether ``url`` names the host and port of one of ``servers`` (API server URLs)."""
    target = _origin(url)
    return any(_origin(s) == target for s in servers)


class Notifier:
    """Decides, on the cycle thread, what each cycle sends, and queues it in ``outbox``."""

    def __init__(self, outbox: Outbox, seen: Mapping[str, WorkloadState] | None = None) -> None:
        self.outbox = outbox
        outbox.settled = self._settled
        # (key, url) -> what is owed, oldest first; the worker settles, the writer reads
        self._owed: dict[tuple[str, str], Owed] = {}
        self._owed_dropped = 0
        self._owed_lock = threading.Lock()
        self._restored: tuple[Owed, ...] = ()  # owed from the branch, not queued yet
        self._before: Mapping[str, WorkloadState] = dict(seen or {})
        self._refused: frozenset[str] | None = None
        self._reported: tuple[str, str] | None = None  # (commit, state) last queued
        # the config last asked, and whether any of its rules notifies: most configs have
        # none, and then no cycle walks its states
        self._rules: tuple[CompiledRepo | None, bool] = (None, False)

    def seed(self, seen: Mapping[str, WorkloadState]) -> None:
        """Start from the states a previous process recorded (the status branch)."""
        self._before = {**seen, **self._before}

    def restore(self, content: bytes | None) -> None:
        """Owe what the status branch says is owed (``status/_notify.yaml``, None: nothing),
        as this process starts to lead: sent by its next cycle, with the same keys. What
        an earlier call restored and no cycle sent yet is replaced."""
        entries: tuple[Owed, ...] = ()
        dropped = 0
        if content is not None:
            entries, dropped, problem = read_owed(content)
            if problem:
                log.warning("%s: nothing is sent again", problem)
        with self._owed_lock:
            for stale in self._restored:
                self._owed.pop((stale.key, stale.url), None)
            fresh = tuple(e for e in entries if (e.key, e.url) not in self._owed)
            for entry in fresh:
                self._owed[entry.key, entry.url] = entry
            self._owed_dropped = max(self._owed_dropped, dropped)
        self._restored = fresh

    def take(self, owed: Iterable[Owed], seen: Mapping[str, WorkloadState]) -> None:
        """Sharded: partitions taken. Owe ``owed`` (their last owner's entries still owed,
        ``owed_for``), sent by the next cycle with the same keys, and start their
        operations from ``seen`` (the branch's states), so a change their last owner
        already notified is not notified again."""
        with self._owed_lock:
            fresh = tuple(e for e in owed if (e.key, e.url) not in self._owed)
            for entry in fresh:
                self._owed[entry.key, entry.url] = entry
        self._restored = self._restored + fresh
        self._before = {**self._before, **seen}

    def owed_file(self) -> bytes | None:
        """``status/_notify.yaml`` as it is now: None when nothing is owed."""
        with self._owed_lock:
            if not self._owed:
                return None
            return encode_owed(tuple(self._owed.values()), self._owed_dropped)

    def _owe(self, entry: Owed) -> bool:
        """Owe ``entry``; False when it is owed already (queued or being retried)."""
        with self._owed_lock:
            if (entry.key, entry.url) in self._owed:
                return False
            self._owed[entry.key, entry.url] = entry
            while len(self._owed) > OWED_LIMIT:  # the oldest is no longer kept across a restart
                del self._owed[next(iter(self._owed))]
                self._owed_dropped += 1
                self.outbox.metrics.notifications_dropped.labels(
                    NOTIFICATION, "owed_overflow"
                ).inc()
        return True

    def _settled(self, delivery: Delivery) -> None:
        if delivery.kind == NOTIFICATION:
            with self._owed_lock:
                self._owed.pop((delivery.key, delivery.url), None)

    def _send(self, entry: Owed) -> None:
        if self._owe(entry):
            self._put(entry)

    def _put(self, entry: Owed) -> None:
        delivery = _notification(entry)
        if not self.outbox.put(delivery):
            self._settled(delivery)  # dropped (queue_full), counted: no longer owed

    def on_cycle(self, result: CycleResult) -> None:
        """Queue what ``result`` (a cycle this process led) sends; never waits."""
        if self._restored:
            restored, self._restored = self._restored, ()
            for entry in restored:
                self._put(entry)
        shown = result.report
        compiled = result.compiled
        if shown is not None:
            if self._notifies(shown.compiled):
                for notice in notices(
                    shown.compiled, self._before, shown.states, self._refused, result.at
                ):
                    self._send(owed(notice))
            self._before = shown.states
            self._refused = frozenset(r.operation for r in shown.compiled.rejected)
        if compiled is None:
            return
        report = commit_report(
            compiled.org.commit_status,
            compiled.org.web_url,
            result.attempted_version or result.version,
            result.config_errors,
            result.internal_error,
            shown,
            tuple(h.name for h in result.clusters if not h.reachable),
        )
        if (
            report is not None
            and (report.commit, report.state) != self._reported
            and self.outbox.put(_commit_status(report))
        ):
            self._reported = (report.commit, report.state)

    def _notifies(self, compiled: CompiledRepo) -> bool:
        known, answer = self._rules
        if known is not compiled:
            answer = (
                bool(compiled.org.notifications)
                or any(op.notifications for op in compiled.operations)
                or any(r.notifications for r in compiled.rejected)
            )
            self._rules = (compiled, answer)
        return answer

    def follow(self, result: CycleResult) -> None:
        """A cycle this process did not lead: the leader sends its notices; its states are
        the baseline should this process lead next."""
        shown = result.report
        if shown is not None:
            self._before = shown.states
            self._refused = frozenset(r.operation for r in shown.compiled.rejected)


def _notification(entry: Owed) -> Delivery:
    phase = entry.key.rsplit(":", 1)[-1]
    return Delivery(
        kind=NOTIFICATION,
        url=entry.url,
        payload=entry.payload,
        what=f"notification {entry.operation} {phase} to {entry.url} ({entry.rule})",
        key=entry.key,
        cluster=entry.cluster,
        namespace=entry.namespace,
        secret=entry.secret,
        auth="hmac",
    )


def _commit_status(report: CommitReport) -> Delivery:
    url, payload = commit_status_request(report)
    spec = report.spec
    return Delivery(
        kind=COMMIT_STATUS,
        url=url,
        payload=payload,
        what=f"commit status {report.state} of {report.commit[:12]} to {spec.url}",
        cluster=spec.cluster,
        namespace=spec.namespace,
        secret=spec.token,
        auth=spec.provider,
    )
