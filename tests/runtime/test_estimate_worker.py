"""The start estimates are computed on a worker thread, once per decision, and readers get
the latest finished ones: a slow estimate never holds up a page view, the API or a cycle.
No timing: the estimate blocks on an event the test sets, and the readers are called while
it is blocked (a reader that waited on it would never return)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

from reconciler.core.compile import compile_repo
from reconciler.core.decision.cycle import Decision, Memory, decide, listing_from_memory
from reconciler.core.plan.estimate import (
    ESTIMATES_PENDING,
    NO_ESTIMATES,
    PENDING_TEXT,
    Estimates,
    estimate_decision,
)
from reconciler.core.types import CompiledRepo, RepoSnapshot
from reconciler.runtime.cycle import CycleResult
from reconciler.runtime.estimates import EstimateWorker
from reconciler.runtime.loop import Wakeup
from reconciler.runtime.web import WebApp

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LONG = 60.0  # only if the code under test deadlocks: no assertion depends on it


class Blocked:
    """An estimate that waits until ``release`` is set, recording what it was asked."""

    def __init__(self, compute: Callable[[CompiledRepo, Decision], Estimates]) -> None:
        self.compute = compute
        self.release = threading.Event()
        self.started = threading.Event()
        self.asked: list[Decision] = []

    def __call__(self, compiled: CompiledRepo, decision: Decision) -> Estimates:
        self.asked.append(decision)
        self.started.set()
        assert self.release.wait(LONG), "the test never released the estimate"
        return self.compute(compiled, decision)


class Threads:
    """Starts the worker on real threads, and keeps them to join."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def __call__(self, work: Callable[[], None]) -> None:
        t = threading.Thread(target=work, daemon=True)
        self.threads.append(t)
        t.start()

    def join(self) -> None:
        for t in self.threads:
            t.join(LONG)
            assert not t.is_alive()


def _stamp(_: CompiledRepo, decision: Decision) -> Estimates:
    return Estimates(cast(Any, decision).at)


class _D:
    def __init__(self, at: datetime) -> None:
        self.at = at


def test_readers_never_wait_and_only_the_newest_waiting_decision_is_estimated() -> None:
    slow, threads = Blocked(_stamp), Threads()
    worker = EstimateWorker(slow, spawn=threads)
    repo = cast(CompiledRepo, object())
    d1, d2, d3 = (cast(Decision, _D(datetime(2026, 1, 1, h, tzinfo=UTC))) for h in (1, 2, 3))
    assert worker.latest(repo, d1) is ESTIMATES_PENDING
    assert slow.started.wait(LONG)
    # the estimate of d1 is running (blocked): every reader returns at once
    assert worker.latest(repo, d1) is ESTIMATES_PENDING
    assert worker.latest(repo, d2) is ESTIMATES_PENDING  # d2 waits for the worker
    assert worker.latest(repo, d3) is ESTIMATES_PENDING  # and is superseded by d3
    assert len(threads.threads) == 1, "one worker at a time"
    slow.release.set()
    threads.join()
    assert slow.asked == [d1, d3]
    assert worker.computed == 2 and worker.finished(d3)
    assert worker.latest(repo, d3).at == datetime(2026, 1, 1, 3, tzinfo=UTC)
    assert worker.latest(repo, d3).at == datetime(2026, 1, 1, 3, tzinfo=UTC)
    assert worker.computed == 2 and len(threads.threads) == 1, "no second estimate of d3"
    assert worker.latest(None, None) is NO_ESTIMATES


def test_an_estimate_that_fails_shows_none_and_the_worker_goes_on() -> None:
    calls: list[Decision] = []

    def broken(_: CompiledRepo, decision: Decision) -> Estimates:
        calls.append(decision)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return _stamp(_, decision)

    worker = EstimateWorker(broken, spawn=lambda work: work())
    repo = cast(CompiledRepo, object())
    d1, d2 = (cast(Decision, _D(datetime(2026, 1, 1, h, tzinfo=UTC))) for h in (1, 2))
    assert worker.latest(repo, d1) is NO_ESTIMATES
    assert worker.latest(repo, d2).at == datetime(2026, 1, 1, 2, tzinfo=UTC)


