"""The queue pages and /api/v1 over real HTTP on the seed example (the cycle result is
built from the real compiler and planner; blame and logs are stand-ins for Git and a
cluster, which the browser test exercises for real)."""

from __future__ import annotations

import json
import logging
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.paths import TEMPLATE
from support.worlds import dispatched_states as _dispatched_states

from reconciler.core.compile import compile_repo
from reconciler.core.decision.cycle import Memory, decide, listing_from_memory
from reconciler.core.decision.schedule import with_ticks
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.plan import plan_repo
from reconciler.core.plan.estimate import estimate_decision
from reconciler.core.types import Phase, RepoSnapshot
from reconciler.core.views.queue_view import BlameLine
from reconciler.core.views.web_html import esc, operation_href, quote_path
from reconciler.runtime.cycle import CycleResult
from reconciler.runtime.estimates import EstimateWorker
from reconciler.runtime.http import HttpServer
from reconciler.runtime.metrics import Metrics
from reconciler.runtime.web import WebApp

NOW = datetime(2026, 1, 1, tzinfo=UTC)
EVIL = "p/<script>x</script>"  # an op id from a cluster annotation: anything goes


def _inline(work: Callable[[], None]) -> None:
    """Run the estimate worker on the caller's thread: these tests check what is shown."""
    work()


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


class Latest:
    def __init__(self) -> None:
        self.result: CycleResult | None = None

    def __call__(self) -> CycleResult | None:
        return self.result


@pytest.fixture
def cycle(template: RepoSnapshot) -> CycleResult:
    # as a cycle at NOW decides over it: with the runs its schedules make
    repo = with_ticks(compile_repo(replace(template, version="c0ffee" * 6 + "abcd")), {}, NOW)
    first = plan_repo(repo, [], NOW)
    states = _dispatched_states(repo, first)
    some = next(iter(states))
    states[some] = replace(states[some], message="<img src=x onerror=alert(1)>")
    states[EVIL] = WorkloadState(
        operation=EVIL,
        generation=1,
        cluster="local",
        namespace="team-a",
        name="evil-g1",
        uid="u",
        phase=Phase.RUNNING,
        queue="team-a",
        pod="evil-g1-pod",
    )
    plan = plan_repo(repo, [s.to_observed() for s in states.values()], NOW)
    return CycleResult(at=NOW, version=repo.version, compiled=repo, plan=plan, states=states)


@pytest.fixture
def served(cycle: CycleResult) -> Iterator[tuple[str, Latest, list[tuple[str, str]]]]:
    latest = Latest()
    blamed: list[tuple[str, str]] = []
    assert cycle.compiled is not None

    def blame(rev: str, path: str) -> list[BlameLine]:
        blamed.append((rev, path))
        text = "kind: Queue\nname: team-a\ncluster: local\npriority: 100\nquota:\n"
        text += "  nvidia.com/gpu: 2\n"
        return [
            BlameLine(i, f"{i:x}" * 40, "bob", NOW, f"set line {i}", line)
            for i, line in enumerate(text.splitlines(), start=1)
        ]

    def read_logs(cluster: str, namespace: str, pod: str, tail: int, container: str) -> str:
        assert container == "main"
        return f"log of {cluster}/{namespace}/{pod} tail={tail}\n<b>not bold</b>\n"

    app = WebApp(latest, blame=blame, read_logs=read_logs, tail_lines=20)
    server = HttpServer("127.0.0.1:0", Metrics().registry, lambda: True, web=app)
    server.start()
    try:
        yield server.url, latest, blamed
    finally:
        server.stop()


def test_before_the_first_cycle_pages_say_not_ready(served: tuple) -> None:  # type: ignore[type-arg]
    url, _, _ = served
    status, ctype, body = _get(url + "/")
    assert (status, ctype) == (503, "text/html; charset=utf-8") and "Not ready" in body
    status, ctype, body = _get(url + "/api/v1/queues")
    assert status == 503 and ctype == "application/json" and "error" in json.loads(body)
    assert _get(url + "/healthz")[0::2] == (200, "ok\n")  # probes are untouched


