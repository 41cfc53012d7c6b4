"""A status writer renders again only what a cycle changed (``render_changes``): cycle after
cycle, its files are exactly a full render's, and what it says changed (the files, the
commit message) is exactly what comparing the whole branch says."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.paths import TEMPLATE

from reconciler.adapters.repo import snapshot_worktree
from reconciler.core.compile import CompileCache, compile_repo
from reconciler.core.decision.cycle import ClusterListing, InFlight, Memory, decide
from reconciler.core.observation.gang import GangTimeout
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.plan.groups import PlanCache
from reconciler.core.reporting import status as status_module
from reconciler.core.reporting.report import (
    Failure,
    Outcome,
    Report,
    encode,
    encode_changes,
    report,
)
from reconciler.core.reporting.status import (
    StatusDelta,
    StatusMemos,
    StatusReason,
    delta_changes,
    is_decision_path,
    render_changes,
    render_status,
    status_changes,
    summarize_changes,
    summarize_cycle,
)
from reconciler.core.types import (
    CompiledOperation,
    CompiledRepo,
    ConfigError,
    Phase,
    RepoFile,
    RepoSnapshot,
)

BASE = snapshot_worktree(TEMPLATE)
OPERATIONS = sorted(p for p in BASE.files if "/operations/" in p)
QUEUES = sorted(p for p in BASE.files if p.startswith("queues/"))
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

# a config edit: a comment (the same operations, recompiled or not), a digit (a priority,
# a quota, a generation, a GPU count...), a queue paused, an operation removed, restored,
# copied or moved to another queue
EDITS = ("comment", "digit", "pause", "delete", "restore", "copy", "requeue")
# what the clusters do between two cycles: runs start, end, vanish (deleted by hand)
MOVES = ("start", "succeed", "fail", "vanish", "none")


def _edit(files: dict[str, RepoFile], kind: str, n: int) -> None:
    paths = QUEUES if kind == "pause" else OPERATIONS
    path = paths[n % len(paths)]
    if kind == "restore":
        files[path] = BASE.files[path]
        return
    if kind == "delete":
        files.pop(path, None)
        return
    file = files.get(path)
    if file is None:
        return
    content = file.content
    if kind == "copy":
        name = f"copy-{n % 4}"
        new = re.sub(r"/[^/]+\.yaml$", f"/{name}.yaml", path)
        files[new] = RepoFile(new, re.sub(rb"(?m)^name: .*$", f"name: {name}".encode(), content))
        return
    if kind == "comment":
        content += f"\n# edit {n}\n".encode()
    elif kind == "digit":
        digits = [m.start() for m in re.finditer(rb"[0-9]", content)]
        if digits:
            at = digits[n % len(digits)]
            content = content[:at] + str(n % 9 + 1).encode() + content[at + 1 :]
    elif kind == "pause":
        content = re.sub(rb"(?m)^paused: .*\n", b"", content) + b"paused: %s\n" % (
            b"true" if n % 2 else b"false"
        )
    elif kind == "requeue":
        queues = [q.split("/")[1][:-5] for q in QUEUES]
        content = re.sub(rb"(?m)^queue: .*\n", b"", content)
        content += f"queue: {queues[n % len(queues)]}\n".encode()
    files[path] = replace(file, content=content)


def _created(op: CompiledOperation, cluster: str, queue: str, at: datetime) -> WorkloadState:
    """A create's response, as the runtime records it."""
    return WorkloadState(
        operation=op.id,
        generation=op.generation,
        cluster=cluster,
        namespace=op.namespace,
        name=f"{op.id.replace('/', '-')}-g{op.generation}",
        uid=f"uid-{op.id}-{op.generation}",
        phase=Phase.DISPATCHED,
        queue=queue,
        requests=dict(op.requests),
        pods=op.replicas,
        flavor=op.flavor.name if op.flavor is not None else None,
        dispatched_at=at.isoformat(),
    )


def _moved(state: WorkloadState, move: str, at: datetime) -> WorkloadState | None:
    if move == "vanish":
        return None
    if move == "start" and state.phase is Phase.DISPATCHED:
        return replace(state, phase=Phase.RUNNING, started_at=at.isoformat())
    if move in ("succeed", "fail") and state.phase.active:
        phase = Phase.SUCCEEDED if move == "succeed" else Phase.FAILED
        return replace(state, phase=phase, finished_at=at.isoformat())
    return state


