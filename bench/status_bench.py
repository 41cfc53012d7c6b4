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
6. The decision record: its bytes per cycle, and its replay.
7. ``--commits N``: the status writes of commits at N operations (default 100,000), in the
   world of ``bench/commit_cost.py`` (N operations in a paused queue, 1% through a preset):
   compiled, decided and reported as the reconciler does (its caches kept), each create
   carried out. A cold write, then writes after one new operation (dispatched), and after
   the preset of 1% moves them to the dispatching queue. Per write, side by side: the
   writer's CPU (``encode`` with the memos ``StatusPublisher`` keeps, ``status_changes``,
   ``summarize_cycle``) against ``encode`` without memos (a full render, its bytes checked
   equal), and the Git write of the changes to a local bare repo (wall, and CPU with git's).

    PYTHONPATH=. python bench/status_bench.py --commits 100000 [--profile OUT.txt]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from commit_cost import MOVE, NOW, OP, world

from reconciler.adapters.git import ConfigRepo, StatusBranch
from reconciler.adapters.repo import snapshot_git
from reconciler.core.compile import CompileCache, compile_repo
from reconciler.core.decision.cycle import ClusterListing, Decision, InFlight, Memory, decide
from reconciler.core.decision.render import spec_hash, workload_name
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.plan import plan_repo
from reconciler.core.plan.groups import PlanCache
from reconciler.core.reporting.replay import differences, replay
from reconciler.core.reporting.report import Failure, Outcome, encode, encode_changes, report
from reconciler.core.reporting.status import (
    PhaseMemo,
    RecordMemo,
    RenderMemo,
    SpecHashMemo,
    StatusMemos,
    StatusReason,
    _yaml_text,
    delta_changes,
    is_decision_path,
    read_status,
    render_status,
    status_changes,
    summarize_changes,
    summarize_cycle,
)
from reconciler.core.types import CompiledRepo, Phase, RepoFile, RepoSnapshot

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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("n", nargs="?", type=int, default=10_000)
    parser.add_argument("--commits", type=int, default=None, metavar="N")
    parser.add_argument("--profile", type=Path, default=None)
    args = parser.parse_args()
    if args.commits is not None:
        commit_writes(args.commits, args.profile)
        return
    n = args.n
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


def commit_writes(n: int, profile: Path | None) -> None:
    """Section 7: the status writes of commits at ``n`` operations, with and without memos."""
    files = world(n)
    cache, plans, memory = CompileCache(), PlanCache(), Memory()
    running: dict[str, WorkloadState] = {}  # what the cluster lists: every create so far
    memos = StatusMemos()
    branch: dict[str, bytes] = {}  # the branch as the writer knows it
    profiler = None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        git(root, "init", "-q", "--bare", "remote.git")
        status = StatusBranch(ConfigRepo(str(root / "remote.git"), cache_dir=root / "cache"))
        print(f"{n:,} operations (load average {os.getloadavg()[0]:.1f})")
        print(
            f"  {'write':28s} {'writer CPU':>10s} {'(render)':>9s} {'full render':>11s} "
            f"{'ratio':>6s} {'files changed':>13s} {'git wall':>9s} {'git CPU':>8s}"
        )

        def write(label: str) -> None:
            nonlocal memory, branch, profiler
            compiled = compile_repo(RepoSnapshot(dict(files), version=label), cache=cache)
            listing = {"local": ClusterListing(tuple(running.values()))}
            decision = decide(compiled, listing, memory, NOW, plans)
            created = tuple(
                InFlight(dispatched_state(compiled, c.operation.id, c.queue), "1")
                for c in decision.actions.creates
            )
            shown = report(compiled, decision, Outcome(created=created))
            if profile is not None and label != "cold":
                from pyinstrument import Profiler

                profiler = profiler or Profiler(interval=0.001)
                profiler.start()
            started = time.process_time()
            delta = encode_changes(shown, memos)
            t_encode = time.process_time() - started
            if branch:  # as ``StatusPublisher`` does after its own write
                changes = delta_changes(branch, delta.files, delta.changes)
                message = summarize_changes(branch, delta)
            else:
                changes = status_changes(branch, delta.files)
                message = summarize_cycle(branch, delta.files, memos.phases)
            t_writer = time.process_time() - started
            if profiler is not None:
                profiler.stop()
            started = time.process_time()
            full = encode(shown)
            t_full = time.process_time() - started
            assert full == delta.files, f"{label}: the memos changed the files"
            assert changes == status_changes(branch, full), f"{label}: other changes"
            cpu_before, wall_before = cpu_seconds(), time.perf_counter()
            status.write(changes, message)
            git_cpu, git_wall = cpu_seconds() - cpu_before, time.perf_counter() - wall_before
            branch = {**branch, **changes}  # type: ignore[dict-item]
            branch = {p: d for p, d in branch.items() if d is not None}
            memory = decision.memory
            running.update((c.state.operation, c.state) for c in created)
            print(
                f"  {label:28s} {t_writer * 1000:7.0f} ms {t_encode * 1000:6.0f} ms "
                f"{t_full * 1000:8.0f} ms {t_full / t_writer:5.1f}x {len(changes):13d} "
                f"{git_wall * 1000:6.0f} ms {git_cpu * 1000:5.0f} ms",
                flush=True,
            )

        write("cold")
        write("no new commit")
        for r in range(3):
            path = f"projects/bench/operations/new-{r}.yaml"
            files[path] = RepoFile(path, OP.format(name=f"new-{r}").encode())
            write(f"a new operation ({r + 1})")
        path = "projects/bench/presets/move-0.yaml"
        files[path] = RepoFile(path, MOVE.format(i=0, queue="bulk").encode())
        write("a preset of 1% changed")
        write("its runs listed")
    if profiler is not None and profile is not None:
        profile.write_text(profiler.output_text(unicode=False, show_all=False))


def dispatched_state(compiled: CompiledRepo, operation: str, queue: str) -> WorkloadState:
    """The state a create's response gives (``runtime/cycle.py``)."""
    op = compiled.by_id[operation]
    project, name = op.id.split("/")
    return WorkloadState(
        operation=op.id,
        generation=op.generation,
        cluster=op.cluster,
        namespace=op.namespace,
        name=workload_name(project, name, op.generation),
        uid=f"uid-{op.id}",
        phase=Phase.DISPATCHED,
        queue=queue,
        spec_hash=spec_hash(op, compiled.connections),
        config_commit=compiled.version,
        dispatched_at="2026-12-06T08:00:01Z",
        requests=dict(op.requests),
        pods=op.replicas,
        kind="Job",
    )


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
