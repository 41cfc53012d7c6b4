"""Notifications and commit statuses: the config (its errors at file:line:col), what a
cycle's transitions send (core/reporting/notify.py), and the sending (runtime/notify.py) against
real HTTP receivers on 127.0.0.1 that record what they get: signed, with a stable
idempotency key, retried on a 500, and never slowing a cycle while a receiver hangs; and
what is owed across a kill (``status/_notify.yaml``, on a status branch served by ``git
daemon``): sent by the next process with the same key, never twice once delivered."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.builders import NOW, World
from support.git_commands import git
from support.git_daemon import git_daemon
from support.harness import Harness
from support.helpers import Blackhole, Receiver, wait_until
from support.snapshots import repo

from reconciler.adapters.git import ConfigRepo, StatusBranch
from reconciler.core.compile import compile_repo
from reconciler.core.decision.render import spec_hash
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.reporting.notify import commit_report, encode, encode_owed, notices, read_owed
from reconciler.core.types import (
    CommitStatusSpec,
    CompiledRepo,
    ConfigError,
    Location,
    NotifyRule,
    Phase,
    RejectedOperation,
    RejectReason,
    SecretKey,
)
from reconciler.runtime.metrics import Metrics
from reconciler.runtime.notify import (
    COMMIT_STATUS,
    NOTIFICATION,
    Delivery,
    Notifier,
    Outbox,
    _commit_status,
)
from reconciler.runtime.service import Runtime
from reconciler.runtime.status import StatusPublisher

SECRET = b"hook-secret"
TOKEN = b"git-token"

# --- the config ---------------------------------------------------------------------------

CLUSTER = "kind: Cluster\nkubeconfig: {path: /nonexistent}\n"
OP = (
    "kind: Operation\nrun:\n  kind: job\n  container:\n    image: busybox\n"
    "    resources: {requests: {cpu: 10m}}\n"
)


def files(**extra: str | None) -> dict[str, str | None]:
    base: dict[str, str | None] = {
        "reconciler.yaml": "kind: Org\ndefaults: {queue: q}\n",
        "clusters/local.yaml": CLUSTER,
        "queues/q.yaml": "kind: Queue\ncluster: local\n",
        "connections/hooks.yaml": "kind: Connection\nsecret: {name: hooks, envFrom: true}\n",
        "connections/data.yaml": (
            "kind: Connection\nvolume: {claimName: data, mountPath: /data}\n"
        ),
        "projects/p/project.yaml": "kind: Project\n",
        "projects/p/operations/a.yaml": OP,
    }
    base.update(extra)
    return base


def errors_of(compiled: CompiledRepo) -> list[str]:
    return [str(e) for e in compiled.errors]


def test_rules_of_the_org_project_and_operation_are_compiled_with_their_secrets() -> None:
    compiled = compile_repo(
        repo(
            files(
                **{
                    "reconciler.yaml": (
                        "kind: Org\ndefaults: {queue: q}\nwebUrl: http://127.0.0.1:8080/\n"
                        "notifications:\n"
                        "  - on: [Failed]\n"
                        "    webhook: {url: https://hooks.example.com/org,"
                        " secret: {connection: hooks, key: hmac}}\n"
                    ),
                    "projects/p/project.yaml": (
                        "kind: Project\nnotifications:\n"
                        "  - on: [Succeeded]\n    webhook: {url: http://127.0.0.1:9/p}\n"
                    ),
                    "projects/p/operations/a.yaml": OP
                    + "notifications:\n  - on: [Running, Stopped]\n"
                    "    webhook: {url: http://127.0.0.1:9/a}\n",
                }
            )
        )
    )
    assert compiled.valid, errors_of(compiled)
    (org_rule,) = compiled.org.notifications
    assert org_rule.on == {"Failed"} and org_rule.secret == SecretKey("hooks", "hooks", "hmac")
    assert str(org_rule.location) == "reconciler.yaml:5:5"
    assert compiled.org.web_url == "http://127.0.0.1:8080"
    (op,) = compiled.operations
    assert [r.url for r in op.notifications] == ["http://127.0.0.1:9/p", "http://127.0.0.1:9/a"]
    # a webhook is the reconciler's, not the workload's: the spec (and its hash) leave it out
    plain = compile_repo(repo(files())).operations[0]
    assert "notifications" not in op.spec
    assert spec_hash(op, compiled.connections) == spec_hash(plain, compiled.connections)


@pytest.mark.parametrize(
    ("path", "text", "error"),
    [
        (
            "reconciler.yaml",
            "kind: Org\nnotifications:\n  - on: [Failed]\n    webhook: {url: ftp://x/y}\n",
            "reconciler.yaml:4:20: 'ftp://x/y' is not an http:// or https:// URL",
        ),
        (
            "projects/p/project.yaml",
            "kind: Project\nnotifications:\n  - on: [Failed]\n"
            "    webhook: {url: 'https://kubernetes.default.svc/api/v1'}\n",
            "projects/p/project.yaml:4:20: 'https://kubernetes.default.svc/api/v1' points at "
            "the cluster's API server",
        ),
        (
            "reconciler.yaml",
            "kind: Org\nnotifications:\n  - on: [Failed]\n"
            "    webhook: {url: 'http://h/x', secret: {connection: hook}}\n",
            "reconciler.yaml:4:55: unknown connection 'hook': no connections/hook.yaml "
            "(did you mean 'hooks'?)",
        ),
        (
            "projects/p/operations/a.yaml",
            OP + "notifications:\n  - on: [Failed]\n"
            "    webhook: {url: 'http://h/x', secret: {connection: data}}\n",
            "projects/p/operations/a.yaml:9:55: connection 'data' is a volume connection: a "
            "webhook secret or a token is read from a 'secret' connection",
        ),
        (
            "reconciler.yaml",
            "kind: Org\nnotifications:\n  - on: [Finished]\n    webhook: {url: 'http://h/x'}\n",
            "reconciler.yaml:3:10: Input should be 'Dispatched', 'Running'",
        ),
        (
            "reconciler.yaml",
            "kind: Org\ncommitStatus:\n  provider: github\n  url: https://api.github.com\n"
            "  repository: o/r\n  token: {connection: nope}\n",
            "reconciler.yaml:6:23: unknown connection 'nope'",
        ),
        (
            "reconciler.yaml",
            "kind: Org\ncommitStatus:\n  provider: github\n  url: https://api.github.com\n"
            "  repository: o/r\n  token: {connection: hooks}\n  cluster: remote\n",
            "reconciler.yaml:7:12: unknown cluster 'remote': no clusters/remote.yaml",
        ),
    ],
)
def test_bad_notification_config_is_an_error_at_its_line(path: str, text: str, error: str) -> None:
    compiled = compile_repo(repo(files(**{path: text})))
    where, _, message = error.partition(": ")
    found = errors_of(compiled)
    assert any(e.startswith(where + ": ") and message in e for e in found), found


def test_a_commit_status_needs_its_cluster_named_when_there_are_several() -> None:
    org = (
        "kind: Org\ndefaults: {queue: q}\ncommitStatus:\n  provider: gitlab\n  url: https://gitlab.example.com/api/v4\n"
        "  repository: group/config\n  token: {connection: hooks}\n"
    )
    two = compile_repo(repo(files(**{"reconciler.yaml": org, "clusters/b.yaml": CLUSTER})))
    assert errors_of(two) == [
        "reconciler.yaml:4:3: commitStatus: set 'cluster' (the cluster whose Secret holds the "
        "token): the repo has 2 clusters"
    ]
    one = compile_repo(repo(files(**{"reconciler.yaml": org})))
    assert one.valid and one.org.commit_status == CommitStatusSpec(
        "gitlab",
        "https://gitlab.example.com/api/v4",
        "group/config",
        SecretKey("hooks", "hooks", "token"),
        "local",
        "default",
    )


# --- what a cycle sends ------------------------------------------------------------------


def rule(
    *on: str, url: str = "http://127.0.0.1:9/h", secret: SecretKey | None = None
) -> NotifyRule:
    return NotifyRule(frozenset(on), url, secret, Location("reconciler.yaml", 3, 5))


def state(op: str, phase: Phase, uid: str = "u1") -> WorkloadState:
    return WorkloadState(op, 1, "local", "p", op.replace("/", "-"), uid, phase, queue="q")


def test_each_transition_into_a_listed_phase_is_one_notice_with_a_stable_key() -> None:
    world = World().queue("q")
    world.op("p/a", queue="q")
    world.op("p/b", queue="q")
    world.org = replace(world.org, notifications=(rule("Running", "Failed"),))
    compiled = world.repo("c1")
    at = NOW
    before = {"p/a": state("p/a", Phase.DISPATCHED)}
    after = {"p/a": state("p/a", Phase.RUNNING), "p/b": state("p/b", Phase.DISPATCHED, "u2")}
    (sent,) = notices(compiled, before, after, frozenset(), at)
    assert sent.key == "p/a:u1:Running"
    body = sent.payload
    assert body["phase"] == "Running" and body["runUid"] == "u1" and body["queue"] == "q"
    assert body["commit"] == "c1" and body["cluster"] == "local"
    # no change, no notice; the same change derived again (a restart) has the same key
    assert notices(compiled, after, after, frozenset(), at) == ()
    (again,) = notices(compiled, before, after, frozenset(), at)
    assert again.key == sent.key
    # a new run of the same operation is a new transition, with a new key
    rerun = {"p/a": state("p/a", Phase.RUNNING, "u9")}
    assert [n.key for n in notices(compiled, after, rerun, frozenset(), at)] == ["p/a:u9:Running"]


def test_a_policy_refusal_is_sent_once_when_it_appears() -> None:
    world = World().queue("q")
    refused = RejectedOperation(
        "p/x", "projects/p/operations/x.yaml", RejectReason.POLICY_VIOLATION, "too big"
    )
    world.rejected.append(replace(refused, notifications=(rule("PolicyViolation"),)))
    compiled = world.repo("c1")
    at = NOW
    (sent,) = notices(compiled, {}, {}, None, at)
    assert sent.key.startswith("p/x:refused-") and sent.key.endswith(":PolicyViolation")
    assert sent.payload["message"] == "too big"
    assert notices(compiled, {}, {}, frozenset({"p/x"}), at) == ()


def test_the_commit_status_says_valid_or_the_first_error() -> None:
    spec = CommitStatusSpec("github", "http://h", "o/r", SecretKey("t", "t", "token"), "local", "d")
    errors = [ConfigError(Location("queues/q.yaml", 2, 3), "bad"), ConfigError(Location("x"), "y")]
    failed = commit_report(spec, "", "c2", errors, "", None, ())
    assert failed is not None and (failed.state, failed.description) == (
        "failure",
        "queues/q.yaml:2:3: bad (and 1 more)",
    )
    internal = commit_report(spec, "", "c2", (), "boom", None, ())
    assert internal is not None and internal.state == "error"
    assert commit_report(None, "", "c2", errors, "", None, ()) is None
    shown = harness("http://127.0.0.1:9", "p/a", "p/b").cycle().report
    ok = commit_report(spec, "", "c0ffee", (), "", shown, ())
    assert ok is not None and (ok.state, ok.description) == (
        "success",
        "valid, 2 dispatched, 0 pending",
    )
    waiting = commit_report(spec, "", "c0ffee", (), "", shown, ("local",))
    assert waiting is not None and (waiting.state, waiting.description) == (
        "pending",
        "valid, 2 dispatched, 0 pending; cluster local unreachable",
    )
    # a commit the report is not of (not applied yet) has no status yet
    assert commit_report(spec, "", "c3", (), "", shown, ()) is None


# --- the sending, against real receivers ------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver.running() as rec:
        yield rec


def secrets(cluster: str, namespace: str, key: SecretKey) -> bytes:
    assert (cluster, namespace) in {("local", "p"), ("local", "d"), ("local", "default")}
    return {"hmac": SECRET, "token": TOKEN}[key.key]


def outbox(metrics: Metrics, **kw: Any) -> Outbox:
    box = Outbox(metrics, secrets, **{"backoff": 0.05, "timeout": 2.0, **kw})
    box.start()
    return box


def sent(metrics: Metrics, kind: str) -> float:
    return metrics.notifications_sent.labels(kind)._value.get()


def dropped(metrics: Metrics, kind: str, reason: str) -> float:
    return metrics.notifications_dropped.labels(kind, reason)._value.get()


def harness(url: str, *ops: str) -> Harness:
    world = World().queue("q", quota={"nvidia.com/gpu": 100})
    for op in ops:
        world.op(op, queue="q", gpu=1)
    world.org = replace(
        world.org,
        notifications=(
            rule("Dispatched", "Succeeded", url=url, secret=SecretKey("h", "h", "hmac")),
        ),
        commit_status=CommitStatusSpec(
            "github", url, "org/config", SecretKey("t", "t", "token"), "local", "d"
        ),
        web_url="http://127.0.0.1:8080",
    )
    return Harness(world.repo("c0ffee"))


def test_a_dispatch_notifies_signed_and_the_commit_status_reaches_github(
    receiver: Receiver,
) -> None:
    h = harness(receiver.url + "/hook", "p/a")
    metrics = Metrics()
    runtime = Runtime(h.reconciler, None, metrics, notifier=Notifier(outbox(metrics)))
    runtime.on_cycle(h.cycle())
    wait_until(lambda: len(receiver.got) == 2, timeout=10, what="two requests")
    by_path = {r.path: r for r in receiver.got}
    hook = by_path["/hook"]
    expected = "sha256=" + hmac.new(SECRET, hook.body, hashlib.sha256).hexdigest()
    assert hook.headers["x-reconciler-signature"] == expected
    body = json.loads(hook.body)
    assert body["operation"] == "p/a" and body["phase"] == "Dispatched"
    assert (
        hook.headers["idempotency-key"]
        == body["idempotencyKey"]
        == f"p/a:{body['runUid']}:Dispatched"
    )
    assert body["url"] == "http://127.0.0.1:8080/operations/p/a"
    status = by_path["/hook/repos/org/config/statuses/c0ffee"]
    assert status.headers["authorization"] == "Bearer git-token"
    assert json.loads(status.body) == {
        "state": "success",
        "context": "reconciler",
        "description": "valid, 1 dispatched, 0 pending",
        "target_url": "http://127.0.0.1:8080/",
    }
    # the next cycle changes nothing: nothing more is sent (the commit is reported once)
    runtime.on_cycle(h.cycle())
    h.move("p/a", "Succeeded")
    runtime.on_cycle(h.cycle())
    wait_until(lambda: len(receiver.got) == 3, timeout=10, what="the Succeeded notice")
    assert json.loads(receiver.got[2].body)["phase"] == "Succeeded"
    time.sleep(0.3)
    assert len(receiver.got) == 3
    assert runtime.close(5.0)
    assert sent(metrics, NOTIFICATION) == 2 and sent(metrics, COMMIT_STATUS) == 1


def test_gitlab_gets_its_own_path_state_and_token(receiver: Receiver) -> None:
    metrics = Metrics()
    box = outbox(metrics)
    spec = CommitStatusSpec(
        "gitlab",
        receiver.url + "/api/v4",
        "group/config",
        SecretKey("t", "t", "token"),
        "local",
        "d",
    )
    report = commit_report(
        spec, "", "abc123", [ConfigError(Location("q.yaml", 1, 1), "x")], "", None, ()
    )
    assert report is not None
    box.put(_commit_status(report))
    wait_until(lambda: receiver.got, timeout=10, what="the status")
    (got,) = receiver.got
    assert got.path == "/api/v4/projects/group%2Fconfig/statuses/abc123"
    assert got.headers["private-token"] == "git-token"
    assert json.loads(got.body) == {
        "state": "failed",
        "name": "reconciler",
        "description": "q.yaml:1:1: x",
    }
    assert box.close(5.0)


def test_a_receiver_answering_500_is_tried_again_then_given_up(receiver: Receiver) -> None:
    receiver.status = 500
    metrics = Metrics()
    box = outbox(metrics, attempts=3)
    h = harness(receiver.url, "p/a")
    Runtime(h.reconciler, None, metrics, notifier=Notifier(box)).on_cycle(h.cycle())
    wait_until(
        lambda: (
            dropped(metrics, NOTIFICATION, "gave_up") == 1
            and dropped(metrics, COMMIT_STATUS, "gave_up") == 1
        ),
        timeout=10,
        what="both given up",
    )
    assert len(receiver.got) == 6  # 3 attempts each, the same body and key each time
    keys = {r.headers.get("idempotency-key") for r in receiver.got if r.path == "/"}
    assert len(keys) == 1
    assert sent(metrics, NOTIFICATION) == 0
    receiver.status = 404  # a 4xx is not tried again
    box.put(_a_delivery(receiver.url))
    wait_until(lambda: dropped(metrics, NOTIFICATION, "refused") == 1, timeout=10, what="refused")
    assert len(receiver.got) == 7
    assert box.close(5.0)


def _a_delivery(url: str) -> Delivery:
    return Delivery(NOTIFICATION, url, {}, "a test notice", key="k")


def test_a_hanging_receiver_never_slows_a_cycle_and_what_overflows_is_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    with Blackhole() as hole:
        url = hole.url("http")
        box = outbox(metrics, capacity=2, timeout=30.0, attempts=1)
        h = harness(url, *(f"p/op{i}" for i in range(6)))
        runtime = Runtime(h.reconciler, None, metrics, notifier=Notifier(box))
        started = time.monotonic()
        runtime.on_cycle(h.cycle())  # 6 dispatches and a commit status: 7 requests
        for i in range(6):
            h.move(f"p/op{i}", "Succeeded")
        runtime.on_cycle(h.cycle())  # 6 more
        assert time.monotonic() - started < 5.0
        wait_until(lambda: hole.accepted >= 1, timeout=10, what="the first request")
        # one request hangs in the worker, two wait in the queue, the rest are dropped
        # (13 notices; the commit status, dropped, is queued again by the next cycle)
        full = dropped(metrics, NOTIFICATION, "queue_full") + dropped(
            metrics, COMMIT_STATUS, "queue_full"
        )
        assert full >= 14 - 3
        # one line each time the queue fills (twice if the worker took one in between),
        # not one per request dropped
        assert caplog.text.count("(queue_full)") <= 2 < full
        assert not box.close(0.2)  # the hung request outlives a short stop
    # the two that waited in the queue: notices, or the commit status when the worker took
    # its first request late, between the second cycle's notices and its commit status
    waited = dropped(metrics, NOTIFICATION, "shutdown") + dropped(
        metrics, COMMIT_STATUS, "shutdown"
    )
    assert waited >= 2


def test_a_url_at_a_clusters_api_server_is_refused_when_sending(receiver: Receiver) -> None:
    metrics = Metrics()
    box = outbox(metrics, api_servers=lambda: (receiver.url + "/",))
    box.put(_a_delivery(receiver.url + "/api/v1/namespaces"))
    wait_until(lambda: dropped(metrics, NOTIFICATION, "refused") == 1, timeout=10, what="refused")
    assert receiver.got == []
    assert box.close(5.0)


@pytest.mark.parametrize("host", ["localhost", "127.1", "[::ffff:127.0.0.1]"])
def test_a_url_naming_a_clusters_api_server_another_way_is_refused(
    receiver: Receiver, host: str
) -> None:
    """The address the request connects to is checked, not only how its URL spells it."""
    metrics = Metrics()
    port = receiver.url.rpartition(":")[2]
    box = outbox(metrics, api_servers=lambda: (receiver.url,))
    box.put(_a_delivery(f"http://{host}:{port}/api/v1/namespaces"))
    wait_until(lambda: dropped(metrics, NOTIFICATION, "refused") == 1, timeout=10, what="refused")
    assert receiver.got == []
    assert box.close(5.0)


def test_a_redirect_is_not_followed(receiver: Receiver) -> None:
    """A receiver must not send the body, or a Git host's token, somewhere else."""
    metrics = Metrics()
    box = outbox(metrics)
    receiver.status = 302  # urllib would follow it as a GET
    receiver.location = receiver.url + "/elsewhere"
    box.put(_a_delivery(receiver.url + "/hook"))
    wait_until(lambda: dropped(metrics, NOTIFICATION, "refused") == 1, timeout=10, what="refused")
    assert [r.path for r in receiver.got] == ["/hook"]
    assert box.close(5.0)