cycles = st.lists(
    st.tuples(
        st.lists(st.tuples(st.sampled_from(EDITS), st.integers(0, 60)), max_size=3),
        st.lists(st.sampled_from(MOVES), min_size=1, max_size=4),  # by run, in turn
        st.integers(0, 3),  # every how many creates one fails (0: none)
    ),
    min_size=1,
    max_size=7,
)


def _cycle(
    compiled: CompiledRepo,
    running: dict[str, WorkloadState],
    moves: list[str],
    memory: Memory,
    plans: PlanCache,
    fail_every: int,
    now: datetime,
    i: int,
) -> tuple[Report, Memory]:
    """One cycle: each run of ``running`` moved on by ``moves``, then the decision carried
    out with every ``fail_every``-th create refused (``running`` is left with what runs
    after it); its report and the memory the next cycle starts from."""
    for k, oid in enumerate(sorted(running)):
        moved = _moved(running[oid], moves[k % len(moves)], now)
        if moved is None:
            del running[oid]
        else:
            running[oid] = moved
    listing = {name: ClusterListing() for name in compiled.clusters}
    for state in running.values():
        if state.cluster in listing:
            got = listing[state.cluster]
            listing[state.cluster] = ClusterListing((*got.workloads, state))
    decision = decide(compiled, listing, memory, now, plans)
    created, failed = [], {}
    for k, c in enumerate(decision.actions.creates):
        if fail_every and k % fail_every == 0:
            failed[c.operation.id] = Failure(StatusReason.DISPATCH_FAILED, f"refused {i}")
        else:
            created.append(InFlight(_created(c.operation, c.cluster, c.queue, now), "1"))
    shown = report(compiled, decision, Outcome(created=tuple(created), failed=failed))
    running.update((c.state.operation, c.state) for c in created)
    return shown, decision.memory


def _written(
    branch: dict[str, bytes], behind: set[str], delta: StatusDelta, full: dict[str, bytes]
) -> tuple[dict[str, bytes], set[str]]:
    """The branch after the writer's write of ``delta`` (``behind``: the paths rendered
    again since its last write), checked against comparing the whole branch with the full
    render ``full``; and the paths still behind."""
    changes = delta_changes(branch, delta.files, behind)
    assert changes == status_changes(branch, full)
    if not changes:
        return branch, behind
    assert summarize_changes(branch, delta) == summarize_cycle(branch, full)
    branch = {**branch, **{p: d for p, d in changes.items() if d is not None}}
    return {p: d for p, d in branch.items() if changes.get(p, d) is not None}, set()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cycles)
@pytest.mark.slow
def test_a_render_of_what_changed_is_a_full_render(
    steps: list[tuple[list[tuple[str, int]], list[str], int]],
) -> None:
    """Commits, dispatches (some creates failed), runs starting, ending and vanishing: at
    each cycle the files rendered again where their inputs changed equal ``encode``'s; the
    changes and the commit message from them equal those of comparing the whole branch
    (as the writer has it: written when something but the decision record changed)."""
    files = dict(BASE.files)
    cache, plans, memos = CompileCache(), PlanCache(), StatusMemos()
    memory = Memory()
    running: dict[str, WorkloadState] = {}
    branch: dict[str, bytes] = {}
    behind: set[str] = set()
    for i, (edits, moves, fail_every) in enumerate(steps):
        now = START + timedelta(minutes=i)
        for kind, n in edits:
            _edit(files, kind, n)
        compiled = compile_repo(RepoSnapshot(dict(files), version=f"c{i}"), cache=cache)
        shown, memory = _cycle(compiled, running, moves, memory, plans, fail_every, now, i)
        delta = encode_changes(shown, memos)
        full = encode(shown)
        assert dict(delta.files) == full
        behind.update(delta.changes)
        branch, behind = _written(branch, behind, delta, full)


