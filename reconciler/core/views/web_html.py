"""Server-rendered HTML of the queue management pages (pure: views in, text out).

Everything that comes from the config repo or a cluster (operation names, messages, logs,
outputs) goes through :func:`esc`; links are percent-encoded with :func:`quote_path`. The
pages refresh their ``<main>`` by polling ``?partial=main`` (no front-end stack).

What must live here: the HTML of each page (queues, a queue, an operation, a message),
escaped here once; the views they render are ``queue_view.py``'s, and the HTTP side is
``runtime/web.py``.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from reconciler.core.observation.outputs import named_outputs, output_names, output_text, sort_rows
from reconciler.core.quantity import format_duration
from reconciler.core.reporting.replay import OutcomeChange, QueueDay
from reconciler.core.types import printable_path, printable_text
from reconciler.core.views.queue_view import (
    ChildRun,
    ClusterShare,
    FleetTotal,
    OperationDetail,
    QueueDetail,
    QueueRow,
    QueuesView,
    QuotaUse,
)

REFRESH_SECONDS = 5
MAX_ROWS = 200  # pending rows on a queue page; the JSON API lists every one

_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~/")

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:.6rem 1.2rem;display:flex;gap:1.5rem;
 align-items:baseline}
header a{color:#cfe0ff;text-decoration:none}header .brand{font-weight:600;color:#fff}
main{padding:1rem 1.2rem}h1{font-size:1.3rem;margin:.2rem 0 .8rem}h2{font-size:1.05rem;
 margin:1.4rem 0 .5rem}
table{border-collapse:collapse;background:#fff;width:100%;margin-bottom:.5rem}
th,td{text-align:left;padding:.35rem .6rem;border-bottom:1px solid #e3e6ea;vertical-align:top}
th{background:#eef0f3;font-weight:600;font-size:.85rem}
.bar{display:inline-block;width:90px;height:9px;background:#e3e6ea;border-radius:4px;
 vertical-align:middle;margin-right:.4rem;overflow:hidden}
.bar span{display:block;height:100%;background:#3b82f6}.bar span.full{background:#e4572e}
.quota{white-space:nowrap}.muted{color:#6b7280}.cards{display:flex;flex-wrap:wrap;gap:.8rem}
.card{background:#fff;border:1px solid #e3e6ea;border-radius:6px;padding:.6rem .9rem;
 min-width:220px}.card h3{margin:0 0 .3rem;font-size:.95rem}
pre{background:#fff;border:1px solid #e3e6ea;padding:.6rem;overflow:auto;max-height:28rem}
dl{display:grid;grid-template-columns:max-content auto;gap:.2rem 1rem;background:#fff;
 padding:.6rem .9rem;border:1px solid #e3e6ea}dt{font-weight:600}dd{margin:0}
.reason{font-family:ui-monospace,monospace;font-size:.85rem}.never{color:#b91c1c}
code{font-family:ui-monospace,monospace;font-size:.85rem}
"""

_SCRIPT = """
(function(){var main=document.getElementById('main');if(!main)return;
var q=new URLSearchParams(location.search);q.set('partial','main');
setInterval(function(){fetch(location.pathname+'?'+q,{cache:'no-store'})
.then(function(r){return r.ok?r.text():null}).then(function(t){if(t!==null)main.innerHTML=t})
.catch(function(){})},%d);})();
"""


def _script_source(refresh: int) -> str:
    return _SCRIPT % (refresh * 1000)


# Sent with every page: only the page's own refresh script runs (by its hash), nothing is
# loaded from elsewhere, the page is never framed. A value that escaped ``esc`` could still
# not run script.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'sha256-"
    + base64.b64encode(hashlib.sha256(_script_source(REFRESH_SECONDS).encode()).digest()).decode()
    + "'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def quote_path(path: str, *, slash: bool = True) -> str:
    """Percent-encode a URL path (``/`` kept unless ``slash`` is false, for one segment);
    the server splits on ``/`` and then unquotes each segment."""
    out = []
    for ch in path:
        if ch in _SAFE and (slash or ch != "/"):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def queue_href(name: str) -> str:
    return "/queues/" + quote_path(name, slash=False)


