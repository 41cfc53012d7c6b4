"""Budgets cannot be side-stepped (hypothesis): over random histories of dispatches, runs
that end, ``generation`` bumps, renames and removals of operations' files, and corrupted
ledger entries, cycle by cycle through ``decide`` and the status branch's ledger files:

- what a budget counts as committed never falls below the true worst case of what is
  active: every active run's cost so far in the window plus its cost to the deadline of the
  timeout it was dispatched with;
- what it counts as spent never falls below what the true ledger spent (a corrupted entry
  counts at its worst case), or the budget waits ``LedgerUnreadable``;
- no dispatch ever takes a budget past its limit (true spent + true worst committed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from hypothesis import event, given, settings
from hypothesis import strategies as st
from support.builders import NOW, World

from reconciler.core.decision.cycle import ClusterListing, Memory, decide, memory_from_status
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.plan import PendingReason
from reconciler.core.plan.ledger import Ledger, LedgerEntry, ledger_documents
from reconciler.core.reporting.status import dump_yaml, read_status
from reconciler.core.types import BudgetPeriod, BudgetSpec, Phase

GPU = "nvidia.com/gpu"
HOUR = Decimal(3600)


@dataclass
class Run:
    op: str
    generation: int
    gpus: int
    start: datetime
    timeout: int  # as dispatched

    @property
    def deadline(self) -> datetime:
        return self.start + timedelta(seconds=self.timeout)

    def state(self, ended: datetime | None = None) -> WorkloadState:
        when = self.start.isoformat().replace("+00:00", "Z")
        return WorkloadState(
            operation=self.op,
            generation=self.generation,
            cluster="local",
            namespace="p",
            name=f"{self.op.split('/')[1]}-g{self.generation}",
            uid=f"{self.op}-{self.generation}",
            phase=Phase.RUNNING if ended is None else Phase.SUCCEEDED,
            queue="q",
            dispatched_at=when,
            started_at=when,
            finished_at=None if ended is None else ended.isoformat().replace("+00:00", "Z"),
            requests={GPU: Decimal(self.gpus)},
            pods=1,
            timeout=self.timeout,
        )


@dataclass
class Op:
    name: str
    gpus: int
    timeout: int
    generation: int = 1


@dataclass
class History:
    limit: int
    ops: list[Op]
    steps: list[tuple[str, int, int]]  # (action, which, minutes)
    files: dict[str, Op] = field(default_factory=dict)


ACTIONS = ("wait", "end", "bump", "rename", "remove", "retime", "corrupt-worst", "corrupt-unread")


@st.composite
def histories(draw: st.DrawFn) -> History:
    ops = [
        Op(f"o{i}", draw(st.integers(1, 2)), draw(st.sampled_from([1800, 3600, 7200])))
        for i in range(draw(st.integers(1, 4)))
    ]
    steps = [
        (draw(st.sampled_from(ACTIONS)), draw(st.integers(0, 9)), draw(st.integers(5, 40)))
        for _ in range(draw(st.integers(1, 14)))
    ]
    return History(draw(st.integers(2, 8)), ops, steps)


def hours(a: datetime, b: datetime) -> Decimal:
    return Decimal(max(0, round((b - a).total_seconds() * 1000))) / 1000 / HOUR


def worst(runs: list[Run], now: datetime, window_start: datetime) -> Decimal:
    return sum(
        (r.gpus * (hours(max(r.start, window_start), now) + hours(now, r.deadline)) for r in runs),
        Decimal(0),
    )


@settings(max_examples=150, deadline=None)
@given(histories())
def test_budgets_cannot_be_side_stepped(history: History) -> None:
    limit = Decimal(history.limit)
    files = {op.name: op for op in history.ops}  # the repo: file name -> operation
    active: list[Run] = []
    ledger: list[LedgerEntry] = []
    ended: list[tuple[Run, datetime]] = []
    corrupt: dict[int, str] = {}  # ledger index -> how
    now = NOW
    day = NOW.replace(hour=0)
    renames = 0
    for action, which, minutes in [("wait", 0, 0), *history.steps]:
        # what happens to the repo, the runs and the ledger
        names = sorted(files)
        if action == "wait":
            now += timedelta(minutes=minutes)
        elif action == "end" and active:
            run = active.pop(which % len(active))
            ledger.append(_entry(run, min(now, run.deadline)))
            ended.append((run, min(now, run.deadline)))
        elif action == "bump" and names:
            files[names[which % len(names)]].generation += 1
        elif action == "rename" and names:
            old = names[which % len(names)]
            renames += 1
            op = files.pop(old)
            files[f"{old}r{renames}"] = Op(f"{old}r{renames}", op.gpus, op.timeout)
        elif action == "remove" and names:
            del files[names[which % len(names)]]
        elif action == "retime" and names:  # the file now says a shorter timeout
            files[names[which % len(names)]].timeout = 600
        elif action.startswith("corrupt") and ledger:
            corrupt[which % len(ledger)] = action
        # runs past their deadline end there (activeDeadlineSeconds)
        for run in [r for r in active if r.deadline <= now]:
            active.remove(run)
            ledger.append(_entry(run, run.deadline))
            ended.append((run, run.deadline))
        # one cycle, from the status branch's ledger as a reader would see it
        world = World().queue("q", budget=BudgetSpec(limit, BudgetPeriod.DAY, f"{GPU}-hours"))
        for name, op in sorted(files.items()):
            world.op(f"p/{name}", queue="q", gpu=op.gpus).timeout(op.timeout)
            world.builders[-1]._fields["generation"] = op.generation
        memory = Memory(ledger=_read_back(ledger, corrupt))
        # the finished Jobs are still listed (their op is not dispatched again)
        states = [r.state(end) for r, end in ended] + [r.state() for r in active]
        listing = {"local": ClusterListing(tuple(states))}
        decision = decide(world.repo(), listing, memory, now)
        summary = next(q for q in decision.plan.queues if q.name == "q").budget
        assert summary is not None
        true_spent = sum((_usage(e, day) for e in ledger), Decimal(0))
        true_worst = worst(active, now, day)
        # committed never below the true worst case of what is active
        assert summary.committed >= true_worst - Decimal("0.001"), (summary, true_worst)
        unreadable = {
            p.operation
            for p in decision.plan.pending
            if p.reason is PendingReason.LEDGER_UNREADABLE
        }
        if unreadable:
            event("a budget waited on its unreadable ledger")
            assert not decision.plan.dispatch
        else:
            assert summary.spent >= true_spent - Decimal("0.001"), (summary, true_spent)
        # each dispatch: a new run of the op's current generation, dispatched with its
        # timeout as the file says now
        for d in decision.plan.dispatch:
            op = files[d.operation.split("/")[1]]
            active.append(Run(d.operation, op.generation, op.gpus, now, op.timeout))
        if decision.plan.dispatch:
            event("dispatched")
            assert true_spent + worst(active, now, day) <= limit + Decimal("0.001")
        if action in ("bump", "rename", "remove", "retime") and active:
            event(f"{action} while runs were active")


def _entry(run: Run, end: datetime) -> LedgerEntry:
    return LedgerEntry(
        operation=run.op,
        generation=run.generation,
        workload=f"{run.op.split('/')[1]}-g{run.generation}",
        queue="q",
        cluster="local",
        phase="Succeeded",
        requests={GPU: Decimal(run.gpus)},
        start=run.start,
        end=end,
        cost=Decimal(0),
    )


def _usage(entry: LedgerEntry, day: datetime) -> Decimal:
    return entry.requests[GPU] * hours(max(entry.start, day), entry.end)


def _read_back(ledger: list[LedgerEntry], corrupt: dict[int, str]) -> Ledger:
    """The ledger as the status branch holds it, with the corrupted entries changed in
    their file, read back as any reader does."""
    docs = ledger_documents(Ledger.of(ledger))
    by_key = {(e.operation, e.generation, e.workload): i for i, e in enumerate(ledger)}
    for doc in docs.values():
        for item in doc["entries"]:
            how = corrupt.get(by_key[(item["operation"], item["generation"], item["workload"])])
            if how == "corrupt-worst":
                item["requests"] = {GPU: "-" + item["requests"][GPU]}
            elif how == "corrupt-unread":
                item["start"] = "never"
    files = {path: dump_yaml(doc) for path, doc in docs.items()}
    return memory_from_status(read_status(files)).ledger
