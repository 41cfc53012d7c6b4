"""What the reconciler tells the outside, as values (pure; the runtime sends them,
``runtime/notify.py``):

- ``notices``: the notifications a cycle sends. They are derived from its transitions: per
  operation, the state of its run before the cycle (the last one this process saw, or at a
  start the one the status branch recorded) against the state after it; a new run uid or
  a new phase that a rule lists is one notice. A rule's ``PolicyViolation`` is sent when
  an operation enters the config's refused list (at a start: every one refused).
- ``commit_report``: the commit status of the config commit a cycle read (valid, with how
  much it dispatched and how much waits; or its first error).

Each notice has an idempotency key, the same whenever the same transition is derived
again (operation, run uid, phase): delivery is at least once, and a receiver that
remembers keys sees each transition once.

- ``encode_owed`` / ``read_owed``: the notices decided but not yet confirmed delivered, as
  the status file ``status/_notify.yaml`` (at most ``OWED_LIMIT``, the oldest dropped and
  counted), so the next leader sends again what a killed process still owed.

What must live here: the notices and commit statuses as values, their keys and payloads, and
the rule that derives them from a cycle's transitions; sending is the runtime's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from reconciler.core.load import parse_yaml
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.observation.outputs import named_outputs
from reconciler.core.reporting.report import Report
from reconciler.core.reporting.status import NOTIFY_FILE, dump_yaml
from reconciler.core.types import (
    CommitStatusSpec,
    CompiledOperation,
    CompiledRepo,
    ConfigError,
    Location,
    NotifyRule,
    RejectedOperation,
    SecretKey,
)

POLICY_VIOLATION = "PolicyViolation"
# notices owed at most: the outbox's capacity (``runtime/notify.py``), about 1 KiB each
OWED_LIMIT = 256
# GitHub refuses a description longer than this; GitLab keeps it as it is.
MAX_DESCRIPTION = 140


@dataclass(frozen=True, slots=True)
class Notice:
    """One notification: ``payload``, as JSON (``encode``), POSTed to ``rule.url``. Its
    secret, if any, is read from the operation's cluster and namespace."""

    key: str  # the idempotency key: operation, run uid (or the refusal), phase
    rule: NotifyRule
    operation: str
    cluster: str
    namespace: str
    # encoded by whoever sends it: in a dispatch of thousands, not on the cycle thread
    payload: Mapping[str, Any]


def page_url(web_url: str, operation: str) -> str:
    """The operation's page (``reconciler serve``), "" without ``webUrl``."""
    return f"{web_url}/operations/{operation}" if web_url else ""


def transitions(
    before: Mapping[str, WorkloadState], after: Mapping[str, WorkloadState]
) -> tuple[WorkloadState, ...]:
    """The states of ``after`` whose run or phase differs from ``before``'s, by operation."""
    changed: list[WorkloadState] = []
    for op, state in after.items():
        prev = before.get(op)
        if prev is None or not _same_run(prev, state) or prev.phase != state.phase:
            changed.append(state)
    return tuple(changed)


def _same_run(prev: WorkloadState, state: WorkloadState) -> bool:
    if prev.uid:
        return prev.uid == state.uid
    # the status branch records no uid: its workload and generation name the run
    return (prev.cluster, prev.name, prev.generation) == (
        state.cluster,
        state.name,
        state.generation,
    )