def operation_href(op_id: str) -> str:
    project, _, name = op_id.partition("/")
    return f"/operations/{quote_path(project, slash=False)}/{quote_path(name, slash=False)}"


def _link(href: str, text: str) -> str:
    """A link to a queue or an operation: its name on one line, nothing hidden (an
    operation id may come from a workload's annotation: any text)."""
    return f'<a href="{esc(href)}">{esc(printable_text(text))}</a>'


def page(title: str, main: str, *, refresh: int = REFRESH_SECONDS) -> str:
    """A whole document around ``main`` (already HTML)."""
    script = f"<script>{_script_source(refresh)}</script>" if refresh > 0 else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<title>{esc(title)} · dispatch reconciler</title><style>{CSS}</style></head><body>"
        '<header><a class=brand href="/">dispatch reconciler</a><a href="/">Queues</a>'
        '<a href="/api/v1/queues">API</a></header>'
        f'<main id="main">{main}</main>{script}</body></html>'
    )


def _table(headers: Sequence[str], rows: Iterable[str], empty: str = "none") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(rows)
    if not body:
        body = f'<tr><td colspan="{len(headers)}" class=muted>{esc(empty)}</td></tr>'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def quota_bar(q: QuotaUse, flavor: str | None = None) -> str:
    """One resource's bar; of a flavor (a queue with flavors): labelled with the flavor."""
    pct = round(q.fraction * 100)
    full = " class=full" if q.fraction >= 1 else ""
    of = "" if flavor is None else f' data-flavor="{esc(flavor)}"'
    label = esc(q.resource) if flavor is None else f"{esc(flavor)} {esc(q.resource)}"
    return (
        f'<div class=quota{of} data-resource="{esc(q.resource)}" data-used="{esc(q.text)}">'
        f'<span class=bar><span{full} style="width:{pct}%"></span></span>'
        f"{label} <b>{esc(q.text)}</b></div>"
    )


def _row_bars(r: QueueRow) -> str:
    """A row's quota bars: per resource, or per flavor and resource (a queue with flavors,
    in its order)."""
    if r.flavors:
        return "".join(quota_bar(q, f.name) for f in r.flavors for q in f.quotas)
    return "".join(quota_bar(q) for q in r.quotas)


def _concurrency(row: QueueRow) -> str:
    text = f"<b>{esc(row.concurrency_text)}</b>"
    if row.concurrency is None:
        return text
    return quota_bar_like(row.active, row.concurrency) + text


def quota_bar_like(used: int, limit: int) -> str:
    fraction = 1.0 if limit <= 0 else min(used / limit, 1.0)
    full = " class=full" if fraction >= 1 else ""
    return f'<span class=bar><span{full} style="width:{round(fraction * 100)}%"></span></span>'


def _fleet_card(total: FleetTotal) -> str:
    title = f"cluster {total.cluster}" if total.cluster else "fleet (all clusters)"
    quotas = "".join(quota_bar(q) for q in total.quotas) or "<div class=muted>no quotas</div>"
    return (
        f'<div class=card data-fleet="{esc(total.cluster or "*")}"><h3>{esc(title)}</h3>'
        f"<div>{total.queues} queues · {total.active} active ({total.running} running, "
        f"{total.waiting} waiting) · {total.pending} pending</div>{quotas}</div>"
    )


def _queue_row(r: QueueRow) -> str:
    quotas = _row_bars(r) or "<span class=muted>-</span>"
    head = (
        f'<span class=reason title="{esc(r.head_message)}">{esc(r.head_reason)}</span>'
        if r.head_reason
        else "<span class=muted>-</span>"
    )
    paused = " (paused)" if r.paused else ""
    return (
        f'<tr data-queue="{esc(r.name)}"><td>{_link(queue_href(r.name), r.name)}{esc(paused)}</td>'
        f"<td>{esc(r.cluster)}</td><td>{r.priority}</td><td class=quota>{_concurrency(r)}</td>"
        f"<td>{quotas}</td><td>{esc(r.budget_text or '-')}</td>"
        f"<td>{r.running}</td><td>{r.waiting}</td><td>{r.pending}</td>"
        f"<td>{head}</td><td>{esc(r.head_starts or '-')}</td>"
        f"<td>{esc(', '.join(r.kinds))}</td><td>{esc(r.strategy)}</td></tr>"
    )