def test_the_render_calls_its_pause_between_steps_and_every_few_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A writer thread holds its render at ``pause`` while a cycle runs: it is called before
    each step and every ``PAUSE_EVERY`` records, and changes nothing it renders."""
    monkeypatch.setattr(status_module, "PAUSE_EVERY", 2)
    compiled = compile_repo(BASE)
    listing = {name: ClusterListing() for name in compiled.clusters}
    shown = report(compiled, decide(compiled, listing, Memory(), START), Outcome.none())
    paused: list[int] = []
    memos = StatusMemos()
    delta = encode_changes(shown, memos, pause=lambda: paused.append(len(memos.rendered)))
    assert dict(delta.files) == encode(shown)
    assert len(compiled.operations) > 4 and len(paused) >= len(compiled.operations) // 2
    # called as the records are rendered, not all at once before or after them
    assert 0 < paused[len(paused) // 2] < len(memos.rendered)


def test_a_decision_record_alone_is_written_with_the_next_change() -> None:
    """A cycle whose only change is its decision record makes no commit; the next one that
    changes a record writes the decision record too, though it did not change since."""
    compiled = compile_repo(BASE)
    listing = {name: ClusterListing() for name in compiled.clusters}
    memos = StatusMemos()
    first = decide(compiled, listing, Memory(), START)
    branch = encode(report(compiled, first, Outcome.none()))
    assert dict(encode_changes(report(compiled, first, Outcome.none()), memos).files) == branch
    later = decide(compiled, listing, Memory(), START + timedelta(minutes=1))
    delta = encode_changes(report(compiled, later, Outcome.none()), memos)
    assert delta.changes and all(map(is_decision_path, delta.changes))
    assert delta_changes(branch, delta.files, delta.changes) == {}
    behind = set(delta.changes)
    edited = dict(BASE.files)
    _edit(edited, "comment", 0)
    _edit(edited, "digit", 3)
    again = compile_repo(RepoSnapshot(edited, version="c2"))
    shown = report(
        again, decide(again, listing, Memory(), START + timedelta(minutes=1)), Outcome.none()
    )
    delta = encode_changes(shown, memos)
    behind.update(delta.changes)
    changes = delta_changes(branch, delta.files, behind)
    assert changes == status_changes(branch, encode(shown))
    assert any(map(is_decision_path, changes))


# every file of the config, not only the operations and queues: presets, connections,
# clusters, the org file (prices, timezone), projects, cohorts, flavors
ANY = sorted(p for p in BASE.files if not p.startswith("schemas/"))
ANY_EDITS = (
    "digit",
    "comment",
    "delete",
    "restore",
    "break",
    "value",
    "policy",
    "rerun",
    "connection",
)
CONNECTIONS = sorted(p for p in BASE.files if p.startswith("connections/"))


def _edit_any(files: dict[str, RepoFile], kind: str, n: int) -> None:
    if kind == "policy":  # the org's ceiling: operations refused by policy, then not
        org = files.get("reconciler.yaml")
        if org is None:  # deleted by an earlier edit: nothing to tighten
            return
        content = re.sub(rb"(?m)^(    nvidia.com/gpu:) \d+", b"\\1 %d" % (n % 4 + 1), org.content)
        files["reconciler.yaml"] = replace(org, content=content)
        return
    if kind == "connection":  # every operation using it compiles as before: its hash moves
        path = CONNECTIONS[n % len(CONNECTIONS)]
        file = files.get(path)
        if file is not None:
            content = re.sub(rb"(?m)^description: .*$", b"", file.content)
            content = re.sub(rb"(?m)^(  [a-zA-Z]+: [a-z][a-z0-9-]*)$", b"\\1x", content, count=1)
            files[path] = replace(file, content=content)
        return
    if kind == "rerun":  # a generation bumped: the run before it is superseded
        path = OPERATIONS[n % len(OPERATIONS)]
        file = files.get(path)
        if file is not None:
            content = re.sub(rb"(?m)^generation: .*\n", b"", file.content)
            files[path] = replace(file, content=content + b"generation: %d\n" % (n % 5 + 2))
        return
    path = ANY[n % len(ANY)]
    if kind == "restore":
        files[path] = BASE.files[path]
        return
    if kind == "delete":
        files.pop(path, None)
        return
    file = files.get(path)
    if file is None:
        return
    content = file.content
    if kind == "value":  # a plain value changed (a connection's claim, a preset's image...)
        spots = list(re.finditer(rb"(?m)^ *[a-zA-Z]+: [a-z][a-z-]*$", content))
        if spots:
            at = spots[n % len(spots)].end()
            content = content[:at] + b"x" + content[at:]
    elif kind == "comment":
        content += f"\n# edit {n}\n".encode()
    elif kind == "digit":
        digits = [m.start() for m in re.finditer(rb"[0-9]", content)]
        if digits:
            at = digits[n % len(digits)]
            content = content[:at] + str(n % 9 + 1).encode() + content[at + 1 :]
    else:  # "break": a commit that does not compile, the last good config stays in force
        content += b"\n: [unclosed\n"
    files[path] = replace(file, content=content)


any_cycles = st.lists(
    st.tuples(
        st.lists(st.tuples(st.sampled_from(ANY_EDITS), st.integers(0, 200)), max_size=3),
        st.lists(st.sampled_from(MOVES), min_size=1, max_size=4),
        st.integers(0, 3),
        st.integers(1, 1500),  # minutes to the next cycle: schedules fire, windows turn
        st.booleans(),  # an internal error compiling the commit
    ),
    min_size=1,
    max_size=7,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_cycles)
@pytest.mark.slow
def test_a_render_of_what_changed_is_a_full_render_whatever_the_commit_edits(
    steps: list[tuple[list[tuple[str, int]], list[str], int, int, bool]],
) -> None:
    """As above, over edits of any config file (an operation compiled as before while its
    preset, connection, cluster, queue or the org file changed), commits that do not
    compile (the last good config in force, their errors written) or hit a bug, and
    cycles hours apart."""
    files = dict(BASE.files)
    cache, plans, memos = CompileCache(), PlanCache(), StatusMemos()
    memory = Memory()
    running: dict[str, WorkloadState] = {}
    branch: dict[str, bytes] = {}
    behind: set[str] = set()
    good = compile_repo(BASE)
    now = START
    for i, (edits, moves, fail_every, minutes, bug) in enumerate(steps):
        now += timedelta(minutes=minutes)
        for kind, n in edits:
            _edit_any(files, kind, n)
        version = f"c{i}"
        compiled = compile_repo(RepoSnapshot(dict(files), version=version), cache=cache)
        errors: tuple[ConfigError, ...] = ()
        internal = ""
        if bug:
            internal = f"bug compiling {version}"
        elif not compiled.valid:
            errors = compiled.errors
        else:
            good = compiled
        shown, memory = _cycle(good, running, moves, memory, plans, fail_every, now, i)
        delta = encode_changes(
            shown, memos, config_error=errors, config_version=version, internal_error=internal
        )
        full = encode(shown, config_error=errors, config_version=version, internal_error=internal)
        assert dict(delta.files) == full
        behind.update(delta.changes)
        branch, behind = _written(branch, behind, delta, full)


def test_gang_marks_and_superseded_runs_alone_are_rendered_again() -> None:
    """Gang marks and superseded runs that come and go, on compiled operations, workflow
    children, an operation only observed and ids with no record: each render of what
    changed is the full render."""
    compiled = compile_repo(BASE)
    decision = decide(compiled, {n: ClusterListing() for n in compiled.clusters}, Memory(), START)
    plan = decision.plan
    ops = [op for op in compiled.operations if op.workflow is None][:3]
    child = next(op for op in compiled.operations if op.workflow is not None)
    gone = _created(ops[0], "local", ops[0].queue, START)
    gone = replace(gone, operation="vision/gone", name="vision-gone-g1", uid="uid-gone")
    states = {"vision/gone": gone}

    def old(op: CompiledOperation) -> WorkloadState:
        run = _created(op, op.cluster, op.queue, START)
        return replace(run, generation=op.generation - 1, name=f"{run.name}-old", uid="old")

    mark = GangTimeout(generation=1, count=1, dispatched_at=START.isoformat())
    steps: list[tuple[dict[str, GangTimeout], dict[str, WorkloadState]]] = [
        ({}, {}),
        ({ops[0].id: mark, child.id: mark}, {}),
        ({ops[0].id: replace(mark, count=2)}, {"a": old(ops[1]), "b": old(child)}),
        ({"nobody/none": mark, "vision/gone": mark}, {"a": old(ops[1])}),
        ({}, {"c": old(ops[2]), "d": replace(old(ops[2]), generation=-5, uid="older")}),
        ({}, {}),
    ]
    memos = StatusMemos()
    for gangs, superseded in steps:
        full = render_status(compiled, plan, states, superseded=superseded, gang_timeouts=gangs)
        delta = render_changes(
            compiled, plan, states, memos, superseded=superseded, gang_timeouts=gangs
        )
        assert dict(delta.files) == full