def notices(
    compiled: CompiledRepo,
    before: Mapping[str, WorkloadState],
    after: Mapping[str, WorkloadState],
    refused_before: frozenset[str] | None,
    at: datetime,
) -> tuple[Notice, ...]:
    """The notifications of one cycle: its transitions (``before`` to ``after``) and its
    new policy refusals (``refused_before``: those of the last cycle; None at a start),
    each once per rule that lists it."""
    org_rules = compiled.org.notifications
    moved = transitions(before, after)
    refused = [r for r in compiled.rejected if r.operation not in (refused_before or ())]
    if not moved and not refused:
        return ()
    by_id: dict[str, CompiledOperation] = {op.id: op for op in compiled.operations}
    out: list[Notice] = []
    for state in moved:
        op = by_id.get(state.operation)
        rules = org_rules + (op.notifications if op is not None else ())
        phase = str(state.phase)
        wanted = [r for r in rules if phase in r.on]
        if not wanted:
            continue
        key = f"{state.operation}:{state.uid}:{phase}"
        payload = {
            "idempotencyKey": key,
            "operation": state.operation,
            "phase": phase,
            "reason": str(state.reason) if state.reason else "",
            "message": state.message,
            "queue": state.queue or (op.queue if op else ""),
            "cluster": state.cluster,
            "namespace": state.namespace,
            "workload": state.name,
            "runUid": state.uid,
            "generation": state.generation,
            "commit": state.config_commit or compiled.version,
            "dispatchedAt": state.dispatched_at,
            "startedAt": state.started_at,
            "finishedAt": state.finished_at,
            "outputs": named_outputs(state.outputs),  # bounded (core/observation/outputs.py)
            "outputsPath": state.outputs_path or "",
            "at": at.isoformat(),
            "url": page_url(compiled.org.web_url, state.operation),
        }
        out.extend(
            Notice(key, r, state.operation, state.cluster, state.namespace, payload) for r in wanted
        )
    for rejected in refused:
        out.extend(_refusal(compiled, rejected, at))
    return tuple(out)


def _refusal(compiled: CompiledRepo, rejected: RejectedOperation, at: datetime) -> list[Notice]:
    rules = compiled.org.notifications + rejected.notifications
    wanted = [r for r in rules if POLICY_VIOLATION in r.on]
    if not wanted:
        return []
    # no run: the refusal itself names it, so the same refusal has the same key
    digest = hashlib.sha256(rejected.message.encode()).hexdigest()[:16]
    key = f"{rejected.operation}:refused-{digest}:{POLICY_VIOLATION}"
    cluster, namespace = rejected.cluster, rejected.namespace
    payload = {
        "idempotencyKey": key,
        "operation": rejected.operation,
        "phase": POLICY_VIOLATION,
        "reason": str(rejected.reason),
        "message": rejected.message,
        "cluster": cluster,
        "namespace": namespace,
        "commit": compiled.version,
        "location": str(rejected.location) if rejected.location else rejected.path,
        "at": at.isoformat(),
        "url": page_url(compiled.org.web_url, rejected.operation),
    }
    return [Notice(key, r, rejected.operation, cluster, namespace, payload) for r in wanted]