QUEUE_TABLE_HEADERS = (
    "Queue",
    "Cluster",
    "Priority",
    "Active/limit",
    "Quota used/limit",
    "Budget",
    "Running",
    "Waiting",
    "Pending",
    "Head reason",
    "Head starts",
    "Kinds",
    "Strategy",
)


def _version_line(version: str, extra: str = "") -> str:
    return f"<p class=muted>config <code>{esc(version[:12])}</code>{esc(extra)}</p>"


def _share_row(r: QueueRow, c: ClusterShare) -> str:
    state = "" if c.reachable else " (unreachable)"
    return (
        f'<tr data-fleet-queue="{esc(r.name)}" data-cluster="{esc(c.cluster)}">'
        f"<td>{_link(queue_href(r.name), r.name)}</td><td>{esc(c.cluster)}{esc(state)}</td>"
        f"<td>{c.active}</td><td>{esc(c.used_text)}</td>"
        f"<td class=free>{esc(c.free_text)}</td><td>{c.nodes}</td></tr>"
    )


FLEET_QUEUE_HEADERS = ("Fleet queue", "Cluster", "Active", "Used/clusterQuota", "Free", "Nodes")


def fleet_queues_section(view: QueuesView) -> str:
    """Each fleet queue's clusters, in choice order, with their free capacity."""
    if not view.fleet_queues:
        return ""
    rows = (_share_row(r, c) for r in view.fleet_queues for c in r.clusters)
    return (
        "<h2>Fleet queues</h2>"
        + _table(FLEET_QUEUE_HEADERS, rows)
        + "<p class=muted>Free: allocatable of the cluster's Ready, schedulable nodes minus "
        "the requests of every pod bound to them; a fleet queue's operation goes to the "
        "first cluster in this order whose free capacity fits it.</p>"
    )


def queues_main(view: QueuesView, note: str = "") -> str:
    cards = "".join(_fleet_card(t) for t in (*view.clusters, view.fleet))
    extra = f" · {note}" if note else ""
    return (
        "<h1>Queues</h1>"
        + _version_line(view.version, extra)
        + _table(QUEUE_TABLE_HEADERS, (_queue_row(r) for r in view.rows), "no queues")
        + "<p class=muted>Waiting: dispatched, not running yet (no node has room, or "
        "starting); it holds its quota. Priority orders dispatch, it never preempts.</p>"
        + f"<h2>Fleet</h2><div class=cards>{cards}</div>"
        + fleet_queues_section(view)
    )


def render_queues_page(view: QueuesView, note: str = "") -> str:
    return page("Queues", queues_main(view, note))


def _wait(value: timedelta | None) -> str:
    return "" if value is None else format_duration(int(value.total_seconds()))


def days_section(days: Sequence[QueueDay]) -> str:
    """A queue's wait and utilisation by day, from its recorded cycles replayed."""
    if not days:
        return ""
    rows = (
        f"<tr><td>{esc(d.day.isoformat())}</td><td>{d.dispatched}</td>"
        f"<td>{esc(_wait(d.mean_wait))}</td><td>{esc(_wait(d.max_wait))}</td>"
        f"<td>{esc(', '.join(f'{r} {v:.0%}' for r, v in d.utilisation.items()))}</td></tr>"
        for d in days
    )
    return (
        "<h2>Wait and utilisation by day</h2><p class=muted>the recorded cycles replayed "
        "from the status branch (UTC days); quota held is weighted by how long each "
        "cycle's figures stood</p>"
        + _table(("Day", "Dispatched", "Mean wait", "Longest wait", "Quota held"), rows)
    )


