"""The read-only queue management pages and the JSON API, over the latest cycle.

Routes (GET only; nothing here changes a cluster or the repo):

- ``/`` and ``/queues``: every queue with quota bars and the fleet totals;
- ``/queues/<name>``: settings with their file:line and last commit (Git blame), active
  and pending operations with position, reason and what would admit them;
- ``/operations/<project>/<op>``: phase history, its outcome over the recorded cycles
  (replayed: ``runtime/why.py``), workload, outputs, log tail, compiled spec with per-field
  provenance; a workflow's children with their named outputs, sorted by
  ``?sort=NAME&order=asc|desc``;
- ``/api/v1/queues``, ``/api/v1/queues/<name>``, ``/api/v1/operations/<project>/<op>``,
  ``/api/v1/fleet``: the same views as JSON.

``?partial=main`` returns only a page's ``<main>`` (the pages poll it to refresh); any
other query parameter (but an operation page's ``sort`` and ``order``) is a 400 that names
it (``did you mean``), the API takes none. The rendering is pure (``core.views.web_html``);
this module only fetches what the views need.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote

from reconciler.adapters.git import ConfigRepo, GitSyncError, StatusBranch
from reconciler.adapters.kube import Kube, KubeError, connect_cluster
from reconciler.adapters.repo import read_capped
from reconciler.core.compile.model import suggest
from reconciler.core.decision.render_kubeflow import log_container
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.observation.outputs import sort_problem
from reconciler.core.plan.estimate import NO_ESTIMATES, Estimates
from reconciler.core.reporting.replay import (
    OutcomeChange,
    QueueDay,
    Replayed,
    outcome_history,
    queue_days,
)
from reconciler.core.reporting.report import Report
from reconciler.core.reporting.status import (
    OperationStatus,
    StatusFileError,
    parse_status_file,
    record_paths,
)
from reconciler.core.types import printable_text
from reconciler.core.views import web_html
from reconciler.core.views.queue_view import (
    BlameLine,
    fleet_json,
    operation_detail,
    queue_detail,
    queues_view,
)
from reconciler.runtime.cycle import CycleResult
from reconciler.runtime.estimates import EstimateWorker
from reconciler.runtime.service import Runtime
from reconciler.runtime.why import History, WhyError

log = logging.getLogger("reconciler.web")

MAX_LOG_BYTES = 256 << 10  # of a pod's log, per page view
PAGE_PARAMETERS = ("partial",)  # ?partial=main: only the page's <main> (its refresh)
# an operation's page: a workflow's children sorted by a named output (?sort=accuracy&order=desc)
OPERATION_PARAMETERS = (*PAGE_PARAMETERS, "sort", "order")
MAX_QUERY_FIELDS = 16

Response = tuple[int, bytes, str]
T = TypeVar("T")
HTML = "text/html; charset=utf-8"
JSON = "application/json"

# (rev, path) -> blame lines; raises on failure
Blame = Callable[[str, str], list[BlameLine]]
# (cluster, namespace, pod, tail lines) -> the log text; raises on failure
# (cluster, namespace, pod, tail lines, container) -> the log's text
ReadLogs = Callable[[str, str, str, int, str], str]
# path -> the file's bytes, for sources that are not Git (``--watch``)
ReadSource = Callable[[str], bytes | None]
# an operation's status file paths (``record_paths``: its own, then the flat layout's) ->
# its versions, oldest first: (commit, commit time, content)
StatusHistory = Callable[[str, str], list[tuple[str, datetime, bytes]]]
# An operation's outcome over the recorded cycles, replayed (``reconciler why``).
OutcomeHistory = Callable[[str], Sequence[OutcomeChange]]
# A queue's wait and utilisation by day over the recorded cycles, replayed.
QueueHistory = Callable[[str], Sequence[QueueDay]]


@dataclass(frozen=True)
class _Cycle:
    result: CycleResult
    report: Report  # what every page and /api/v1 shows of it
    estimates: Estimates = NO_ESTIMATES


class WebApp:
    """``app(path, query)`` answers a GET, or None for a path it does not serve."""

    def __init__(
        self,
        latest: Callable[[], CycleResult | None],
        *,
        blame: Blame | None = None,
        read_logs: ReadLogs | None = None,
        read_source: ReadSource | None = None,
        status_history: StatusHistory | None = None,
        outcome_history: OutcomeHistory | None = None,
        queue_history: QueueHistory | None = None,
        tail_lines: int = 100,
        estimator: EstimateWorker | None = None,
    ) -> None:
        self._latest = latest
        self._blame = blame
        self._read_logs = read_logs
        self._read_source = read_source
        self._status_history = status_history
        self._outcome_history = outcome_history
        self._queue_history = queue_history
        self._tail = tail_lines
        self._blames: dict[tuple[str, str], list[BlameLine] | None] = {}
        self._lock = threading.Lock()
        # the estimates of the latest decision, computed once per decision off this thread
        self._estimator = estimator if estimator is not None else EstimateWorker()

    # --- routing -----------------------------------------------------------------------

    def __call__(self, path: str, query: str = "") -> Response | None:
        parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
        if parts[:2] == ["api", "v1"]:
            wrong = _query_error(query, ())
            return _error(400, wrong) if wrong else self._api(parts[2:])
        page: tuple[str, Callable[[_Cycle], tuple[int, str] | None]]
        allowed: tuple[str, ...] = PAGE_PARAMETERS
        if not parts or parts == ["queues"]:
            page = ("Queues", self._queues_main)
        elif parts[0] == "queues" and len(parts) == 2:
            shown = printable_text(parts[1])  # a title from a link: nothing hidden
            page = (f"Queue {shown}", lambda c: self._queue_main(c, parts[1]))
        elif parts[0] == "operations" and len(parts) == 3:
            op_id = f"{parts[1]}/{parts[2]}"
            sorting = _sorting(query)
            page = (
                f"Operation {printable_text(op_id)}",
                lambda c: self._op_main(c, op_id, *sorting),
            )
            allowed = OPERATION_PARAMETERS
        else:
            return None
        wrong = _query_error(query, allowed)
        if wrong:
            return _bad_request(wrong)
        return self._html("partial" in parse_qs(query, keep_blank_values=True), *page)

    def _cycle(self) -> _Cycle | None:
        result = self._latest()
        shown = None if result is None else result.report
        if result is None or shown is None:
            return None
        return _Cycle(result, shown, estimates=self._estimates(result))

    def _estimates(self, result: CycleResult) -> Estimates:
        """The latest finished start estimates (``EstimateWorker``: computed once per
        decision on its own thread, never on the request's)."""
        return self._estimator.latest(result.compiled, result.decision)

    def _html(
        self, partial: bool, title: str, main: Callable[[_Cycle], tuple[int, str] | None]
    ) -> Response:
        cycle = self._cycle()
        if cycle is None:
            status, body = (
                503,
                web_html.message_main(
                    "Not ready", "no valid config has been loaded yet; this page refreshes itself"
                ),
            )
        else:
            got = main(cycle)
            if got is None:
                status, body = 404, web_html.message_main("Not found", f"{title}: not found")
            else:
                status, body = got
        text = body if partial else web_html.page(title, body)
        return status, text.encode(), HTML

    # --- pages -------------------------------------------------------------------------

    def _queues_main(self, c: _Cycle) -> tuple[int, str]:
        r = c.result
        assert r.compiled is not None and r.plan is not None
        view = queues_view(c.report, c.estimates)
        return 200, web_html.queues_main(view, _note(r))

    def _queue_main(self, c: _Cycle, name: str) -> tuple[int, str] | None:
        r = c.result
        assert r.compiled is not None and r.plan is not None
        spec = r.compiled.queues.get(name)
        if spec is None:
            return None
        blame = self._blame_of(r.compiled.version, spec.source)
        source: bytes | None
        if blame is not None:
            source = "".join(b.text + "\n" for b in blame).encode()
        else:
            source = self._read_source(spec.source) if self._read_source else None
        detail = queue_detail(
            c.report, name, source_text=source, blame=blame, estimates=c.estimates
        )
        if detail is None:
            return None
        return 200, web_html.queue_main(detail, self._recorded_days(name))

    def _op_main(
        self, c: _Cycle, op_id: str, sort: str | None = None, order: str | None = None
    ) -> tuple[int, str] | None:
        r = c.result
        assert r.compiled is not None and r.plan is not None
        detail = operation_detail(
            c.report, op_id, recorded=self._recorded(op_id), estimates=c.estimates
        )
        if detail is None:
            return None
        if (sort is not None or order is not None) and not detail.children:
            return 400, web_html.message_main(
                "Bad request", "sort and order sort a workflow's children: this is no workflow"
            )
        wrong = sort_problem(detail.child_runs, sort, order)
        if wrong:
            return 400, web_html.message_main("Bad request", wrong)
        down = {h.name for h in r.clusters if not h.reachable}
        logs, note = self._logs(r.states.get(op_id), down)
        return 200, web_html.operation_main(
            detail, logs, note, self._outcomes(op_id), sort=sort, order=order
        )

    def _blame_of(self, rev: str, path: str) -> list[BlameLine] | None:
        if self._blame is None or not path:
            return None
        key = (rev, path)
        with self._lock:
            if key in self._blames:
                return self._blames[key]
        try:
            lines: list[BlameLine] | None = self._blame(rev, path)
        except GitSyncError as exc:  # Git failed: the page goes without blame
            log.warning("blame %s at %s: %s", path, rev[:12], exc)
            lines = None
        except Exception:  # a bug of ours, reported as one: the page goes without blame
            log.exception("internal error: blame %s at %s", path, rev[:12])
            lines = None
        with self._lock:
            if len(self._blames) > 256:
                self._blames.clear()
            self._blames[key] = lines
        return lines

    def _recorded(self, op_id: str) -> list[tuple[str, datetime, OperationStatus]]:
        if self._status_history is None:
            return []
        path, flat = record_paths(op_id)
        try:
            versions = self._status_history(path, flat)
        except GitSyncError as exc:  # Git failed: the page goes without the history
            log.warning("history of %s: %s", path, exc)
            return []
        except Exception:  # a bug of ours, reported as one
            log.exception("internal error: history of %s", path)
            return []
        out = []
        for sha, when, content in versions:
            try:
                parsed = parse_status_file(path, content)
            except StatusFileError:
                continue
            if isinstance(parsed, OperationStatus):
                out.append((sha, when, parsed))
        return out

    def _outcomes(self, op_id: str) -> Sequence[OutcomeChange]:
        return _replayed(self._outcome_history, op_id, "outcome history")

    def _recorded_days(self, queue: str) -> Sequence[QueueDay]:
        return _replayed(self._queue_history, queue, "days")

    def _logs(self, state: WorkloadState | None, down: set[str]) -> tuple[str | None, str]:
        if state is None:
            return None, "no workload yet"
        if self._read_logs is None:
            return None, "logs are not available from this server"
        if not state.pod:
            return None, "the workload has no pod yet"
        if state.cluster in down:  # as the page says: not waited for at every view
            return (
                None,
                f"cannot read the log: cluster {state.cluster} was unreachable at the last cycle",
            )
        try:
            container = log_container(state.kind)
            text = self._read_logs(state.cluster, state.namespace, state.pod, self._tail, container)
        except KubeError as exc:  # the cluster's failure, said as such
            return None, f"cannot read the log: {exc}"
        except Exception:  # a bug of ours: never worded as the cluster's
            log.exception("internal error: reading the log of %s", state.pod)
            return None, "internal error reading the log (a bug in the reconciler; see its log)"
        return text, f"last {self._tail} lines of pod {state.pod}"

    # --- JSON --------------------------------------------------------------------------

    def _api(self, parts: list[str]) -> Response | None:
        cycle = self._cycle()
        if cycle is None:
            return _error(503, "no valid config has been loaded yet")
        r = cycle.result
        assert r.compiled is not None and r.plan is not None
        view = queues_view(cycle.report, cycle.estimates)
        if parts == ["queues"]:
            return _json(200, view.to_json())
        if parts == ["fleet"]:
            return _json(200, {"version": view.version, **fleet_json(view)})
        if len(parts) == 2 and parts[0] == "queues":
            spec = r.compiled.queues.get(parts[1])
            blame = self._blame_of(r.compiled.version, spec.source) if spec else None
            source = "".join(b.text + "\n" for b in blame).encode() if blame else None
            if source is None and spec is not None and self._read_source is not None:
                source = self._read_source(spec.source)
            detail = queue_detail(
                cycle.report, parts[1], source_text=source, blame=blame, estimates=cycle.estimates
            )
            if detail is None:
                return _error(404, f"no queue {parts[1]!r}")
            return _json(200, detail.to_json())
        if len(parts) == 3 and parts[0] == "operations":
            op_id = f"{parts[1]}/{parts[2]}"
            op = operation_detail(
                cycle.report, op_id, recorded=self._recorded(op_id), estimates=cycle.estimates
            )
            if op is None:
                return _error(404, f"no operation {op_id!r}")
            return _json(200, op.to_json())
        return _error(404, "not found")


def _replayed(read: Callable[[str], Sequence[T]] | None, name: str, what: str) -> Sequence[T]:
    """What the recorded cycles say of ``name``: nothing when they cannot be read."""
    if read is None:
        return ()
    try:
        return read(name)
    except (GitSyncError, WhyError) as exc:  # the page goes without it
        log.warning("%s of %s: %s", what, name, exc)
        return ()
    except Exception:  # a bug of ours, reported as one
        log.exception("internal error: %s of %s", what, name)
        return ()


def _json(status: int, data: Mapping[str, Any]) -> Response:
    return status, web_html.json_text(data).encode(), JSON


def _error(status: int, message: str) -> Response:
    return status, web_html.error_json(message), JSON


def _bad_request(message: str) -> Response:
    text = web_html.render_message_page("Bad request", message, refresh=0)
    return 400, text.encode(), HTML


def _sorting(query: str) -> tuple[str | None, str | None]:
    """``?sort=NAME&order=asc|desc`` of an operation's page (each given once: checked by
    ``_query_error``)."""
    try:
        params = parse_qs(query, keep_blank_values=True, max_num_fields=MAX_QUERY_FIELDS)
    except ValueError:
        return None, None
    sort, order = params.get("sort"), params.get("order")
    return (sort[0] if sort else None), (order[0] if order else None)


def _query_error(query: str, allowed: tuple[str, ...]) -> str | None:
    """Why a page's (``partial=main`` only) or the API's (none) query is refused, or None:
    an unknown or misspelt name is an error, never ignored."""
    try:
        params = parse_qs(query, keep_blank_values=True, max_num_fields=MAX_QUERY_FIELDS)
    except ValueError:
        return "too many query parameters"
    for name, values in params.items():
        if name not in allowed:
            if not allowed:
                return f"unknown query parameter {name!r}: /api/v1 takes none"
            close = suggest(name, allowed)
            hint = f"did you mean {close!r}?" if close else f"allowed: {', '.join(allowed)}"
            return f"unknown query parameter {name!r} ({hint})"
        if name != "partial":
            if len(values) > 1:
                return f"{name} is given {len(values)} times: give it once"
            continue
        wrong = [v for v in values if v != "main"]
        if wrong:
            return f"{name}={wrong[0]!r}: the only value is main"
    return None


def _note(result: CycleResult) -> str:
    notes = []
    if result.config_errors:
        notes.append(
            f"the newest commit {(result.attempted_version or '')[:12]} is invalid "
            f"({len(result.config_errors)} errors); this config stays in force"
        )
    if result.internal_error:
        notes.append(
            f"internal error compiling {(result.attempted_version or '')[:12]} (a bug in the "
            "reconciler, see its log); this config stays in force"
        )
    if result.sync_error:
        notes.append(f"config sync failing: {result.sync_error}")
    down = [h.name for h in result.clusters if not h.reachable]
    if down:
        notes.append("unreachable: " + ", ".join(down))
    if not result.leading:
        notes.append("read-only (not the leader): the plan is shown, not carried out")
    notes.append(f"at {result.at.isoformat(timespec='seconds')}")
    return " · ".join(notes)


def make_web_app(
    runtime: Runtime, overrides: Mapping[str, Path], *, worktree: Path | None = None
) -> WebApp:
    """The pages over ``runtime.completed`` (a shard's: ``runtime.fleet``): blame from its
    Git cache (or files read from ``worktree``), logs through each cluster's ``pods/log``
    API."""
    clients: dict[str, Kube] = {}
    lock = threading.Lock()
    # a shard's last cycle is its partitions': its pages show the fleet from the branch
    shown = runtime.fleet if runtime.sharded else lambda: runtime.completed

    def read_logs(cluster: str, namespace: str, pod: str, tail: int, container: str) -> str:
        last = shown()
        compiled = last.compiled if last is not None else None
        if compiled is None or cluster not in compiled.clusters:
            raise KubeError(f"cluster {cluster} is not in the config")
        with lock:
            kube = clients.get(cluster)
            if kube is None:
                spec = compiled.clusters[cluster]
                kube = Kube(connect_cluster(spec.kubeconfig, spec.context, overrides.get(cluster)))
                clients[cluster] = kube
        # A pod's 100 last lines can be one line of gigabytes: a page view reads at most this.
        text = kube.read_logs(namespace, pod, container, tail_lines=tail, limit_bytes=MAX_LOG_BYTES)
        return text if isinstance(text, str) else "\n".join(text)

    config = runtime.config
    read_source: ReadSource | None = None
    if worktree is not None:
        root = worktree

        def read_source(path: str) -> bytes | None:
            target = (root / path).resolve()
            if not target.is_relative_to(root.resolve()) or not target.is_file():
                return None
            try:  # over the loader's limit: refused, never read whole
                return read_capped(target)
            except OSError:  # gone or unreadable meanwhile (an editor saves by renaming)
                return None

    recorded = recorded_cycles(runtime)
    wakeup = runtime.wakeup
    return WebApp(
        shown,
        # the estimates wait while a cycle runs: the cycle never shares the GIL with them
        estimator=EstimateWorker(idle=wakeup.wait_idle if wakeup is not None else None),
        blame=config.blame if config is not None else None,
        read_logs=read_logs,
        read_source=read_source,
        status_history=runtime.publisher.branch.file_history if runtime.publisher else None,
        outcome_history=recorded.outcomes if recorded is not None else None,
        queue_history=recorded.days if recorded is not None else None,
    )


# the newest recorded cycles a page replays (the first view replays them all, ~0.3 s CPU a
# cycle at 10,000 operations; later views only the new ones), the days a queue page shows,
# and how often the pages fetch the status branch
PAGE_CYCLES = 50
PAGE_DAYS = 7
PAGE_FETCH_SECONDS = 30.0


class RecordedCycles:
    """The status branch's newest ``PAGE_CYCLES`` recorded cycles, replayed
    (``runtime/why.py``) from a Git cache of its own (the cycle's is the loop's), the branch
    fetched at most every ``PAGE_FETCH_SECONDS``; each cycle replayed once."""

    def __init__(self, config: ConfigRepo, status: StatusBranch) -> None:
        self._config = config
        self._status = status
        self._lock = threading.Lock()
        self._history: History | None = None
        self._fetched = 0.0

    def _cycles(self) -> list[Replayed]:
        with self._lock:
            now = time.monotonic()
            if self._history is None:
                own = ConfigRepo(
                    self._config.source, self._config.branch, self._config.git_dir.parent
                )
                branch = StatusBranch(own, remote=self._status.remote, branch=self._status.branch)
                # a ref of its own: the writer's tip (its pushes, retention's lease) is left alone
                branch.tracking = f"refs/reconciler/why-tip/{branch.branch}"
                self._history = History(own, branch, keep=PAGE_CYCLES)
                self._fetched = now
            elif now - self._fetched >= PAGE_FETCH_SECONDS:
                self._history.fetch()
                self._fetched = now
            return list(self._history.every(last=PAGE_CYCLES))

    def outcomes(self, op_id: str) -> Sequence[OutcomeChange]:
        """The operation's outcome over the recorded cycles."""
        return outcome_history(op_id, self._cycles())[0]

    def days(self, queue: str) -> Sequence[QueueDay]:
        """The queue's wait and utilisation over the last ``PAGE_DAYS`` recorded days."""
        return queue_days(queue, self._cycles())[-PAGE_DAYS:]


def recorded_cycles(runtime: Runtime) -> RecordedCycles | None:
    """The pages' recorded cycles: None without a status branch or a Git source."""
    if runtime.publisher is None or runtime.config is None:
        return None
    return RecordedCycles(runtime.config, runtime.publisher.branch)