def queued(box: Outbox) -> list[str]:
    """The idempotency keys of the notifications queued (the worker not started)."""
    return [d.key for d in list(box._queue.queue) if d is not None and d.kind == NOTIFICATION]


def test_a_restart_sends_what_changed_after_the_recorded_states_and_nothing_else() -> None:
    h = harness("http://127.0.0.1:9", "p/a")
    dispatched = h.cycle()
    h.move("p/a", "Succeeded")
    finished = h.cycle()
    uid = finished.states["p/a"].uid
    # the status branch recorded the run finished: a new process sends nothing for it
    recorded = Notifier(Outbox(Metrics(), secrets))
    recorded.seed(finished.states)
    recorded.on_cycle(finished)
    assert queued(recorded.outbox) == []
    # it recorded the run dispatched only: the end is sent, with the key it always has
    behind = Notifier(Outbox(Metrics(), secrets))
    behind.seed(dispatched.states)
    behind.on_cycle(finished)
    assert queued(behind.outbox) == [f"p/a:{uid}:Succeeded"]
    # a follower's baseline follows what it observes: the leader sent those
    follower = Notifier(Outbox(Metrics(), secrets))
    follower.follow(dispatched)
    follower.follow(finished)
    follower.on_cycle(finished)
    assert queued(follower.outbox) == []