def queue_main(d: QueueDetail, days: Sequence[QueueDay] = ()) -> str:
    """``days``: its wait and utilisation by day over the recorded cycles."""
    r = d.row
    settings = _table(
        ("Setting", "Value", "Source", "Last changed"),
        (
            f"<tr><td><code>{esc(s.key)}</code></td><td>{esc(s.value)}</td>"
            f"<td><code>{esc(printable_path(d.source))}{':' + str(s.line) if s.line else ''}</code>"
            f"{'' if s.line else ' <span class=muted>(default)</span>'}</td>"
            f"<td>{_commit_cell(s.commit, s.summary, s.author, s.committed_at)}</td></tr>"
            for s in d.settings
        ),
    )
    active = _table(
        ("Operation", "Phase", "Reason", "Workload", "Node", "Requests", "Dispatched"),
        (
            f"<tr><td>{_link(operation_href(a.operation), a.operation)}</td>"
            f'<td>{esc(a.phase)}</td><td class=reason title="{esc(a.message)}">'
            f"{esc(a.reason or '')}</td><td><code>{esc(a.cluster)}/{esc(a.namespace)}/"
            f"{esc(a.workload)}</code></td><td>{esc(a.node or '')}</td>"
            f"<td>{esc(a.requests)}{esc(f' in {a.flavor}' if a.flavor else '')}</td>"
            f"<td>{esc(a.dispatched_at or '')}</td></tr>"
            for a in d.active
        ),
        "no active operations",
    )
    pending = _table(
        ("Pos", "Operation", "Reason", "Requests", "Starts", "What would admit it"),
        (
            f"<tr><td>{p.position}</td><td>{_link(operation_href(p.operation), p.operation)}</td>"
            f'<td class="reason{" never" if p.never_runs else ""}" title="{esc(p.message)}">'
            f"{esc(p.reason)}</td><td>{esc(p.requests)}</td><td>{esc(p.starts or '-')}</td>"
            f"<td>{esc(p.admitted_when)}</td></tr>"
            for p in d.pending[:MAX_ROWS]
        ),
        "nothing pending",
    )
    if len(d.pending) > MAX_ROWS:
        more = len(d.pending) - MAX_ROWS
        api = "/api/v1" + queue_href(r.name)
        pending += f"<p class=muted>and {more} more: see {_link(api, api)}</p>"
    upcoming = ""
    if d.next:
        items = "".join(f"<li>{_link(operation_href(o), o)}</li>" for o in d.next)
        upcoming = f"<h2>Dispatched by the next cycle</h2><ul>{items}</ul>"
    quotas = _row_bars(r) or "<span class=muted>no quota</span>"
    summary = (
        f"<dl><dt>Cluster</dt><dd>{esc(r.cluster)}</dd><dt>Priority</dt><dd>{r.priority}</dd>"
        f"<dt>Active/limit</dt><dd>{_concurrency(r)}</dd><dt>Quota</dt><dd>{quotas}</dd>"
        f"<dt>Pods/maxPods</dt><dd>{esc(r.pods_text)}</dd>"
        + (f"<dt>Cohort</dt><dd>{esc(r.cohort)}</dd>" if r.cohort else "")
        + (
            f"<dt>Budget (spent+committed/limit)</dt><dd>{esc(r.budget_text)}</dd>"
            if r.budget is not None
            else ""
        )
        + (
            f"<dt>Burn forecast</dt><dd>{esc(r.budget.forecast)}</dd>"
            if r.budget is not None and r.budget.forecast
            else ""
        )
        + f"<dt>Running / waiting / pending</dt><dd>{r.running} / {r.waiting} / {r.pending}</dd>"
        f"<dt>Strategy</dt><dd>{esc(r.strategy)}</dd><dt>Paused</dt>"
        f"<dd>{'yes' if r.paused else 'no'}</dd></dl>"
    )
    return (
        f"<h1>Queue {esc(printable_text(r.name))}</h1>{summary}<h2>Settings</h2>{settings}"
        f"<h2>Active operations</h2>{active}{upcoming}<h2>Pending</h2>{pending}"
        f"{days_section(days)}"
    )


def _commit_cell(commit: str, summary: str, author: str, when: Any) -> str:
    if not commit:
        return "<span class=muted>-</span>"
    date = when.date().isoformat() if when is not None else ""
    return (
        f'<code title="{esc(commit)}">{esc(commit[:12])}</code> {esc(summary)} '
        f"<span class=muted>{esc(author)} {esc(date)}</span>"
    )


def render_queue_page(d: QueueDetail) -> str:
    return page(f"Queue {d.row.name}", queue_main(d))


