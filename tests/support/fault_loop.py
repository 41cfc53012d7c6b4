"""The kill -9 loop of R1, shared by tests/cluster/test_faults_kill.py (20 runs in CI) and
bench/fault_loop.py (50 or N runs, tallies printed).

Each run commits one new operation, starts ``reconciler run`` as a new process (forked by
``zygote.py``, which has its imports done) with ``RECONCILER_FAULTS`` set to a seeded
random point and hit count, and waits for it to die (or SIGKILLs it itself after a random
delay: a kill anywhere, e.g. mid status push). A
sampler lists the Jobs all along. After each run the invariants are checked against the
cluster and the status branch:

1. no duplicate workload: at most one Job per operation and generation;
2. no lost operation: every operation has its Job, or is Queued in status;
3. quota and concurrency never exceeded, in any sample (a list is one consistent snapshot);
4. the ledger (``status/ledger/``) has each finished run exactly once: no entry twice, no
   finished operation in status without its entry (no cost counted twice, none lost), each
   costed from its Job's own start and completion times;
5. (at the end, by :meth:`FaultLoop.converge`) a clean run takes every operation to
   Succeeded, in the cluster and in status, each with its one ledger entry;
6. with ``schedule``, an operation that runs every minute (``SCHEDULED``) is in the loop
   too: no run of it twice (a Job of an operation and generation is never made again once
   seen, whatever kills came between), each of its runs counted in its queue's limits and
   in the ledger once, and each Succeeded at the end.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import git as gitpython

from reconciler.adapters.kube import Kube
from reconciler.adapters.repo import snapshot_git
from reconciler.core.compile import compile_repo
from reconciler.core.decision.render import ANNOTATION_GENERATION, ANNOTATION_OPERATION
from reconciler.core.decision.schedule import schedule_groups, tick_time
from reconciler.core.observation.observe import job_finished_at
from reconciler.core.plan.ledger import parse_moment
from reconciler.core.reporting.status import StatusView, read_status
from reconciler.core.types import CompiledOperation, CompiledRepo
from support.reconciler_env import commit_all, git, run_args
from support.zygote import Zygote

STATUS_BRANCH = "reconciler/status"
TERMINAL = ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget")
# (point, highest hit count): cycle points are hit once per cycle, after-create once per Job
POINTS: tuple[tuple[str, int], ...] = (
    ("after-load", 3),
    ("after-observe", 3),
    ("after-plan", 3),
    ("after-create", 4),
    ("before-status", 3),
    ("after-status", 3),
    ("timer", 0),  # no seam: the loop kills it a random 0-1.5 s after its first fetch
)
# every minute, on the batch queue, from a startAt in the past: the tick of the minute the
# loop starts in is due at once, another at each minute's end
SCHEDULED = (
    "kind: Operation\nname: fault-tick\nqueue: batch\npresets: []\n"
    "schedule:\n  kind: interval\n  frequency: 1m\n  startAt: 2026-01-01T00:00:00Z\n"
    "  concurrencyPolicy: Allow\n"
    "run:\n  container: {command: [sh, -c, 'true']}\n"
)
NEW_OPS = (  # (project, queue, presets) of the operation each run adds, in turn
    ("vision", "team-a", "[a100]"),
    ("language", "team-b", "[a100]"),
    ("vision", "batch", "[]"),
)


def finished(job: Mapping[str, Any]) -> bool:
    return any(
        c.get("status") == "True" and c.get("type") in TERMINAL
        for c in (job.get("status") or {}).get("conditions") or []
    )


def job_key(job: Mapping[str, Any]) -> tuple[str, str]:
    annotations = job["metadata"]["annotations"]
    return annotations[ANNOTATION_OPERATION], annotations.get(ANNOTATION_GENERATION, "1")


@dataclass
class Outcome:
    index: int
    fault: str  # "after-create=3", or "timer=1.7s"
    returncode: int | None
    seconds: float
    jobs: int
    violations: list[str]


class LimitSampler(threading.Thread):
    """Lists the Jobs every ``period`` and records every queue over its limits."""

    def __init__(self, kube: Kube, limits: Callable[[], CompiledRepo], period: float = 0.1):
        super().__init__(daemon=True, name="limit-sampler")
        self.kube, self.limits, self.period = kube, limits, period
        self.samples = 0
        self.errors = 0
        self.violations: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                jobs = self.kube.list_managed("Job").items
            except Exception:  # a sample lost (API busy), not a verdict
                self.errors += 1
                self.halt.wait(self.period)
                continue
            self.violations.extend(over_limits(self.limits(), jobs))
            self.samples += 1
            self.halt.wait(self.period)


def scheduled_template(repo: CompiledRepo, op_id: str) -> CompiledOperation | None:
    """The template a scheduled run ``<op>-<YYYYMMDDHHMM>[-<child>]`` was made from."""
    for scheduled, templates in schedule_groups(repo).items():
        if tick_time(scheduled, op_id) is not None:
            template_id = scheduled + op_id[len(scheduled) + len("-YYYYMMDDHHMM") :]
            return next((t for t in templates if t.id == template_id), None)
    return None


def over_limits(repo: CompiledRepo, jobs: list[dict[str, Any]]) -> list[str]:
    """Queues whose active Jobs exceed their concurrency or quota (plus what a cohort
    member may borrow), and cohorts whose members together exceed their quotas."""
    ops = {op.id: op for op in repo.operations}
    count: Counter[str] = Counter()
    used: dict[str, dict[str, Decimal]] = {}
    for job in jobs:
        if finished(job):
            continue
        op = ops.get(job_key(job)[0]) or scheduled_template(repo, job_key(job)[0])
        if op is None:
            continue
        count[op.queue] += 1
        for resource, amount in op.requests.items():
            per = used.setdefault(op.queue, {})
            per[resource] = per.get(resource, Decimal(0)) + Decimal(amount)
    out = []
    for name, queue in repo.queues.items():
        if queue.concurrency is not None and count[name] > queue.concurrency:
            out.append(f"queue {name}: {count[name]} active > concurrency {queue.concurrency}")
        for resource, limit in queue.quota.items():
            if queue.cohort is not None:
                limit += queue.borrowing_limit.get(resource, Decimal(0))
            if used.get(name, {}).get(resource, Decimal(0)) > limit:
                out.append(f"queue {name}: {resource} {used[name][resource]} > quota {limit}")
    cohorts: dict[str, list[str]] = {}
    for name, queue in repo.queues.items():
        if queue.cohort is not None:
            cohorts.setdefault(queue.cohort, []).append(name)
    for cohort, members in cohorts.items():
        totals: dict[str, Decimal] = {}
        for name in members:
            for resource, limit in repo.queues[name].quota.items():
                totals[resource] = totals.get(resource, Decimal(0)) + limit
        for resource, total in totals.items():
            held = sum((used.get(n, {}).get(resource, Decimal(0)) for n in members), Decimal(0))
            if held > total:
                out.append(f"cohort {cohort}: {resource} {held} > its queues' quotas {total}")
    return out


@dataclass
class FaultLoop:
    repo: Path
    kubeconfig: Path
    work: Path
    kube: Kube
    seed: int = 8
    deadline: float = 10.0  # a run whose point is never reached is killed after this
    schedule: bool = False  # with the operation that runs every minute (invariant 6)
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.schedule:
            (self.repo / "projects/vision/operations/fault-tick.yaml").write_text(SCHEDULED)
            commit_all(self.repo, "an operation that runs every minute")
        self.rng = random.Random(self.seed)
        self._jobs_seen: dict[tuple[str, str], str] = {}  # (operation, generation) -> uid
        self._compiled = compile_repo(snapshot_git(self.repo))
        self._lock = threading.Lock()
        self.sampler = LimitSampler(self.kube, self.compiled)
        self.zygote = Zygote()  # forks each `reconciler run`, its imports already done
        self._recorded: set[str] = set()  # operations status has ever described

    def compiled(self) -> CompiledRepo:
        with self._lock:
            return self._compiled

    def _argv(self) -> list[str]:
        # the cache is kept across runs: a crash must not break it
        return run_args(self.repo, self.kubeconfig, interval="0.5s", cache_dir=self.work / "cache")

    def add_operation(self, index: int) -> None:
        """One more operation per run, in each queue in turn: there is always work to do."""
        project, queue, presets = NEW_OPS[index % len(NEW_OPS)]
        name = f"fault-{index}"
        path = self.repo / "projects" / project / "operations" / f"{name}.yaml"
        path.write_text(
            f"kind: Operation\nname: {name}\nqueue: {queue}\n"
            f"presets: {presets}\nrun:\n  container: {{command: [sh, -c, 'true']}}\n"
        )
        commit_all(self.repo, f"run {index}: one more operation in {queue}")
        compiled = compile_repo(snapshot_git(self.repo))
        assert compiled.valid, compiled.errors
        with self._lock:
            self._compiled = compiled

    def run_one(self, index: int) -> Outcome:
        self.add_operation(index)
        point, highest = self.rng.choice(POINTS)
        env = {k: v for k, v in os.environ.items() if k != "RECONCILER_FAULTS"}
        delay = round(self.rng.uniform(0.0, 1.5), 2)
        if point == "timer":
            fault = f"timer={delay}s"
        else:
            fault = f"{point}={self.rng.randint(1, highest)}"
            env["RECONCILER_FAULTS"] = fault
        started = time.monotonic()
        log = str(self.work / f"run-{index:03d}.log")
        self.zygote.start(self._argv(), env, log)
        if point == "timer":  # a random moment after its first fetch
            wall = time.time()
            while self._fetched_at() < wall and time.monotonic() - started < self.deadline:
                if (code := self.zygote.wait(0.05)) is not None:
                    break
            else:
                code = self.zygote.wait(delay)
        else:
            code = self.zygote.wait(self.deadline)
        if code is None:  # still running: kill -9 wherever it is
            self.zygote.signal(signal.SIGKILL)
            self.zygote.wait(10)
        seconds = time.monotonic() - started
        violations = []
        if code is not None and code != -signal.SIGKILL:
            violations.append(f"exited {code} instead of being killed; see run-{index:03d}.log")
        violations += self.check()
        outcome = Outcome(index, fault, code, seconds, len(self._jobs()), violations)
        self.outcomes.append(outcome)
        return outcome

    def _fetched_at(self) -> float:
        """When the config cache was last fetched (each cycle starts with a fetch)."""
        heads = list((self.work / "cache").glob("*.git/FETCH_HEAD"))
        return max((h.stat().st_mtime for h in heads), default=0.0)

    def _jobs(self) -> list[dict[str, Any]]:
        return list(self.kube.list_managed("Job").items)

    def status_view(self) -> StatusView | None:
        """The status branch read back; None before the first status write."""
        try:
            tree = gitpython.Repo(self.repo).commit(STATUS_BRANCH).tree
        except Exception:  # no branch yet
            return None
        # every blob of the branch (snapshot_git reads only what the config loader needs)
        files = {
            str(item.path): item.data_stream.read()
            for item in tree.traverse()
            if isinstance(item, gitpython.Blob)
        }
        return read_status(files)

    def status(self) -> dict[str, str] | None:
        """Phase per operation on the status branch; None before the first status write."""
        view = self.status_view()
        if view is None:
            return None
        return {op: rec.phase for op, rec in view.operations.items()}

    def ledger_violations(self, jobs: list[dict[str, Any]]) -> list[str]:
        """Invariant 4: each finished run in the ledger exactly once, costed from its Job."""
        view = self.status_view()
        if view is None:
            return []
        out = [f"unreadable status file: {p}" for p in view.problems]
        keys = Counter(e.key for e in view.ledger)
        out += [f"ledger: {key} entered {n} times" for key, n in keys.items() if n > 1]
        entered = {(e.operation, e.generation) for e in view.ledger}
        for op, rec in view.operations.items():
            if rec.children or rec.phase not in ("Succeeded", "Failed", "Stopped"):
                continue
            if (op, rec.generation or 1) not in entered:
                out.append(f"ledger: {op} is {rec.phase} in status but has no ledger entry")
        by_job = {(job_key(j)[0], int(job_key(j)[1])): j for j in jobs}
        for entry in view.ledger:
            job = by_job.get((entry.operation, entry.generation))
            status = (job or {}).get("status") or {}
            ended = job_finished_at(job or {})
            if not status.get("startTime") or not ended:
                continue  # the ledger's end: when its success or failure was established
            times = (parse_moment(status["startTime"]), parse_moment(ended))
            if (entry.start, entry.end) != times:
                out.append(
                    f"ledger: {entry.operation} ran {times[0]}..{times[1]} by its Job, "
                    f"entered {entry.start}..{entry.end}"
                )
        return out

    def check(self) -> list[str]:
        """Invariants 1 and 2 now, and 3 over every sample so far."""
        jobs = self._jobs()
        out = [
            f"duplicate workload: {n} Jobs for {op} generation {gen}"
            for (op, gen), n in Counter(job_key(j) for j in jobs).items()
            if n > 1
        ]
        for job in jobs:  # a run made again after its Job was seen (a tick twice)
            uid = job["metadata"]["uid"]
            first = self._jobs_seen.setdefault(job_key(job), uid)
            if first != uid:
                out.append(f"ran twice: {job_key(job)[0]} generation {job_key(job)[1]}")
        with_job = {job_key(j)[0] for j in jobs}
        status = self.status() or {}
        for op in self.compiled().operations:
            phase = status.get(op.id)
            if op.id in with_job or phase == "Queued":
                continue
            # never described yet: added by a run killed before its first status write
            if phase is not None or op.id in self._recorded:
                out.append(f"lost operation: {op.id} has no Job and is {phase} in status")
        self._recorded |= set(status)
        out += self.ledger_violations(jobs)
        out += self.sampler.violations
        self.sampler.violations.clear()
        return out

    def converge(self, timeout: float = 150.0) -> tuple[float, list[str]]:
        """A clean ``reconciler run`` until every operation Succeeded in the cluster and in
        status; the seconds it took and what still differs when it timed out."""
        started = time.monotonic()
        env = {k: v for k, v in os.environ.items() if k != "RECONCILER_FAULTS"}
        self.zygote.start(self._argv(), env, str(self.work / "converge.log"))
        wanted = {op.id for op in self.compiled().operations}
        left: list[str] = ["nothing checked yet"]
        while time.monotonic() - started < timeout:
            left = self._unconverged(wanted)
            if not left:
                break
            if (code := self.zygote.wait(0.5)) is not None:
                left.append(f"reconciler exited {code}; see converge.log")
                break
        self.zygote.signal(signal.SIGTERM)
        if self.zygote.wait(30) is None:
            self.zygote.signal(signal.SIGKILL)
            self.zygote.wait(10)
        return time.monotonic() - started, left + self.check()

    def _unconverged(self, wanted: set[str]) -> list[str]:
        jobs = self._jobs()
        done = {job_key(j)[0] for j in jobs if finished(j)}
        status = self.status() or {}
        left = [f"{op}: Job not finished" for op in sorted(wanted - done)]
        ticks = {o for o, _ in map(job_key, jobs) if self.scheduled_run(o)}
        left += [f"{op}: scheduled run not finished" for op in sorted(ticks - done)]
        left += [
            f"{op}: {status.get(op)} in status"
            for op in sorted(wanted | (ticks & done))
            if status.get(op) != "Succeeded"
        ]
        view = self.status_view()
        entered = Counter(e.operation for e in view.ledger) if view is not None else Counter()
        left += [
            f"{op}: {entered[op]} ledger entries"
            for op in sorted(wanted | (ticks & done))
            if entered[op] != 1
        ]
        return left

    def scheduled_run(self, op_id: str) -> bool:
        """A run a schedule made (not an operation of the repo's own)."""
        return scheduled_template(self.compiled(), op_id) is not None

    def close(self) -> None:
        """Stop the sampler and the zygote (and a child still running)."""
        self.sampler.halt.set()
        if self.sampler.is_alive():
            self.sampler.join()
        self.zygote.close()

    def tallies(self) -> dict[str, Any]:
        by_point: Counter[str] = Counter(o.fault.split("=")[0] for o in self.outcomes)
        return {
            "runs": len(self.outcomes),
            "killed_by_seam": sum(o.returncode == -signal.SIGKILL for o in self.outcomes),
            "killed_by_timer": sum(o.returncode is None for o in self.outcomes),
            "by_point": dict(sorted(by_point.items())),
            "violations": sum(len(o.violations) for o in self.outcomes),
            "samples": self.sampler.samples,
            "jobs": len(self._jobs()),
            "scheduled_runs": sum(self.scheduled_run(job_key(j)[0]) for j in self._jobs()),
            "mean_run_seconds": round(
                sum(o.seconds for o in self.outcomes) / max(1, len(self.outcomes)), 2
            ),
            "status_commits": int(git(self.repo, "rev-list", "--count", STATUS_BRANCH) or 0),
        }