def test_a_secret_that_cannot_be_read_or_sent_is_dropped_and_counted(receiver: Receiver) -> None:
    def broken(cluster: str, namespace: str, key: SecretKey) -> bytes:
        if key.key == "missing":
            raise RuntimeError("Secret d/t has no key 'missing'")
        return b"two\nlines"

    metrics = Metrics()
    box = Outbox(metrics, broken, backoff=0.01, attempts=2)
    box.start()
    token = replace(_a_delivery(receiver.url), kind=COMMIT_STATUS, auth="gitlab")
    box.put(replace(token, secret=SecretKey("t", "t", "missing")))
    box.put(replace(token, secret=SecretKey("t", "t", "token")))
    wait_until(
        lambda: (
            dropped(metrics, COMMIT_STATUS, "gave_up") == 1
            and dropped(metrics, COMMIT_STATUS, "refused") == 1
        ),
        timeout=10,
        what="both dropped",
    )
    assert receiver.got == []  # neither reached the receiver
    assert box.close(5.0)


def test_a_run_that_ends_sends_its_named_outputs_and_their_path() -> None:
    world = World().queue("q")
    world.op("p/a", queue="q")
    world.org = replace(world.org, notifications=(rule("Succeeded"),))
    compiled = world.repo("c1")
    ended = replace(
        state("p/a", Phase.SUCCEEDED),
        outputs={"accuracy": 0.93, "note": "x" * 1000, "nested": {"a": 1}},
        outputs_path="s3://results/p/a/p-a-g1/",
    )
    (sent,) = notices(compiled, {"p/a": state("p/a", Phase.RUNNING)}, {"p/a": ended}, None, NOW)
    body = json.loads(encode(sent.payload))
    # the named values only, bounded as on the pages: a nested value stays out, text is cut
    assert body["outputs"]["accuracy"] == 0.93 and "nested" not in body["outputs"]
    assert len(body["outputs"]["note"]) < 1000
    assert body["outputsPath"] == "s3://results/p/a/p-a-g1/"