def _result(template: RepoSnapshot, at: datetime) -> CycleResult:
    repo = compile_repo(replace(template, version="c0ffee" * 6 + "abcd"))
    decision = decide(repo, listing_from_memory(repo, Memory()), Memory(), at)
    return CycleResult(
        at=at,
        version=repo.version,
        compiled=repo,
        plan=decision.plan,
        states=decision.states,
        decision=decision,
    )


def test_pages_say_estimates_pending_while_a_slow_estimate_runs_and_cycles_go_on(
    template: RepoSnapshot,
) -> None:
    """Issue 31: while the first decision's estimate is still running, the API and the
    pages answer ("estimates pending") and the next cycles' results are served as they
    come; the estimate is computed once per decision, whoever reads it."""
    slow, threads = Blocked(estimate_decision), Threads()
    first = _result(template, NOW)
    latest = [first]
    app = WebApp(lambda: latest[-1], estimator=EstimateWorker(slow, spawn=threads))
    status, body, _ = app("/api/v1/queues") or (0, b"", "")
    assert status == 200
    assert slow.started.wait(LONG)
    heads = [q["headEstimate"] for q in json.loads(body)["queues"] if q["headEstimate"]]
    assert heads and all(h["text"] == PENDING_TEXT and h["pending"] for h in heads)
    status, html, _ = app("/queues") or (0, b"", "")
    assert status == 200 and PENDING_TEXT in html.decode()
    # the next cycle runs and is shown while the first decision is still being estimated
    second = _result(template, NOW.replace(minute=1))
    latest.append(second)
    for path in ("/api/v1/queues", "/queues", "/queues/team-a", "/api/v1/queues/team-a"):
        status, body, _ = app(path) or (0, b"", "")
        assert status == 200 and PENDING_TEXT in body.decode(), path
    assert not slow.release.is_set() and slow.asked == [first.decision]
    slow.release.set()
    threads.join()
    assert second.decision is not None and second.compiled is not None
    assert slow.asked == [first.decision, second.decision]
    expected = estimate_decision(second.compiled, second.decision)
    head = next(p for p in second.decision.plan.pending if p.queue == "team-a")
    for _ in range(3):  # every reader shares the one estimate of the decision
        _, body, _ = app(f"/api/v1/operations/{head.operation}") or (0, b"", "")
        assert json.loads(body)["estimate"] == expected.json_of(head.operation)
    assert len(slow.asked) == 2 and len(threads.threads) == 1


def test_the_worker_holds_its_estimate_while_a_cycle_runs(template: RepoSnapshot) -> None:
    """The worker shares the GIL with the cycle thread: it waits for the cycle's end before
    it starts, and its simulation waits at each of its steps (``pause``) while one runs."""
    wake, threads = Wakeup(), Threads()
    calls: list[bool] = []  # per call of ``idle``: whether a cycle was running

    def idle() -> None:
        calls.append(wake.running)
        wake.wait_idle()

    worker = EstimateWorker(spawn=threads, idle=idle)
    result = _result(template, NOW)
    assert result.compiled is not None and result.decision is not None
    wake.begin_cycle()
    assert worker.latest(result.compiled, result.decision) is ESTIMATES_PENDING
    threads.threads[0].join(0.2)  # not a timing assertion: it must still be waiting
    assert threads.threads[0].is_alive() and worker.computed == 0 and calls == [True]
    wake.end_cycle()
    threads.join()
    assert worker.finished(result.decision)
    assert worker.latest(result.compiled, result.decision) == estimate_decision(
        result.compiled, result.decision
    )
    assert len(calls) > 3, "the simulation paused between its steps too"
