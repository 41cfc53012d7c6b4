"""Git in and status out, measured side by side in one run (ratios, not absolute targets).

    PYTHONPATH=. python bench/status_bench.py [N_OPERATIONS (default 10000)]

1. ConfigRepo.sync after a one-file commit (tree diff, one blob read) vs. a full read of
   the same commit (snapshot_git): what the incremental sync saves per cycle.
2. render_status over N operations vs. plan_repo over the same world: the status cost
   relative to the planning it reports on (first cycle, and a cycle where nothing changed).
3. StatusBranch.write of a one-file change vs. of all N files, on a branch of N files; the
   write of all N statuses in one commit (wall and CPU, git's included) is the goal: <= 1 s.
4. The status writer's work (``render_status`` with the memos ``StatusPublisher`` keeps,
   ``status_changes``, ``summarize_cycle``; not the Git write) over the writes of a
   dispatch: every operation goes Queued -> Dispatched -> Running, a third of them a write
   (each record changes two or three times), then a write where nothing changed. CPU per
   write and per operation.
5. The report the writer encodes (``core/reporting/report.py``), side by side with rendering the
   plan as before: ``decide`` over a third of the operations running, then ``report`` with
   every create carried out, with none (a follower's), with one create failed (the
   planner recounts), and ``encode(report)`` against ``render_status`` of the same plan
   and states. CPU, best of 3.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from reconciler.adapters.git import ConfigRepo, StatusBranch
from reconciler.adapters.repo import snapshot_git
from reconciler.core.compile import compile_repo
from reconciler.core.decision.cycle import ClusterListing, Decision, InFlight, Memory, decide
from reconciler.core.decision.render import spec_hash, workload_name
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.plan import plan_repo
from reconciler.core.reporting.replay import differences, replay
from reconciler.core.reporting.report import Failure, Outcome, encode, report
from reconciler.core.reporting.status import (
    PhaseMemo,
    RecordMemo,
    RenderMemo,
    SpecHashMemo,
    StatusReason,
    _yaml_text,
    is_decision_path,
    read_status,
    render_status,
    status_changes,
    summarize_cycle,
)
from reconciler.core.types import CompiledRepo, Phase

TEMPLATE = Path(__file__).resolve().parent.parent / "config-repo-template"
ENV = {
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@b",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@b",
    "PATH": "/usr/bin:/bin:/usr/local/bin",
}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True)


def best(fn: Callable[[], object], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def make_repo(root: Path, n: int) -> Path:
    work = root / "work"
    subprocess.run(["cp", "-r", str(TEMPLATE), str(work)], check=True)
    for i in range(n):
        project = ("vision", "language")[i % 2]
        (work / "projects" / project / "operations" / f"gen-{i}.yaml").write_text(
            f"kind: Operation\nname: gen-{i}\npresets: [a100, data]\nrun:\n  container:\n"
            f"    command: [python, train.py]\n    args: [--seed, '{i}']\n"
        )
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "seed")
    return work


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        work = make_repo(root, n)
        repo = ConfigRepo(str(work), cache_dir=root / "cache")
        repo.sync()
        edits = iter(range(10**6))

        def one_file_commit() -> None:
            (work / "projects" / "vision" / "operations" / "gen-0.yaml").write_text(
                f"kind: Operation\nname: gen-0\nrun:\n  container:\n    args: ['{next(edits)}']\n"
            )
            git(work, "commit", "-qam", "edit")

        def incremental() -> None:
            one_file_commit()
            repo.sync()

        def full() -> None:
            one_file_commit()
            snapshot_git(work, "HEAD")

        t_commit = best(one_file_commit)
        t_inc = best(incremental) - t_commit
        t_full = best(full) - t_commit
        assert repo.last_sync_stats is not None
        print(f"files in repo:                       {len(repo.sync().files)}")
        print(f"blobs read by the incremental sync:  {repo.last_sync_stats.blobs_read}")
        print(f"sync, one-file commit (incremental): {t_inc * 1000:8.1f} ms")
        print(f"snapshot_git (full read):            {t_full * 1000:8.1f} ms")
        print(f"ratio full / incremental:            {t_full / t_inc:8.1f}x")

        compiled = compile_repo(repo.sync())
        now = datetime(2026, 1, 1, tzinfo=UTC)
        plan = plan_repo(compiled, [], now)
        t_plan = best(lambda: plan_repo(compiled, [], now))

        def cold() -> None:
            _yaml_text.cache_clear()
            render_status(compiled, plan, {})

        t_cold = best(cold)
        t_render = best(lambda: render_status(compiled, plan, {}))
        files = render_status(compiled, plan, {})
        print(f"operations:                          {len(compiled.operations)}")
        print(f"plan_repo:                           {t_plan * 1000:8.1f} ms")
        print(
            f"render_status, first cycle:          {t_cold * 1000:8.1f} ms "
            f"({t_cold / len(files) * 1e6:.0f} us/file, {len(files)} files)"
        )
        print(
            f"render_status, unchanged world:      {t_render * 1000:8.1f} ms "
            f"({t_render / len(files) * 1e6:.0f} us/file)"
        )
        print(f"ratio render_status / plan_repo:     {t_render / t_plan:8.1f}x (unchanged world)")
        dispatch_writes(compiled, now)
        report_costs(compiled, now)

        bare = root / "remote.git"
        git(root, "init", "-q", "--bare", str(bare))
        status = StatusBranch(ConfigRepo(str(bare), cache_dir=root / "cache2"))
        status.write(files, "seed")
        rounds = iter(range(10**6))
        some = next(iter(files))

        def write_one() -> None:
            status.write({some: f"x: {next(rounds)}\n".encode()}, "one")

        def write_all() -> None:
            k = next(rounds)
            status.write({p: d + f"# {k}\n".encode() for p, d in files.items()}, "all")

        t_one = best(write_one)
        t_all = best(write_all)
        cpu_before = cpu_seconds()
        wall_before = time.perf_counter()
        write_all()
        cpu_all = cpu_seconds() - cpu_before
        wall_all = time.perf_counter() - wall_before
        print(f"status write, 1 file changed:        {t_one * 1000:8.1f} ms")
        print(f"status write, {len(files)} files changed:  {t_all * 1000:8.1f} ms (best of 3)")
        print(
            f"  one more: {wall_all * 1000:.0f} ms wall, {cpu_all * 1000:.0f} ms CPU "
            "(this process and git's)"
        )
        print(f"ratio all / one:                     {t_all / t_one:8.1f}x")
        print(f"ratio write of all / goal 1 s:       {t_all:8.2f} (goal <= 1)")


def dispatch_writes(compiled: CompiledRepo, now: datetime) -> None:
    """Section 4: the writer's CPU over the writes of a dispatch of every operation."""
    ops = compiled.operations
    states: dict[tuple[str, Phase], WorkloadState] = {}  # one object per run and phase

    def state(i: int, phase: Phase) -> WorkloadState:
        op = ops[i]
        known = states.get((op.id, phase))
        if known is None:
            project, name = op.id.split("/")
            known = states[(op.id, phase)] = WorkloadState(
                operation=op.id,
                generation=op.generation,
                cluster=op.cluster,
                namespace=op.namespace,
                name=workload_name(project, name, op.generation),
                uid=f"uid-{i}",
                phase=phase,
                queue=op.queue,
                spec_hash=spec_hash(op, compiled.connections),
                config_commit=compiled.version,
                dispatched_at="2026-01-01T00:00:01.123456Z",
                started_at=None if phase is Phase.DISPATCHED else "2026-01-01T00:00:09Z",
                requests=dict(op.requests),
                message="starting on its node" if phase is Phase.DISPATCHED else "",
            )
        return known

    rendered: RenderMemo = {}
    hashes: SpecHashMemo = {}
    phases: PhaseMemo = {}
    built: RecordMemo = {}
    files: dict[str, bytes] = {}
    total = 0.0
    for write in range(6):
        current = {}
        for i, op in enumerate(ops):
            cohort = i % 3
            if write == cohort + 1:
                current[op.id] = state(i, Phase.DISPATCHED)
            elif write > cohort + 1:
                current[op.id] = state(i, Phase.RUNNING)
        plan = plan_repo(compiled, [s.to_observed() for s in current.values()], now)
        started = time.process_time()
        new = render_status(
            compiled,
            plan,
            current,
            memo=rendered,
            hashes=hashes,
            phases=phases,
            built=built,
        )
        changes = status_changes(files, new)
        subject = summarize_cycle(files, new, phases).splitlines()[0]
        spent = time.process_time() - started
        total += spent
        files = new
        print(
            f"status write {write + 1} of a dispatch:         {spent * 1000:8.1f} ms CPU "
            f"({len(changes)} files changed: {subject})"
        )
    print(
        f"writer CPU over the dispatch:        {total * 1000:8.1f} ms "
        f"({total * 1e6 / len(ops):.0f} us per operation)"
    )