# --- owed across a restart (status/_notify.yaml) -----------------------------------------


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[str]:
    """A config repo (one commit on main), bare, served by ``git daemon``: its URL."""
    root = tmp_path / "served"
    root.mkdir()
    git(root, "init", "-q", "--bare", "-b", "main", "config.git")
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(root / "config.git"), str(work))
    (work / "reconciler.yaml").write_text("kind: Org\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "one")
    git(work, "push", "-q", "origin", "HEAD:main")
    with git_daemon(root) as url:
        yield f"{url}/config.git"


def process(h: Harness, remote: str, cache: Path, metrics: Metrics) -> Runtime:
    """One reconciler process on the status branch, started as ``make_runtime`` starts it:
    its states read back from the branch (what is owed: when it starts to lead)."""
    publisher = StatusPublisher(StatusBranch(ConfigRepo(remote, cache_dir=cache)))
    # retried for as long as the test runs: still owed when the process is killed
    box = Outbox(metrics, secrets, backoff=0.05, max_backoff=0.2, attempts=10_000, timeout=2.0)
    box.start()
    notifier = Notifier(box)
    runtime = Runtime(h.reconciler, publisher, metrics, notifier=notifier)
    recorded = publisher.recorded()
    notifier.seed(recorded.seen)
    h.reconciler.seed(recorded)
    return runtime


def kill(runtime: Runtime) -> None:
    """kill -9: no final status write, nothing more sent (the worker stops mid-retry). A
    request already on the wire is let end before the test goes on, or it could reach the
    receiver after the test cleared what it got."""
    assert runtime.notifier is not None
    outbox = runtime.notifier.outbox
    outbox._stop.set()
    outbox.finish()  # wakes a worker that waits for the queue
    if outbox._thread is not None:
        outbox._thread.join(10)
        assert not outbox._thread.is_alive()


def owed_on_branch(remote: str, cache: Path) -> list[str]:
    content = StatusPublisher(StatusBranch(ConfigRepo(remote, cache_dir=cache))).recorded_owed()
    if content is None:
        return []
    entries, _, problem = read_owed(content)
    assert problem == ""
    return [e.key for e in entries]


def hooks(receiver: Receiver) -> list[tuple[str, Any]]:
    return [
        (r.headers["idempotency-key"], json.loads(r.body)["phase"])
        for r in receiver.got
        if r.path == "/hook"
    ]


def test_a_notice_owed_at_a_kill_is_sent_by_the_next_leader_once(
    remote: str, tmp_path: Path
) -> None:
    with Receiver.running() as receiver:
        receiver.status = 503  # down: the notice is retried, still owed
        h = harness(receiver.url + "/hook", "p/a", "p/b")
        first = process(h, remote, tmp_path / "c1", Metrics())
        first.on_cycle(h.cycle())  # both dispatched: the status written, two notices owed
        wait_until(lambda: len(hooks(receiver)) >= 2, timeout=10, what="attempts")
        keys = sorted(owed_on_branch(remote, tmp_path / "read1"))
        assert len(keys) == 2 and all(k.endswith(":Dispatched") for k in keys)
        assert {key for key, _ in hooks(receiver)} <= set(keys)
        # a standby, following: it sends nothing
        second_h = Harness(h.repo, leading=False)
        second_h.clusters = h.clusters  # the same clusters, another process
        metrics = Metrics()
        second = process(second_h, remote, tmp_path / "c2", metrics)
        second.on_cycle(second_h.cycle())
        kill(first)
        receiver.status = 200
        receiver.got.clear()
        time.sleep(0.3)
        assert hooks(receiver) == []
        # it takes the Lease: what the killed leader owed is sent first
        second_h.reconciler._is_leader = lambda: True
        second.on_cycle(second_h.cycle())
        wait_until(lambda: len(hooks(receiver)) == 2, timeout=10, what="the owed notices")
        time.sleep(0.3)
        # sent again with the same keys, and not derived again (the branch has the phases)
        assert sorted(key for key, _ in hooks(receiver)) == keys
        assert metrics.notifications_sent.labels(NOTIFICATION)._value.get() == 2
        # delivered, but a cycle that changes no status makes no commit for it
        assert second.publisher is not None
        commits = second.publisher.commits
        second.on_cycle(second_h.cycle())
        assert second.publisher.commits == commits
        assert sorted(owed_on_branch(remote, tmp_path / "read2")) == keys
        # the next status commit leaves them out: a restart then sends nothing again
        second_h.move("p/a", "Running")
        second.on_cycle(second_h.cycle())
        assert second.publisher.commits == commits + 1
        assert owed_on_branch(remote, tmp_path / "read3") == []
        kill(second)

        third_h = Harness(h.repo)
        third_h.clusters = h.clusters
        third = process(third_h, remote, tmp_path / "c3", Metrics())
        third.on_cycle(third_h.cycle())
        time.sleep(0.5)
        assert len(hooks(receiver)) == 2
        assert third.close(5.0)


def test_what_is_owed_is_bounded_the_oldest_dropped_and_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("reconciler.runtime.notify.OWED_LIMIT", 2)
    h = harness("http://127.0.0.1:9/hook", "p/a", "p/b", "p/c")
    metrics = Metrics()
    notifier = Notifier(Outbox(metrics, secrets))  # not started: all stay queued
    assert notifier.owed_file() is None  # nothing owed: no file
    notifier.on_cycle(h.cycle())
    content = notifier.owed_file()
    assert content is not None
    entries, count, problem = read_owed(content)
    assert problem == "" and count == 1 and len(entries) == 2
    assert [e.operation for e in entries] == ["p/b", "p/c"]  # the oldest, p/a, dropped
    assert dropped(metrics, NOTIFICATION, "owed_overflow") == 1
    # written and read back, the same
    assert encode_owed(entries, count) == content
    # a restarted process sends them first, and once: derived again (no states seeded
    # here), only the one no longer owed is queued
    monkeypatch.setattr("reconciler.runtime.notify.OWED_LIMIT", 3)
    again = Notifier(Outbox(Metrics(), secrets))
    again.restore(content)
    again.on_cycle(h.cycle())
    keys = [e.key for e in entries]
    assert queued(again.outbox) == [*keys, keys[0].replace("p/b", "p/a").replace("p-b", "p-a")]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"owed: [1]\n", "status/_notify.yaml:1:1: not a notification file"),
        (b"dropped: many\n", "status/_notify.yaml:1:1: not a notification file"),
        (b"owed: [\n", "status/_notify.yaml:"),
    ],
)
def test_a_broken_owed_file_is_said_at_its_place_and_owes_nothing(
    content: bytes, problem: str, caplog: pytest.LogCaptureFixture
) -> None:
    entries, _, said = read_owed(content)
    assert entries == () and said.startswith(problem)
    notifier = Notifier(Outbox(Metrics(), secrets))
    with caplog.at_level(logging.WARNING, "reconciler.notify"):
        notifier.restore(content)
    assert notifier.owed_file() is None
    assert f"{said}: nothing is sent again" in caplog.text