def _dl(items: Iterable[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items if v) + "</dl>"


def _json(value: Any) -> str:
    return esc(json.dumps(value, indent=2, sort_keys=True, default=str))


def _schedule(d: OperationDetail, key: str) -> str:
    """One of a scheduled operation's times (or its last run), "" when it has none."""
    return str((d.schedule or {}).get(key) or "")


def _run_link(op_id: str) -> str:
    return _link(operation_href(op_id), op_id) if op_id else ""


def _outputs(outputs: Mapping[str, Any]) -> str:
    """A run's named outputs as a table; the whole JSON too when it holds more than them
    (nested values, or more than are named)."""
    named = named_outputs(outputs)
    out = "<h2>Outputs</h2>"
    if named:
        out += _table(
            ("Output", "Value"),
            (
                f"<tr><td><code>{esc(printable_text(k))}</code></td><td>{esc(output_text(v))}</td></tr>"
                for k, v in named.items()
            ),
        )
    if len(named) < len(outputs):
        out += f"<pre>{_json(outputs)}</pre>"
    return out


def _sort_href(key: str, order: str) -> str:
    return f"?sort={quote_path(key, slash=False)}&order={order}"


def _child_runs(runs: Sequence[ChildRun], sort: str | None, order: str | None) -> str:
    """A workflow's children with their named outputs side by side, one column per name;
    a column's header sorts by it (``?sort=NAME&order=asc|desc``)."""
    names = output_names(runs)
    heads = ["<th>Child</th><th>Phase</th>"]
    for name in names:
        now = order or "asc"
        flip = "desc" if name == sort and now == "asc" else "asc"
        mark = (" ▲" if now == "asc" else " ▼") if name == sort else ""
        link = f'<a href="{esc(_sort_href(name, flip))}">{esc(printable_text(name))}</a>'
        heads.append(f"<th>{link}{mark}</th>")
    rows = []
    for run in sort_rows(runs, sort, order):
        cells = "".join(
            f"<td>{esc(output_text(run.outputs[n])) if n in run.outputs else ''}</td>"
            for n in names
        )
        rows.append(
            f"<tr><td>{_link(operation_href(run.operation), run.operation)}</td>"
            f"<td>{esc(run.phase)}</td>{cells}</tr>"
        )
    title = "Children" + (f" by {esc(printable_text(sort))}" if sort else "")
    hidden = len({n for run in runs for n in run.outputs}) - len(names)
    note = (
        f"<p>{hidden} more output names, each of fewer runs, are not columns "
        "(<code>?sort=NAME</code> sorts by any).</p>"
        if hidden > 0
        else ""
    )
    return f"<h2>{title}</h2><table><tr>{''.join(heads)}</tr>{''.join(rows)}</table>{note}"


def operation_main(
    d: OperationDetail,
    logs: str | None = None,
    logs_note: str = "",
    outcomes: Sequence[OutcomeChange] = (),
    *,
    sort: str | None = None,
    order: str | None = None,
) -> str:
    """``outcomes``: its outcome over the recorded cycles, replayed (``reconciler why``)."""
    queue = _link(queue_href(d.queue), d.queue) if d.queue else ""
    workload = "/".join(esc(x) for x in (d.cluster, d.namespace, d.workload) if x)
    items = [
        ("Phase", f"<b>{esc(d.phase)}</b>"),
        ("Reason", f"<span class=reason>{esc(d.reason)}</span>" if d.reason else ""),
        ("Message", esc(d.message)),
        ("Position", str(d.position) if d.position is not None else ""),
        ("What would admit it", esc(d.admitted_when)),
        ("Starts", esc((d.estimate or {}).get("text") or "")),
        ("Kind", esc(d.kind)),
        ("File", f"<code>{esc(printable_path(d.path))}</code>" if d.path else ""),
        ("Queue", queue),
        ("Cluster", esc(d.cluster)),
        ("Flavor", esc(d.flavor or "")),
        ("Workload", f"<code>{workload}</code>" if d.workload else ""),
        ("Pod", f"<code>{esc(d.pod)}</code>" if d.pod else ""),
        ("Node", esc(d.node)),
        ("Generation", str(d.generation) if d.generation is not None else ""),
        ("Config commit", f"<code>{esc((d.config_commit or '')[:12])}</code>"),
        ("Requests", esc(d.requests)),
        ("Presets", esc(", ".join(d.presets))),
        ("Workflow", _link(operation_href(d.parent), d.parent) if d.parent else ""),
        (
            "Outputs path",
            f"<code>{esc(printable_text(d.outputs_path))}</code>" if d.outputs_path else "",
        ),
        (
            "Last run",
            _link(operation_href(last), last) if (last := _schedule(d, "lastRun")) else "",
        ),
        ("Last fire time", esc(_schedule(d, "lastFire"))),
        ("Next fire time", esc(_schedule(d, "nextFire"))),
    ]
    parts = [f"<h1>Operation {esc(printable_text(d.operation))}</h1>", _dl(items)]
    if d.child_runs:
        parts.append(_child_runs(d.child_runs, sort, order))
    elif d.children:
        kids = "".join(f"<li>{_link(operation_href(c), c)}</li>" for c in d.children)
        parts.append(f"<h2>Children</h2><ul>{kids}</ul>")
    if d.history:
        parts.append("<h2>Phase history</h2>")
        parts.append(
            _table(
                ("Phase", "At", "Note"),
                (
                    f"<tr><td>{esc(h.phase)}</td><td>{esc(h.at or 'unknown')}</td>"
                    f"<td>{esc(h.note)}</td></tr>"
                    for h in d.history
                ),
            )
        )
    if d.recorded:
        parts.append("<h2>Recorded on the status branch</h2>")
        parts.append(
            _table(
                ("Phase", "Committed", "Note"),
                (
                    f"<tr><td>{esc(h.phase)}</td><td>{esc(h.at or '')}</td>"
                    f"<td>{esc(h.note)}</td></tr>"
                    for h in d.recorded
                ),
            )
        )
    if outcomes:
        parts.append("<h2>Outcome over time</h2>")
        parts.append(
            "<p class=muted>each recorded cycle replayed from the status branch "
            f"(<code>reconciler why {esc(printable_text(d.operation))}</code>)</p>"
        )
        parts.append(
            _table(
                ("From", "Status commit", "Outcome"),
                (
                    f"<tr><td>{esc(o.at.isoformat())}</td><td><code>{esc(o.commit[:12])}</code>"
                    f"</td><td>{esc(o.outcome)}</td></tr>"
                    for o in outcomes
                ),
            )
        )
    if d.outputs is not None:
        parts.append(_outputs(d.outputs))
    if logs is not None or logs_note:
        note = f"<p class=muted>{esc(logs_note)}</p>" if logs_note else ""
        text = f'<pre id="logs">{esc(logs)}</pre>' if logs is not None else ""
        parts.append(f"<h2>Logs (tail)</h2>{note}{text}")
    if d.provenance:
        parts.append("<h2>Compiled spec: where each field came from</h2>")
        parts.append(
            _table(
                ("Field", "Value", "Set by", "Source"),
                (
                    f"<tr><td><code>{esc(p.field)}</code></td><td><code>{esc(p.value)}</code>"
                    f"</td><td>{esc(p.step)}</td><td><code>{esc(p.source)}</code></td></tr>"
                    for p in d.provenance
                ),
            )
        )
    if d.spec is not None:
        parts.append(f"<h2>Compiled spec</h2><pre>{_json(d.spec)}</pre>")
    return "".join(parts)


def render_operation_page(
    d: OperationDetail,
    logs: str | None = None,
    logs_note: str = "",
    outcomes: Sequence[OutcomeChange] = (),
) -> str:
    return page(f"Operation {d.operation}", operation_main(d, logs, logs_note, outcomes))


def message_main(title: str, message: str) -> str:
    return f"<h1>{esc(title)}</h1><p>{esc(message)}</p>"


def render_message_page(title: str, message: str, *, refresh: int = REFRESH_SECONDS) -> str:
    return page(title, message_main(title, message), refresh=refresh)


def json_text(data: Mapping[str, Any] | Sequence[Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"


def error_json(message: str) -> bytes:
    """Every error of the JSON API, from the pages' routes and the server alike:
    ``{"error": message}``, through ``json_text``."""
    return json_text({"error": message}).encode()