def report_costs(compiled: CompiledRepo, now: datetime) -> None:
    """Section 5: what the report adds to the writer's work, side by side."""
    ops = compiled.operations
    running = [
        WorkloadState(
            operation=op.id,
            generation=op.generation,
            cluster=op.cluster,
            namespace=op.namespace,
            name=workload_name(*op.id.split("/"), op.generation),
            uid=f"uid-{i}",
            phase=Phase.RUNNING,
            queue=op.queue,
            requests=dict(op.requests),
            dispatched_at="2026-01-01T00:00:01Z",
            started_at="2026-01-01T00:00:09Z",
        )
        for i, op in enumerate(ops)
        if i % 3 == 0
    ]
    listing = {name: ClusterListing() for name in compiled.clusters}
    for state in running:
        got = listing[state.cluster]
        listing[state.cluster] = ClusterListing((*got.workloads, state))
    decision = decide(compiled, listing, Memory(), now)
    created = tuple(
        InFlight(
            WorkloadState(
                operation=c.operation.id,
                generation=c.operation.generation,
                cluster=c.cluster,
                namespace=c.operation.namespace,
                name=workload_name(*c.operation.id.split("/"), c.operation.generation),
                uid=f"new-{c.operation.id}",
                phase=Phase.DISPATCHED,
                queue=c.queue,
                requests=dict(c.operation.requests),
            ),
            "1",
        )
        for c in decision.actions.creates
    )
    failed = {created[0].state.operation: Failure(StatusReason.DISPATCH_FAILED, "refused")}
    outcomes = {
        "all carried out": Outcome(created=created),
        "none (a follower)": Outcome.none(),
        "one create failed": Outcome(created=created[1:], failed=failed),
    }
    t_decide = best_cpu(lambda: decide(compiled, listing, Memory(), now))
    print(f"dispatches planned / running:        {len(created)} / {len(running)}")
    print(f"decide:                              {t_decide * 1000:8.1f} ms CPU")
    for name, outcome in outcomes.items():
        t = best_cpu(lambda o=outcome: report(compiled, decision, o))  # type: ignore[misc]
        print(f"report, {name + ':':28} {t * 1000:8.1f} ms CPU")
    shown = report(compiled, decision, outcomes["all carried out"])
    states = dict(shown.states)
    t_render = best_cpu(
        lambda: render_status(
            compiled,
            decision.plan,
            states,
            clusters=decision.cluster_records(),
            superseded=decision.superseded,
            ledger=decision.memory.ledger,
        )
    )
    t_encode = best_cpu(lambda: encode(report(compiled, decision, outcomes["all carried out"])))
    print(f"render_status of plan and states:    {t_render * 1000:8.1f} ms CPU (before)")
    print(f"encode(report(...)):                 {t_encode * 1000:8.1f} ms CPU (now)")
    print(f"ratio encode(report) / render:       {t_encode / t_render:8.2f}x")
    record_costs(compiled, decision, outcomes["all carried out"], running)


