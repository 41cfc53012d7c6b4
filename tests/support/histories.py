"""A history of runs made by the real cycle over the fake cluster: operations arrive (each
a copy of one of the repo's, committed at its arrival), the reconciler's cycles dispatch
them, and each run ends after its own drawn duration (``Succeeded``, or ``Failed``). What
the what-if replay is measured against (tests/runtime/test_replay_accuracy.py,
bench/replay_accuracy.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from reconciler.core.plan.ledger import Ledger
from reconciler.core.types import CompiledOperation, CompiledRepo
from support.clocks import SteppedClock
from support.fake_kube import FakeCycles
from support.git_commands import git


@dataclass(frozen=True)
class Arrival:
    operation: CompiledOperation  # a copy of a repo's operation, committed at its arrival
    seconds: float  # how long its run takes
    failed: bool


@dataclass(frozen=True)
class Made:
    """What the history made: the last config (every operation that arrived), each run's
    arrival and the start the cycle gave it, and the reconciler's ledger."""

    repo: CompiledRepo
    arrivals: dict[str, datetime]
    starts: dict[str, datetime]
    ledger: Ledger
    status: dict[str, bytes]  # the status files the last cycle's writer commits


def arrivals(
    repo: CompiledRepo,
    templates: list[str],
    since: datetime,
    hours: float,
    per_hour: float,
    *,
    seed: int = 1,
    median: float = 1800.0,
) -> list[Arrival]:
    """A Poisson stream of copies of ``templates`` (ids of the repo's operations) from
    ``since``, each run lasting a lognormal time around ``median`` seconds; 5 % fail."""
    rng = random.Random(seed)
    by_id = {op.id: op for op in repo.operations}
    out = []
    at = since
    k = 0
    while True:
        at += timedelta(seconds=rng.expovariate(per_hour / 3600))
        if at >= since + timedelta(hours=hours):
            return out
        op = by_id[rng.choice(templates)]
        copy = replace(op, name=f"{op.name}-h{k}", submitted_at=at, dependencies=())
        seconds = rng.lognormvariate(0, 0.6) * median
        if op.timeout is not None:  # its Job's deadline ends it
            seconds = min(seconds, float(op.timeout))
        out.append(Arrival(copy, seconds, rng.random() < 0.05))
        k += 1


def make_history(
    repo: CompiledRepo, stream: list[Arrival], until: datetime, step: float = 60.0
) -> Made:
    """Cycles every ``step`` seconds from the first arrival's minute to ``until`` over
    ``repo`` with the operations arrived so far; a run ends ``seconds`` after the cycle that
    started it (seen by the first cycle at or after that)."""
    first = stream[0].operation.submitted_at
    assert first is not None
    start = first.replace(second=0, microsecond=0)
    repo = replace(repo, schedules=())  # only the stream's runs
    cycles = FakeCycles(replace(repo, operations=()), clock=SteppedClock(start))
    arrived: list[CompiledOperation] = []
    arrival_of: dict[str, datetime] = {}
    pending = list(stream)
    runs = {a.operation.id: a for a in stream}
    starts: dict[str, datetime] = {}
    ends: dict[str, tuple[datetime, str, str]] = {}  # op -> its end, namespace, job
    ledger = Ledger()
    status: dict[str, bytes] = {}
    while cycles.clock.at < until:
        now = cycles.clock.at
        while pending and (pending[0].operation.submitted_at or now) <= now:
            op = pending.pop(0).operation
            arrived.append(op)
            arrival_of[op.id] = op.submitted_at or now
        cycles.repo = replace(repo, version=f"h{len(arrived)}", operations=tuple(arrived))
        for oid, (end, namespace, job) in sorted(ends.items()):
            if end <= now:
                phase = "Failed" if runs[oid].failed else "Succeeded"
                cycles.cluster.end_job(namespace, job, phase, starts[oid], end)
                del ends[oid]
        result = cycles.cycle()
        # its phase annotations are written off the cycle thread: the next cycle's list of
        # the fake cluster must not meet one half-written
        assert cycles.reconciler.wait_writes(10.0)
        for oid in result.dispatched:
            state = result.states.get(oid)
            if state is None or oid in starts:
                continue
            starts[oid] = now
            ends[oid] = (now + timedelta(seconds=runs[oid].seconds), state.namespace, state.name)
        if result.decision is not None:
            ledger = result.decision.memory.ledger
            status = cycles.status_of(result)
        cycles.clock.advance(step)
    return Made(cycles.repo, arrival_of, starts, ledger, status)


def commit_arrivals(work: Path, repo: CompiledRepo, stream: list[Arrival]) -> None:
    """Each arrival's operation file committed in ``work`` at its arrival (its first
    commit, as the replay reads it): a copy of its original's file under its own name."""
    originals = {op.id: op for op in repo.operations}
    for a in stream:
        op = a.operation
        original = originals[f"{op.project}/{op.name.rsplit('-h', 1)[0]}"]
        text = (work / original.path).read_text()
        copy = work / Path(original.path).with_name(f"{op.name}.yaml")
        copy.write_text(text.replace(f"name: {original.name}\n", f"name: {op.name}\n", 1))
        when = op.submitted_at
        assert when is not None
        git(work, "add", str(copy.relative_to(work)))
        git(work, "commit", "-qm", f"add {op.id}", when=int(when.timestamp()))