def test_queues_page_shows_quota_bars_in_priority_order_and_fleet(
    served: tuple,  # type: ignore[type-arg]
    cycle: CycleResult,
) -> None:
    url, latest, _ = served
    latest.result = cycle
    status, _, body = _get(url + "/")
    assert status == 200 and body.startswith("<!doctype html>")
    order = re.findall(r'<tr data-queue="([^"]+)"', body)
    assert order == ["notebooks", "sandboxes", "team-a", "team-b", "gpu-fleet", "batch"]
    team_a = body.split('data-queue="team-a"')[1].split("</tr>")[0]
    # a bar per flavor: team-a's H100 and an H100 borrowed from team-b, its A100
    assert 'data-used="2/1 (+1 borrowed)"' in team_a and 'data-used="1/1"' in team_a
    assert 'style="width:100%"' in team_a and "QuotaExceeded" in team_a
    team_b = body.split('data-queue="team-b"')[1].split("</tr>")[0]
    assert 'data-used="0/2 (1 lent)"' in team_b and 'data-used="2/2"' in team_b
    batch = body.split('data-queue="batch"')[1].split("</tr>")[0]
    assert "<b>3/3</b>" in batch
    assert 'data-fleet="local"' in body and 'data-fleet="*"' in body
    assert "q.set('partial','main')" in body  # the page refreshes itself, query kept
    status, _, main = _get(url + "/queues?partial=main")
    assert status == 200 and "<html" not in main and 'data-queue="team-a"' in main


def test_only_a_followers_queues_page_says_its_plan_is_not_carried_out(
    cycle: CycleResult,
) -> None:
    note = "read-only (not the leader): the plan is shown, not carried out"
    for leading in (True, False):
        shown = replace(cycle, leading=leading)
        got = WebApp(lambda shown=shown: shown, estimator=EstimateWorker(spawn=_inline))(
            "/queues", "partial=main"
        )
        assert got is not None and got[0] == 200
        assert (note in got[1].decode()) is not leading


def test_queue_page_has_blamed_settings_and_pending_with_admission(
    served: tuple,  # type: ignore[type-arg]
    cycle: CycleResult,
) -> None:
    url, latest, blamed = served
    latest.result = cycle
    status, _, body = _get(url + "/queues/team-a")
    assert status == 200
    assert blamed == [(cycle.version, "queues/team-a.yaml")]
    assert "queues/team-a.yaml:4" in body  # priority, on line 4 of the blamed text
    assert ("4" * 12) in body and "set line 4" in body and "bob" in body
    pending = body.split("<h2>Pending</h2>")[1]
    assert [int(p) for p in re.findall(r"<tr><td>(\d+)</td>", pending)] == [1, 2, 3]
    # per flavor: sweep-lr-2 may take either, train-ddp (2 x A100) and train-resnet the a100
    assert pending.count("<td>admitted when 2 h100 GPUs are released by") == 1
    assert pending.count("<td>admitted when 2 a100 GPUs are released by") == 1  # train-ddp
    assert pending.count("<td>admitted when 1 a100 GPU is released by") == 1
    # the hostile op id is escaped, and its link percent-encoded
    assert "<script>x</script>" not in body
    assert esc(EVIL) in body and 'href="/operations/p/%3Cscript%3Ex%3C%2Fscript%3E"' in body
    _get(url + "/queues/team-a")
    assert len(blamed) == 1  # blame is cached per commit and file
    assert _get(url + "/queues/nope")[0] == 404


def test_operation_page_has_history_logs_and_provenance(
    served: tuple,  # type: ignore[type-arg]
    cycle: CycleResult,
) -> None:
    url, latest, _ = served
    latest.result = cycle
    running = next(s for op, s in cycle.states.items() if s.phase is Phase.RUNNING and op != EVIL)
    status, _, body = _get(url + "/operations/" + running.operation)
    assert status == 200
    assert "Phase history" in body and running.started_at in body
    assert f"log of local/{running.namespace}/{running.pod} tail=20" in body
    assert "&lt;b&gt;not bold&lt;/b&gt;" in body
    provenance = body.split("where each field came from")[1]
    assert re.search(r"<td>preset [a-z0-9-]+ \([a-z_]+\)</td>", provenance)
    assert "projects/" in provenance
    status, _, body = _get(url + operation_href(EVIL))
    assert status == 200 and "<script>x</script>" not in body and esc(EVIL) in body
    touched = next(s for s in cycle.states.values() if s.message.startswith("<img"))
    _, _, body = _get(url + "/operations/" + touched.operation)
    assert "<img" not in body and "&lt;img src=x" in body
    assert _get(url + "/operations/vision/nope")[0] == 404


