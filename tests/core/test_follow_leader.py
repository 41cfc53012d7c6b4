"""A process that does not lead (``serve``, a standby ``run`` replica) follows the leader's
record on the status branch: ``StatusPublisher.leader_record`` reads the branch again when
its tip moves (tests/adapters/test_git_adapter.py), and each cycle joins it into the memory
(``Memory.following``)."""

from __future__ import annotations

import pytest
from support.builders import World
from support.fake_kube import FakeCycles, FollowerCycles

from reconciler.core.decision.cycle import Memory
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.types import Phase


def _state(phase: Phase, *, name: str = "p-a-g1", uid: str = "u1") -> WorkloadState:
    return WorkloadState(
        operation="p/a",
        generation=1,
        cluster="local",
        namespace="ns",
        name=name,
        uid=uid,
        phase=phase,
    )


# --- the join ---------------------------------------------------------------------------


def test_a_run_the_record_saw_end_takes_the_records_state() -> None:
    ours = Memory(seen={"p/a": _state(Phase.RUNNING)})
    joined = ours.following(Memory(seen={"p/a": _state(Phase.SUCCEEDED)}))
    assert joined.seen["p/a"].phase is Phase.SUCCEEDED


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        # what this process saw end stays: the record may be older
        (_state(Phase.FAILED), _state(Phase.SUCCEEDED)),
        (_state(Phase.SUCCEEDED), _state(Phase.RUNNING)),
        # an active record never overrides what this process saw
        (_state(Phase.RUNNING), _state(Phase.DISPATCHED)),
        # another run of the operation: a new workload name, or the same name recreated
        (_state(Phase.RUNNING, name="p-a-g2"), _state(Phase.SUCCEEDED)),
        (_state(Phase.RUNNING, uid="u2"), _state(Phase.SUCCEEDED)),
    ],
)
def test_what_this_process_saw_wins_otherwise(ours: WorkloadState, theirs: WorkloadState) -> None:
    joined = Memory(seen={"p/a": ours}).following(Memory(seen={"p/a": theirs}))
    assert joined.seen["p/a"] is ours


def test_a_record_without_a_uid_is_the_same_run_by_its_name() -> None:
    ours = Memory(seen={"p/a": _state(Phase.RUNNING)})
    joined = ours.following(Memory(seen={"p/a": _state(Phase.STOPPED, uid="")}))
    assert joined.seen["p/a"].phase is Phase.STOPPED


def test_what_only_the_record_knows_is_added_as_at_start() -> None:
    theirs = Memory(seen={"p/b": _state(Phase.SUCCEEDED, name="p-b-g1")})
    joined = Memory(seen={"p/a": _state(Phase.RUNNING)}).following(theirs)
    assert set(joined.seen) == {"p/a", "p/b"}
    assert joined.seen == Memory(seen={"p/a": _state(Phase.RUNNING)}).under(theirs).seen | {
        "p/a": _state(Phase.RUNNING)
    }


# --- the cycle --------------------------------------------------------------------------


def _run_ends_unseen(follow: bool) -> tuple[FakeCycles, FollowerCycles]:
    """The leader dispatches p/a; the follower sees it dispatched, is cut off from the
    cluster, and meanwhile the run succeeds (the leader records it) and its Job is deleted
    by its ttl; then the follower reads the cluster again."""
    world = World().queue("q", quota={"nvidia.com/gpu": 2})
    world.op("p/a", gpu=1).timeout("1h")
    leader = FakeCycles(world.repo())
    first = leader.cycle()
    assert first.dispatched == ("p/a",)
    follower = FollowerCycles(leader, leader.status_of(first), follow=follow)
    assert follower.cycle().states["p/a"].phase is Phase.DISPATCHED
    follower.cut = True
    job = next(iter(leader.cluster.jobs))
    leader.cluster.set_phase(*job, "Succeeded")
    ended = leader.cycle(after=60)
    assert ended.states["p/a"].phase is Phase.SUCCEEDED
    follower.record = leader.status_of(ended)
    follower.cycle(after=5)  # cut off: the record is joined, the cluster not read
    leader.cluster.delete(*job)
    follower.cut = False
    return leader, follower


def test_a_follower_shows_what_the_leader_recorded_of_a_run_it_did_not_see_end() -> None:
    leader, follower = _run_ends_unseen(follow=True)
    seen = follower.cycle(after=3600)
    theirs = leader.cycle()
    assert seen.states["p/a"].phase is theirs.states["p/a"].phase is Phase.SUCCEEDED
    assert seen.plan == theirs.plan
    assert seen.decision is not None and theirs.decision is not None
    assert seen.decision.memory.ledger == theirs.decision.memory.ledger
    assert follower.asked == 3  # once a cycle while it does not lead


def test_without_the_record_the_gone_job_reads_as_deleted_by_hand() -> None:
    """What the join mends: from its own memory alone the follower says Stopped."""
    _leader, follower = _run_ends_unseen(follow=False)
    assert follower.cycle(after=3600).states["p/a"].phase is Phase.STOPPED


def test_the_leader_never_asks_for_the_record() -> None:
    asked: list[int] = []

    def record() -> Memory | None:
        asked.append(1)
        return None

    world = World().queue("q", quota={"nvidia.com/gpu": 2})
    world.op("p/a", gpu=1)
    leader = FakeCycles(world.repo(), leader_record=record)
    assert leader.cycle().dispatched == ("p/a",)
    leader.cycle(after=10)
    assert asked == []
