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
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.plan.groups import PlanCache
from reconciler.core.reporting.report import Failure, Outcome, encode, encode_changes, report
from reconciler.core.reporting.status import (
    StatusMemos,
    StatusReason,
    delta_changes,
    is_decision_path,
    status_changes,
    summarize_changes,
    summarize_cycle,
)
from reconciler.core.types import CompiledOperation, Phase, RepoFile, RepoSnapshot

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
        delta = encode_changes(shown, memos)
        full = encode(shown)
        assert dict(delta.files) == full
        behind.update(delta.changes)
        changes = delta_changes(branch, delta.files, behind)
        assert changes == status_changes(branch, full)
        if changes:
            assert summarize_changes(branch, delta) == summarize_cycle(branch, full)
            branch = {**branch, **{p: d for p, d in changes.items() if d is not None}}
            branch = {p: d for p, d in branch.items() if changes.get(p, d) is not None}
            behind = set()
        memory = decision.memory
        running.update((c.state.operation, c.state) for c in created)


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