def test_json_api(served: tuple, cycle: CycleResult) -> None:  # type: ignore[type-arg]
    url, latest, _ = served
    latest.result = cycle
    status, ctype, body = _get(url + "/api/v1/queues")
    assert (status, ctype) == (200, "application/json")
    queues = {q["name"]: q for q in json.loads(body)["queues"]}
    assert queues["team-a"]["quota"][0] == {
        "resource": "nvidia.com/gpu",
        "used": "3",
        "limit": "2",
        "borrowed": "1",
        "lent": "0",
    }
    assert queues["batch"]["active"] == 3
    _, _, body = _get(url + "/api/v1/queues/team-a")
    detail = json.loads(body)
    assert [p["position"] for p in detail["pendingOperations"]] == [1, 2, 3]
    assert {s["key"]: s["line"] for s in detail["settings"]}["priority"] == 4
    _, _, body = _get(url + "/api/v1/operations/vision/train-resnet")
    op = json.loads(body)
    assert op["operation"] == "vision/train-resnet" and op["provenance"]
    _, _, body = _get(url + "/api/v1/fleet")
    fleet = json.loads(body)
    assert fleet["total"]["active"] == sum(q["active"] for q in queues.values())
    assert _get(url + "/api/v1/queues/nope")[0] == 404
    assert _get(url + "/api/v1/operations/vision/nope")[0] == 404
    assert _get(url + "/api/v1/nothing")[0] == 404
    assert _get(url + "/metrics")[0] == 200


def test_quote_path_and_esc() -> None:
    assert quote_path("team-a/train_1.x~") == "team-a/train_1.x~"
    assert quote_path('a b"<é') == "a%20b%22%3C%C3%A9"
    assert quote_path("a/b", slash=False) == "a%2Fb"
    assert operation_href("p/x/y") == "/operations/p/x%2Fy"
    assert esc('<a href="x">&') == "&lt;a href=&quot;x&quot;&gt;&amp;"


def test_worktree_sources_give_setting_lines_and_stay_inside_the_repo(
    cycle: CycleResult, tmp_path: Path
) -> None:
    from reconciler.runtime.service import Runtime
    from reconciler.runtime.web import make_web_app

    root = tmp_path / "repo"
    shutil.copytree(TEMPLATE, root)
    (tmp_path / "secret.yaml").write_text("no: peeking\n")
    runtime = Runtime(reconciler=None, publisher=None, completed=cycle)  # type: ignore[arg-type]
    app = make_web_app(runtime, {}, worktree=root)
    reply = app("/api/v1/queues/team-a", "")
    assert reply is not None and reply[0] == 200
    settings = {s["key"]: s for s in json.loads(reply[1])["settings"]}
    assert settings["priority"]["line"] == 10 and settings["priority"]["commit"] is None
    assert app._read_source is not None
    assert app._read_source("queues/team-a.yaml") == (root / "queues/team-a.yaml").read_bytes()
    assert app._read_source("../secret.yaml") is None
    assert app._read_source("/etc/hostname") is None
    assert app("/favicon.ico", "") is None  # the server answers 404