def record_costs(
    compiled: CompiledRepo, decision: Decision, outcome: Outcome, running: list[WorkloadState]
) -> None:
    """Section 6: the decision record's size per cycle, and its replay."""
    files = encode(report(compiled, decision, outcome))
    size = sum(len(d) for p, d in files.items() if is_decision_path(p))
    total = sum(len(data) for data in files.values())
    stops = tuple(replace(s, phase=Phase.STOPPED) for s in running)
    stopping = encode(report(compiled, decision, replace(outcome, stopped=stops)))
    parts = [d for p, d in stopping.items() if is_decision_path(p)]
    print(
        f"decision record, {len(outcome.created)} dispatched:      {size:8d} bytes "
        f"({size / total:.4%} of the commit's {total} bytes of files)"
    )
    print(
        f"  and {len(stops)} runs stopped:            {sum(map(len, parts)):8d} bytes "
        f"in {len(parts)} files ({sum(map(len, parts)) / len(stops):.0f} bytes a stopped run)"
    )
    view = read_status(files)
    t_replay = best_cpu(lambda: replay(view, compiled))
    assert differences(compiled, replay(view, compiled), view) == []
    print(f"replay of the commit (read back):    {t_replay * 1000:8.1f} ms CPU, equals its record")


def best_cpu(fn: Callable[[], object], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        started = time.process_time()
        fn()
        times.append(time.process_time() - started)
    return min(times)


def cpu_seconds() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


if __name__ == "__main__":
    main()