def encode(payload: Mapping[str, Any]) -> bytes:
    """A request's JSON body: compact, keys sorted (the same payload, the same bytes)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


# --- what is owed, across a restart ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Owed:
    """One notice decided and not yet confirmed delivered: enough to send it again."""

    key: str
    url: str
    operation: str
    cluster: str
    namespace: str
    secret: SecretKey | None
    rule: str  # where the rule is, for the log
    payload: Mapping[str, Any]


def owed(notice: Notice) -> Owed:
    rule = notice.rule
    return Owed(
        notice.key,
        rule.url,
        notice.operation,
        notice.cluster,
        notice.namespace,
        rule.secret,
        str(rule.location),
        notice.payload,
    )


def encode_owed(entries: Sequence[Owed], dropped: int) -> bytes:
    """``status/_notify.yaml``: ``entries`` oldest first, and how many were dropped for the
    bound (``OWED_LIMIT``) since it was first written."""
    return dump_yaml(
        {
            "dropped": dropped,
            "owed": [
                {
                    "key": e.key,
                    "url": e.url,
                    "operation": e.operation,
                    "cluster": e.cluster,
                    "namespace": e.namespace,
                    "secret": (
                        {
                            "connection": e.secret.connection,
                            "name": e.secret.name,
                            "key": e.secret.key,
                        }
                        if e.secret is not None
                        else None
                    ),
                    "rule": e.rule,
                    "payload": dict(e.payload),
                }
                for e in entries
            ],
        }
    )


def read_owed(content: bytes) -> tuple[tuple[Owed, ...], int, str]:
    """The entries of ``status/_notify.yaml`` (at most ``OWED_LIMIT``, the newest), its
    dropped count, and what is wrong with it (``file:line:col: ...``; then nothing is
    owed): anyone who can push to the status branch can write it."""
    doc, errors = parse_yaml(NOTIFY_FILE, content, written=True)
    if doc is None:
        return (), 0, str(errors[0])
    data = doc.data
    try:
        if not isinstance(data, Mapping):
            raise TypeError("expected a mapping")
        dropped = data.get("dropped") or 0
        if not isinstance(dropped, int):
            raise TypeError("dropped: expected a number")
        out: list[Owed] = []
        for item in data.get("owed") or ():
            secret = item.get("secret")
            payload = item["payload"]
            if not isinstance(payload, Mapping):
                raise TypeError("payload: expected a mapping")
            fields = [item[k] for k in ("key", "url", "operation", "cluster", "namespace", "rule")]
            if not all(isinstance(f, str) for f in fields):
                raise TypeError("expected text")
            key, url, operation, cluster, namespace, rule = fields
            out.append(
                Owed(
                    key,
                    url,
                    operation,
                    cluster,
                    namespace,
                    SecretKey(str(secret["connection"]), str(secret["name"]), str(secret["key"]))
                    if secret is not None
                    else None,
                    rule,
                    dict(payload),
                )
            )
    except (KeyError, TypeError, AttributeError) as err:
        return (), 0, f"{Location(NOTIFY_FILE, 1, 1)}: not a notification file ({err!s})"
    return tuple(out[-OWED_LIMIT:]), dropped, ""


# --- commit status ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommitReport:
    """The status of one config commit, as the Git host is told it."""

    spec: CommitStatusSpec
    commit: str
    state: str  # pending | success | failure | error (GitHub's words)
    description: str
    target_url: str = ""


def commit_report(
    spec: CommitStatusSpec | None,
    web_url: str,
    attempted: str | None,
    errors: Sequence[ConfigError],
    internal_error: str,
    shown: Report | None,
    unreachable: Sequence[str],
) -> CommitReport | None:
    """The status of ``attempted`` (the newest commit read): ``error`` when compiling it
    failed on a bug, ``failure`` with its first error when it is invalid or refused,
    ``success`` ("valid, N dispatched, M pending") once applied, ``pending`` while a
    cluster it dispatches to cannot be read. None: nothing to report (no ``commitStatus``
    in force, no commit read)."""
    if spec is None or not attempted:
        return None
    target = f"{web_url}/" if web_url else ""

    def made(state: str, text: str) -> CommitReport:
        if len(text) > MAX_DESCRIPTION:
            text = text[: MAX_DESCRIPTION - 1] + "…"
        return CommitReport(spec, attempted, state, text, target)

    if internal_error:
        return made("error", "not applied: the reconciler failed compiling it (internal error)")
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return made("failure", f"{errors[0]}{more}")
    if shown is None or shown.compiled.version != attempted:
        return None
    active = sum(1 for s in shown.states.values() if s.phase.active)
    pending = sum(q.pending for q in shown.plan.queues)
    text = f"valid, {active} dispatched, {pending} pending"
    if unreachable:
        return made("pending", f"{text}; cluster {', '.join(unreachable)} unreachable")
    return made("success", text)


# GitLab's commit status states for GitHub's (GitLab has no "error": a failure it is).
_GITLAB_STATES = {
    "pending": "pending",
    "success": "success",
    "failure": "failed",
    "error": "failed",
}


def commit_status_request(report: CommitReport) -> tuple[str, dict[str, str]]:
    """The URL and JSON payload that set ``report`` on the Git host: GitHub's ``POST
    /repos/{owner}/{repo}/statuses/{sha}``, GitLab's ``POST /projects/{id}/statuses/{sha}``
    (a project path URL-encoded as its id)."""
    spec = report.spec
    base = spec.url.rstrip("/")
    if spec.provider == "gitlab":
        url = f"{base}/projects/{_path_segment(spec.repository)}/statuses/{report.commit}"
        payload = {
            "state": _GITLAB_STATES[report.state],
            "name": spec.context,
            "description": report.description,
        }
    else:
        url = f"{base}/repos/{spec.repository}/statuses/{report.commit}"
        payload = {
            "state": report.state,
            "context": spec.context,
            "description": report.description,
        }
    if report.target_url:
        payload["target_url"] = report.target_url
    return url, payload


def _path_segment(text: str) -> str:
    """``text`` percent-encoded as one URL path segment (``group/project`` ->
    ``group%2Fproject``)."""
    safe = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")
    return "".join(chr(b) if b in safe else f"%{b:02X}" for b in text.encode())