def test_a_worktree_file_that_goes_away_while_read_is_not_an_internal_error(
    cycle: CycleResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An editor saves by renaming: the queue file can vanish between the check and the
    read (``--watch``). That raised FileNotFoundError out of the page: a 500 "internal
    error" for a file being saved; the page goes without the settings' lines instead."""
    from reconciler.runtime import web
    from reconciler.runtime.service import Runtime

    root = tmp_path / "repo"
    shutil.copytree(TEMPLATE, root)
    runtime = Runtime(reconciler=None, publisher=None, completed=cycle)  # type: ignore[arg-type]
    app = web.make_web_app(runtime, {}, worktree=root)

    def vanished(path: Path) -> bytes:
        raise FileNotFoundError(2, "No such file or directory", str(path))

    monkeypatch.setattr(web, "read_capped", vanished)
    reply = app("/api/v1/queues/team-a", "")
    assert reply is not None and reply[0] == 200
    settings = {s["key"]: s for s in json.loads(reply[1])["settings"]}
    assert settings["priority"]["line"] is None


def test_a_long_queue_page_lists_the_first_rows_and_links_the_rest() -> None:
    from support.builders import World

    from reconciler.core.views.queue_view import build_queue_detail
    from reconciler.core.views.web_html import MAX_ROWS, render_queue_page

    w = World().queue("gpu", quota={"nvidia.com/gpu": 1})
    w.ops("p/op-{}", MAX_ROWS + 50, queue="gpu", gpu=1)
    repo, plan = w.repo(), w.plan()
    detail = build_queue_detail(repo, plan, {}, "gpu", applied=True)
    assert detail is not None and len(detail.pending) == MAX_ROWS + 49
    body = render_queue_page(detail).split("<h2>Pending</h2>")[1]
    assert len(re.findall(r"<tr><td>\d+</td>", body)) == MAX_ROWS
    assert "and 49 more" in body and 'href="/api/v1/queues/gpu"' in body


def test_pages_and_api_show_the_cycles_start_estimates(template: RepoSnapshot) -> None:
    """Issue 16: the queues page, a queue page, an operation page and the API show the
    estimates of the cycle's decision (``estimate_decision``), computed once per cycle."""
    repo = compile_repo(replace(template, version="c0ffee" * 6 + "abcd"))
    decision = decide(repo, listing_from_memory(repo, Memory()), Memory(), NOW)
    result = CycleResult(
        at=NOW,
        version=repo.version,
        compiled=repo,
        plan=decision.plan,
        states=decision.states,
        decision=decision,
    )
    estimates = estimate_decision(repo, decision)
    head = next(p for p in decision.plan.pending if p.queue == "team-a")
    expected = estimates.json_of(head.operation)
    assert expected is not None and expected["text"]
    app = WebApp(lambda: result, estimator=EstimateWorker(spawn=_inline))
    _, body, _ = app("/api/v1/queues") or (0, b"", "")
    row = next(q for q in json.loads(body)["queues"] if q["name"] == "team-a")
    assert row["headEstimate"] == expected
    _, body, _ = app("/api/v1/queues/team-a") or (0, b"", "")
    pending = json.loads(body)["pendingOperations"]
    assert [p["estimate"] for p in pending] == [
        estimates.json_of(p.operation) for p in decision.plan.pending if p.queue == "team-a"
    ]
    _, body, _ = app(f"/api/v1/operations/{head.operation}") or (0, b"", "")
    assert json.loads(body)["estimate"] == expected
    _, html, _ = app("/queues") or (0, b"", "")
    assert "<th>Head starts</th>" in html.decode() and esc(expected["text"]) in html.decode()
    _, html, _ = app("/queues/team-a") or (0, b"", "")
    assert "<th>Starts</th>" in html.decode() and esc(expected["text"]) in html.decode()
    _, html, _ = app(f"/operations/{head.operation}") or (0, b"", "")
    assert "<dt>Starts</dt>" in html.decode()


def test_paths_with_control_characters_are_quoted_on_the_pages() -> None:
    """Issue 13, section 6: a path on a web page (an operation's file, the source of each
    compiled field, a queue's file) goes through ``printable_path`` like everywhere else,
    so a newline, an escape or a bidi override is shown escaped, never raw."""
    from support.builders import World

    from reconciler.core.compile.explain import ProvenanceRow
    from reconciler.core.types import printable_path
    from reconciler.core.views.queue_view import OperationDetail, build_queue_detail
    from reconciler.core.views.web_html import esc, render_operation_page, render_queue_page

    evil = "projects/p/operations/evil\nreconciler.yaml:1:1: forged\x1b[31m\u202e.yaml"
    shown = esc(printable_path(evil))
    assert shown.startswith("&quot;") and "\\n" in shown and "\\x1b" in shown
    detail = OperationDetail(
        operation="p/evil",
        phase="Running",
        path=evil,
        provenance=(
            ProvenanceRow(
                field="run.container.image", value="x", step="operation", file=evil, line=3
            ),
        ),
    )
    w = World().queue("gpu", quota={"nvidia.com/gpu": 1})
    w.ops("p/op-{}", 2, queue="gpu", gpu=1)
    queue = build_queue_detail(w.repo(), w.plan(), {}, "gpu", applied=True)
    assert queue is not None and queue.settings
    pages = [
        render_operation_page(detail),
        render_queue_page(queue.model_copy(update={"source": evil})),
    ]
    for html in pages:
        assert shown in html
        assert "\nreconciler.yaml:1:1" not in html
        assert "\x1b" not in html and "\u202e" not in html
    assert f"<code>{shown}:3</code>" in pages[0]
    assert f"<code>{shown}</code>" in pages[0]


@pytest.mark.parametrize(
    ("path", "status", "said"),
    [
        (
            "/queues?partail=main",
            400,
            "unknown query parameter 'partail' (did you mean 'partial'?)",
        ),
        ("/?Partial=main", 400, "unknown query parameter 'Partial' (did you mean 'partial'?)"),
        ("/queues/team-a?zzz=1", 400, "unknown query parameter 'zzz' (allowed: partial)"),
        ("/queues?partial=yes", 400, "partial='yes': the only value is main"),
        ("/queues?partial", 400, "partial='': the only value is main"),
        ("/queues?partial=main&partial=all", 400, "partial='all': the only value is main"),
        (
            "/api/v1/queues?partial=main",
            400,
            "unknown query parameter 'partial': /api/v1 takes none",
        ),
        (
            "/api/v1/fleet?" + "&".join(f"a{i}=1" for i in range(30)),
            400,
            "too many query parameters",
        ),
        ("/favicon.ico?x=1", 404, "not found"),
        ("/queues?", 200, "<!doctype html>"),
        ("/queues?&", 200, "<!doctype html>"),  # no parameter: the whole page
        ("/queues?partial=main", 200, "<h1>Queues</h1>"),
    ],
)
def test_query_parameters_are_checked_not_ignored(
    served: tuple,  # type: ignore[type-arg]
    cycle: CycleResult,
    path: str,
    status: int,
    said: str,
) -> None:
    """An unknown or misspelt parameter was ignored: ``?partail=main`` got the whole page."""
    url, latest, _ = served
    latest.result = cycle
    got, ctype, body = _get(url + path)
    assert got == status, body[:300]
    if path.startswith("/api/"):
        assert ctype == "application/json" and json.loads(body) == {"error": said}
    elif status == 400:
        assert ctype == "text/html; charset=utf-8" and esc(said) in body
    else:
        assert body.startswith(said)


def test_api_errors_are_one_json_shape_whoever_answers(cycle: CycleResult) -> None:
    """A bug under /api/v1 was a text/plain 500, another method a text 404: every API error
    is ``{"error": ...}`` (``web_html.error_json``), pages and probes keep text."""
    calls = {"n": 0}

    def broken() -> CycleResult | None:
        calls["n"] += 1
        raise RuntimeError("a bug in the view")

    server = HttpServer("127.0.0.1:0", Metrics().registry, lambda: True, web=WebApp(broken))
    server.start()
    try:
        for path in ("/api/v1/queues", "//api/v1/fleet/"):  # the routes strip the slashes
            status, ctype, body = _get(server.url + path)
            assert (status, ctype) == (500, "application/json")
            assert json.loads(body) == {"error": "internal error; see the reconciler's log"}
        status, ctype, body = _get(server.url + "/queues")
        assert (status, ctype) == (500, "text/plain; charset=utf-8")
        assert body == "internal error; see the reconciler's log\n" and "a bug" not in body
        request = urllib.request.Request(server.url + "/api/v1/queues", data=b"{}", method="POST")
        try:
            urllib.request.urlopen(request, timeout=5)
            pytest.fail("POST was answered")
        except urllib.error.HTTPError as exc:
            assert exc.code == 405 and exc.headers["Allow"] == "GET, HEAD, OPTIONS"
            assert json.loads(exc.read()) == {
                "error": "method POST not allowed here: GET, HEAD, OPTIONS"
            }
    finally:
        server.stop()
    assert calls["n"] == 3


def test_a_dispatch_that_failed_is_shown_as_the_cycle_recorded_it(template: RepoSnapshot) -> None:
    """The leader's cycle planned a dispatch whose create failed: the status branch records
    it Queued with reason DispatchFailed and the error, but the operation page and its API
    said Dispatched (the plan's intent, not what the cycle did)."""
    from reconciler.core.reporting.status import StatusReason, build_status

    repo = compile_repo(replace(template, version="c0ffee" * 6 + "abcd"))
    plan = plan_repo(repo, [], NOW)
    op = plan.dispatch[0].operation
    error = "creating Job team-a/x: admission webhook denied the request"
    result = CycleResult(
        at=NOW,
        version=repo.version,
        compiled=repo,
        plan=plan,
        states={},
        dispatched=tuple(d.operation for d in plan.dispatch if d.operation != op),
        failed={op: error},
        failure_reasons={op: StatusReason.DISPATCH_FAILED},
    )
    failed = {op: (StatusReason.DISPATCH_FAILED, error)}
    record = next(r for r in build_status(repo, plan, {}, failed) if r.operation == op)
    assert (record.phase, record.reason) == (Phase.QUEUED, "DispatchFailed")
    app = WebApp(lambda: result)
    reply = app(f"/api/v1/operations/{op}")
    assert reply is not None and reply[0] == 200
    shown = json.loads(reply[1])
    assert (shown["phase"], shown["reason"], shown["message"]) == (
        record.phase.value,
        record.reason,
        record.message,
    )
    reply = app(operation_href(op))
    assert reply is not None
    page = reply[1].decode()
    assert "<b>Queued</b>" in page and "DispatchFailed" in page and esc(error) in page
    other = next(d.operation for d in plan.dispatch if d.operation != op)
    reply = app(f"/api/v1/operations/{other}")
    assert reply is not None and json.loads(reply[1])["phase"] == "Dispatched"


def test_a_name_from_the_path_is_shown_on_one_line_with_nothing_hidden(
    served: tuple,  # type: ignore[type-arg]
    cycle: CycleResult,
) -> None:
    """A 404 page repeated the path's name raw (escaped for HTML only): a bidi override, an
    escape or a NUL from a link went onto the page and into its title."""
    url, latest, _ = served
    latest.result = cycle
    for path in ("/queues/%E2%80%AEnimda%1B%5B31m%00", "/operations/p/%E2%80%AEx%0Ay"):
        status, _, body = _get(url + path)
        assert status == 404
        assert not any(c in body for c in "\u202e\x1b\x00"), body
        assert "\\u202e" in body and ("\\x1b" in body or "\\n" in body)


def test_an_operation_id_from_a_cluster_is_shown_with_nothing_hidden(
    served: tuple,  # type: ignore[type-arg]
    cycle: CycleResult,
) -> None:
    """An operation id comes from a workload's annotation (anyone who may create a Job
    there): HTML-escaped, but a bidi override or a newline in it went onto the queue page's
    links and the operation page's heading raw, spoofing what the row says."""
    url, latest, _ = served
    spoof = "p/\u202egpj.exe\nforged"
    states = dict(cycle.states)
    states[spoof] = replace(states[EVIL], operation=spoof, name="spoof-g1")
    latest.result = replace(cycle, states=states)
    for path in ("/queues/team-a", operation_href(spoof)):
        status, _, body = _get(url + path)
        assert status == 200, path
        assert "\u202e" not in body and "gpj.exe\nforged" not in body, path
        assert "\\u202egpj.exe\\nforged" in body, path


def test_pages_forbid_any_script_but_their_own(
    served: tuple,  # type: ignore[type-arg]
    cycle: CycleResult,
) -> None:
    """Defense in depth behind ``esc``: a Content-Security-Policy that lets only the
    page's own refresh script run (by its hash), no other origin, no framing."""
    import base64
    import hashlib

    url, latest, _ = served
    latest.result = cycle
    with urllib.request.urlopen(url + "/queues/team-a", timeout=5) as resp:
        policy = resp.headers["Content-Security-Policy"]
        body = resp.read().decode()
    scripts = re.findall(r"<script>(.*?)</script>", body, re.S)
    assert len(scripts) == 1
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
    assert "connect-src 'self'" in policy  # the refresh's fetch


def test_a_bug_behind_a_page_is_reported_as_ours_not_as_the_cluster_or_git(
    cycle: CycleResult, caplog: pytest.LogCaptureFixture
) -> None:
    """The log tail, the blame and the status history caught every exception: a bug in our
    code read "cannot read the log: 'NoneType' object ..." on the page, as if the cluster
    had failed, and a blame or history bug was a warning without its traceback."""
    from reconciler.adapters.git import GitSyncError
    from reconciler.adapters.kube import KubeError

    running = next(s for op, s in cycle.states.items() if s.phase is Phase.RUNNING and op != EVIL)
    failures: dict[str, Exception] = {}

    def read_logs(cluster: str, namespace: str, pod: str, tail: int, container: str) -> str:
        raise failures["logs"]

    def blame(rev: str, path: str) -> list[BlameLine]:
        raise failures["blame"]

    def history(path: str, flat: str) -> list[tuple[str, datetime, bytes]]:
        raise failures["history"]

    def views(logs: Exception, blamed: Exception, recorded: Exception) -> str:
        """The queue page and the operation page, with these failures behind them."""
        failures.update(logs=logs, blame=blamed, history=recorded)
        caplog.clear()
        app = WebApp(lambda: cycle, blame=blame, read_logs=read_logs, status_history=history)
        with caplog.at_level("WARNING", logger="reconciler.web"):
            for path in ("/queues/team-a", "/operations/" + running.operation):
                reply = app(path)
                assert reply is not None and reply[0] == 200, path
        return reply[1].decode()

    page = views(
        KubeError("pods/log: cluster unreachable"),
        GitSyncError("cannot blame"),
        GitSyncError("cannot read the history"),
    )
    assert "cannot read the log: pods/log: cluster unreachable" in page
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # theirs, not ours
    page = views(
        AttributeError("'NoneType' object has no attribute 'decode'"),
        TypeError("a blame bug"),
        KeyError("a history bug"),
    )
    assert "NoneType" not in page and "internal error reading the log" in page
    bugs = {str(r.exc_info[1]) for r in caplog.records if r.levelno >= logging.ERROR and r.exc_info}
    assert bugs == {
        "'NoneType' object has no attribute 'decode'",
        "a blame bug",
        "'a history bug'",
    }


def test_the_log_of_a_cluster_the_cycle_found_unreachable_is_not_waited_for(
    cycle: CycleResult,
) -> None:
    """The page said the cluster was unreachable and still tried its log at every view and
    every 5 s refresh: a blackholed API server held the page (and a connection slot) for
    the connect timeout each time. The page says what the cycle found instead."""
    from reconciler.core.decision.cycle import ClusterHealth

    running = next(s for op, s in cycle.states.items() if s.phase is Phase.RUNNING and op != EVIL)
    calls: list[str] = []

    def read_logs(cluster: str, namespace: str, pod: str, tail: int, container: str) -> str:
        calls.append(pod)
        return "a log line\n"

    down = replace(cycle, clusters=(ClusterHealth("local", False, "connect timeout"),))
    reply = WebApp(lambda: down, read_logs=read_logs)("/operations/" + running.operation)
    assert reply is not None and reply[0] == 200 and calls == []
    assert "cannot read the log: cluster local was unreachable at the last cycle" in (
        reply[1].decode()
    )
    up = replace(cycle, clusters=(ClusterHealth("local", True),))
    reply = WebApp(lambda: up, read_logs=read_logs)("/operations/" + running.operation)
    assert reply is not None and "a log line" in reply[1].decode() and calls == [running.pod]


def test_a_workflows_children_compare_their_outputs_sorted_by_any(
    served: tuple,  # type: ignore[type-arg]
    cycle: CycleResult,
) -> None:
    """The workflow page lists its children with their named outputs, one column each,
    sorted by ``?sort=NAME&order=asc|desc``; a run's own page shows its outputs and path."""
    url, latest, _ = served
    states = dict(cycle.states)
    results = {
        "vision/sweep-lr-0": {"accuracy": 0.71, "loss": 0.9},
        "vision/sweep-lr-1": {"accuracy": 0.93, "note": "<b>best</b>"},
        "vision/sweep-lr-2": {"loss": 0.3},
    }
    for op_id, outputs in results.items():
        state = states.get(op_id) or WorkloadState(
            operation=op_id,
            generation=1,
            cluster="local",
            namespace="vision",
            name=op_id.replace("/", "-") + "-g1",
            uid="u-" + op_id,
            phase=Phase.SUCCEEDED,
        )
        states[op_id] = replace(
            state, outputs=outputs, outputs_path=f"s3://r/vision/{op_id[7:]}/x-g1/"
        )
    latest.result = replace(cycle, states=states)

    def order_of(body: str) -> list[str]:
        table = body.split("<h2>Children")[1].split("</table>")[0]
        return re.findall(r"vision/sweep-lr-(\d)</a>", table)

    status, _, body = _get(url + operation_href("vision/sweep-lr"))
    assert status == 200 and order_of(body) == ["0", "1", "2"]
    assert ">accuracy</a>" in body and ">loss</a>" in body and ">note</a>" in body
    assert "&lt;b&gt;best&lt;/b&gt;" in body and "<b>best</b>" not in body
    status, _, body = _get(url + operation_href("vision/sweep-lr") + "?sort=accuracy&order=desc")
    assert status == 200 and order_of(body) == ["1", "0", "2"]  # without it: last
    assert 'href="?sort=accuracy&amp;order=asc"' in body  # the header flips the order
    status, _, body = _get(url + operation_href("vision/sweep-lr") + "?sort=loss&partial=main")
    assert status == 200 and "<html" not in body and order_of(body) == ["2", "0", "1"]

    for query, said in [
        ("?sort=acuracy", "sort='acuracy': no run has an output of that name (did you mean "),
        ("?sort=loss&order=up", "order='up': use asc or desc"),
        ("?sort=loss&sort=accuracy", "sort is given 2 times: give it once"),
        ("?srot=loss", "unknown query parameter 'srot' (did you mean 'sort'?)"),
    ]:
        status, _, body = _get(url + operation_href("vision/sweep-lr") + query)
        assert status == 400 and esc(said) in body, (query, body[-400:])
    status, _, body = _get(url + operation_href("vision/sweep-lr-0") + "?sort=loss")
    assert status == 400 and "this is no workflow" in body
    status, _, body = _get(url + "/queues/team-a?sort=loss")
    assert status == 400 and esc("unknown query parameter 'sort' (allowed: partial)") in body

    status, _, body = _get(url + operation_href("vision/sweep-lr-1"))
    assert status == 200 and "<h2>Outputs</h2>" in body
    assert "<code>accuracy</code></td><td>0.93</td>" in body
    assert "<code>s3://r/vision/sweep-lr-1/x-g1/</code>" in body

    # children that each name their outputs differently: as many columns as one run has
    for child, prefix in (("0", "a"), ("2", "b")):
        op_id = f"vision/sweep-lr-{child}"
        outputs = {f"{prefix}{k:02}": k for k in range(32)}
        states[op_id] = replace(states[op_id], outputs=outputs)
    latest.result = replace(cycle, states=states)
    status, _, body = _get(url + operation_href("vision/sweep-lr") + "?sort=b31")
    head = body.split("<h2>Children")[1].split("</tr>")[0]
    assert status == 200 and head.count("<th>") == 2 + 32
    assert "34 more output names, each of fewer runs, are not columns" in body
    assert order_of(body) == ["2", "0", "1"]  # sorted by a name past the columns
