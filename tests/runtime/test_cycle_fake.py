"""The reconcile cycle against a fake Kube (tests/support/fake_kube.py): fast tests of what the
Reconciler reads, decides, carries out and remembers. The same behaviours run on the real
control plane in tests/cluster/test_reconciler.py."""

from __future__ import annotations

import gc
from datetime import timedelta
from typing import Any
from unittest import mock

from support.builders import World
from support.harness import GPU, Harness, team_a

from reconciler.core.decision.cycle import Memory
from reconciler.core.plan import PendingReason
from reconciler.core.types import Phase
from reconciler.runtime import cycle as cycle_module


def test_dispatch_run_finish_then_the_next_one_goes() -> None:
    h = Harness(team_a("p/a", "p/b", "p/c").repo())
    first = h.cycle()
    assert first.dispatched == ("p/a", "p/b")
    assert h.clusters["local"].calls == ["create p/p-a-g1", "create p/p-b-g1"]
    h.move("p/a", "Running")
    second = h.cycle()
    assert second.dispatched == () and second.states["p/a"].phase is Phase.RUNNING
    # Running is not written back: the Job's own status says it
    assert h.clusters["local"].calls[-1] == "create p/p-b-g1"
    h.move("p/a", "Succeeded")
    third = h.cycle()
    assert third.dispatched == ("p/c",)
    assert third.states["p/a"].phase is Phase.SUCCEEDED
    # the end of the run is written back onto the Job once
    assert h.clusters["local"].calls.count("annotate p/p-a-g1") == 1
    annotations = h.clusters["local"].jobs[h.job("p/a")]["metadata"]["annotations"]
    assert (annotations["reconciler.dev/phase"], annotations["reconciler.dev/phase-reason"]) == (
        "Succeeded",
        "Completed",
    )
    h.cycle()
    assert h.clusters["local"].calls.count("annotate p/p-a-g1") == 1  # shown: not again
    # a dispatch sends no Event: the Job carries its queue, commit and dispatch time
    assert h.clusters["local"].events == []


def test_a_workload_the_api_server_refuses_fails_alone() -> None:
    """A create answered 422 (a value validate let through and the API server refuses) is
    that operation's failure: the cluster is fine. It used to mark the cluster failed for
    the rest of the cycle, so on every cycle each dispatch after it in plan order, to that
    cluster, was skipped: one bad operation held up the whole cluster."""
    world = team_a("p/bad", "p/good").queue("team-b", quota={GPU: 4})
    world.op("p/elsewhere", queue="team-b", gpu=1)
    h = Harness(world.repo())
    h.clusters["local"].invalid.add("p-bad-g1")
    for _ in range(2):
        result = h.cycle()
        assert set(result.failed) == {"p/bad"}
        assert "is invalid" in result.failed["p/bad"]
    assert sorted(name for _, name in h.clusters["local"].jobs) == ["p-elsewhere-g1", "p-good-g1"]


def test_a_job_deleted_by_hand_is_stopped_and_never_recreated() -> None:
    h = Harness(team_a("p/a", "p/b", "p/c").repo())
    h.cycle()
    del h.clusters["local"].jobs[h.job("p/a")]
    result = h.cycle()
    assert result.states["p/a"].phase is Phase.STOPPED
    assert result.states["p/a"].message == "the workload was deleted"
    assert result.dispatched == ("p/c",)  # its quota is free again; it is not re-run
    assert h.job("p/a") not in h.clusters["local"].jobs
    assert h.reconciler.memory.seen["p/a"].phase is Phase.STOPPED


def test_an_unreachable_cluster_holds_only_its_own_queues_and_prunes_nothing() -> None:
    world = World().queue("gpu-a", cluster="a", concurrency=1).queue("gpu-b", cluster="b")
    world.op("p/a1", queue="gpu-a")
    world.op("p/a2", queue="gpu-a")
    world.op("p/b1", queue="gpu-b")
    world.with_org(prune=True)
    h = Harness(world.repo(), "a", "b")
    h.cycle()
    h.move("p/a1", "Running", "a")
    h.clusters["a"].reachable = False
    world.remove("p/a1")  # removed while its cluster is down: not stopped now
    h.repo = world.repo("v2")
    result = h.cycle()
    assert result.plan is not None and result.plan.stop == ()
    assert result.states["p/a1"].reason is not None
    assert str(result.states["p/a1"].reason) == "ClusterUnreachable"
    assert {p.operation: str(p.reason) for p in result.plan.pending} == {
        "p/a2": "ClusterUnreachable"
    }
    assert [(c.name, c.reachable) for c in result.clusters] == [("a", False), ("b", True)]
    h.clusters["a"].reachable = True
    h.clock.at += timedelta(seconds=1)  # tried again after 1 s (CLUSTER_BACKOFF)
    back = h.cycle()
    assert back.stopped == ("p/a1",)  # pruned once the cluster can be read
    assert back.dispatched == ()  # p/a1 held gpu-a's one slot until it was stopped
    assert not any(c.startswith("annotate") for c in h.clusters["a"].calls[-2:])
    assert h.cycle().dispatched == ("p/a2",)


def test_a_follower_decides_the_same_and_changes_nothing() -> None:
    repo = team_a("p/a", "p/b", "p/c").repo()
    leader, follower = Harness(repo), Harness(repo, leading=False)
    follower.clusters = leader.clusters
    seen = follower.cycle()
    assert leader.clusters["local"].calls == []
    assert seen.dispatched == () and seen.leading is False
    done = leader.cycle()
    assert seen.plan == done.plan


def test_a_restart_starts_from_the_status_branch_memory() -> None:
    """A Job that ran before the restart and was deleted while the reconciler was down is
    Stopped, not dispatched again: the memory came from the status branch."""
    h = Harness(team_a("p/a", "p/b", "p/c").repo())
    first = h.cycle()
    memory = Memory({op: first.states[op] for op in ("p/a", "p/b")})
    del h.clusters["local"].jobs[h.job("p/a")]
    restarted = Harness(h.repo)
    restarted.clusters = h.clusters
    restarted.reconciler.seed(memory)
    result = restarted.cycle()
    assert result.states["p/a"].phase is Phase.STOPPED
    assert "p/a" not in result.dispatched and result.dispatched == ("p/c",)


def test_a_generation_bump_waits_for_the_old_run_and_never_prunes_it() -> None:
    world = team_a("p/train", gpu=2)
    world.with_org(prune=True)
    h = Harness(world.repo())
    h.cycle()
    h.move("p/train", "Running")
    world.builders[0]._fields["generation"] = 2
    h.repo = world.repo("v2")
    bumped = h.cycle()
    assert bumped.dispatched == () and bumped.stopped == ()
    assert bumped.plan is not None
    [pending] = bumped.plan.pending
    assert (pending.operation, str(pending.reason)) == ("p/train", "QuotaExceeded")
    assert pending.admit.operations == ("p/train@g1",)
    h.move("p/train", "Succeeded")
    rerun = h.cycle()
    assert rerun.dispatched == ("p/train",)
    assert h.job("p/train", 2) in h.clusters["local"].jobs


def test_a_cluster_removed_from_the_config_keeps_its_last_phases() -> None:
    """Its workloads can no longer be read: they are not 'deleted by hand'."""
    world = World().queue("gpu-a", cluster="a").queue("gpu-b", cluster="b")
    world.op("p/a1", queue="gpu-a")
    world.op("p/b1", queue="gpu-b")
    h = Harness(world.repo(), "a", "b")
    h.cycle()
    h.move("p/a1", "Running", "a")
    h.cycle()
    world.remove("p/a1")
    del world.queues["gpu-a"], world.clusters["a"]
    h.repo = world.repo("v2")
    result = h.cycle()
    state = result.states["p/a1"]
    assert state.phase is Phase.RUNNING
    assert state.message == "cluster a not in the config; last seen Running"
    assert h.clusters["a"].calls == ["create p/p-a1-g1"]  # nothing after it


def test_a_distributed_op_is_created_with_its_service_and_deleted_with_it() -> None:
    """One Create carries the Indexed Job and its headless Service; a prune deletes both
    (``delete_workload`` removes the Job and the Service of that name)."""
    world = World().queue("team-a", quota={"nvidia.com/gpu": 4})
    world.op("p/ddp", gpu=2).replicas(2)
    world.op("p/next", gpu=1)
    world.with_org(prune=True, allow_mass_prune=True)
    h = Harness(world.repo())
    first = h.cycle()
    assert first.dispatched == ("p/ddp",)  # 4 GPUs taken whole: p/next waits
    assert h.clusters["local"].calls == ["create p/p-ddp-g1", "create Service p/p-ddp-g1"]
    job = h.clusters["local"].jobs[h.job("p/ddp")]
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["parallelism"] == 2
    assert first.plan is not None
    (waiting,) = first.plan.pending
    assert (waiting.operation, str(waiting.reason)) == ("p/next", "QuotaExceeded")
    # the next cycle counts the Job it observes as the whole gang: still 4 GPUs held
    h.move("p/ddp", "Running")
    second = h.cycle()
    assert second.plan is not None and second.plan.queues[0].used[GPU] == 4
    assert second.states["p/ddp"].pods == 2
    h.repo = world.remove("p/ddp").repo("v2")
    third = h.cycle()
    assert third.stopped == ("p/ddp",)
    assert "delete p/p-ddp-g1" in h.clusters["local"].calls
    assert third.dispatched == ("p/next",)
    # the Job is gone: an Event says why (a dispatch sends none)
    h.reconciler.close()  # sends the Events still queued
    assert h.clusters["local"].events == [
        (
            "p-ddp-g1",
            "RemovedFromRepo",
            "operation p/ddp is no longer in the repo at config v2: deleted",
        )
    ]


def test_the_template_falls_back_to_a100_and_borrows_idle_team_b_h100s() -> None:
    """The example config's flavors: team-a has 1 H100 then 1 A100. sweep-lr-0 (either
    product) takes the H100 and sweep-lr-1 falls back to the A100; train-vit (timeout 1h)
    borrows one of team-b's idle H100s (team-b's ops pin A100); the 12h-timeout ops never
    borrow, and train-resnet (pinned A100) waits for a100 quota while h100 quota is free.
    train-ddp (2 x A100, 1h) borrows team-b's A100 once team-b's own A100 work is done.
    ``reconciler demo`` prints those lines and the per-flavor cells."""
    from support.paths import TEMPLATE

    from reconciler.adapters.repo import snapshot_worktree
    from reconciler.cli.demo_cmd import borrowing_lines, flavor_lines, queue_rows, queue_table
    from reconciler.core.compile import compile_repo

    h = Harness(compile_repo(snapshot_worktree(TEMPLATE)))
    first = h.cycle()
    assert first.plan is not None
    flavors = {d.operation: d.flavor for d in first.plan.dispatch if d.queue == "team-a"}
    assert flavors == {
        "vision/sweep-lr-0": "h100",
        "vision/sweep-lr-1": "a100",
        "vision/train-vit": "h100",
    }
    assert flavor_lines(first) == [
        "vision/sweep-lr-1 falls back to flavor a100 of team-a: h100 has no room"
    ]
    assert borrowing_lines(first) == [
        "team-a borrows nvidia.com/gpu (h100) from cohort gpu-pool: 1 above its quota "
        "(team-b lends 1)"
    ]
    rows = {row[0]: row for row in queue_rows(first)}
    assert rows["team-a"][4] == ("h100: nvidia.com/gpu 2/1 (+1 borrowed); a100: nvidia.com/gpu 1/1")
    assert rows["team-b"][4] == "h100: nvidia.com/gpu 0/2 (1 lent); a100: nvidia.com/gpu 2/2"
    assert queue_table(first).row_count == 6  # the template's six queues
    pending = {p.operation: p.reason for p in first.plan.pending if p.queue == "team-a"}
    assert pending == {
        "vision/sweep-lr-2": PendingReason.BORROWING_NOT_ALLOWED,  # 12h: never borrows
        "vision/train-resnet": PendingReason.QUOTA_EXCEEDED,  # a100 only, and it is taken
        "vision/train-ddp": PendingReason.QUOTA_EXCEEDED,  # team-b's A100s are all in use
    }
    fake = h.clusters["local"]
    dispatched: dict[str, str | None] = {}
    for _ in range(4):
        for namespace, name in list(fake.jobs):
            fake.set_phase(namespace, name, "Succeeded")
        later = h.cycle()
        assert later.plan is not None
        dispatched.update({d.operation: d.flavor for d in later.plan.dispatch})
        if "vision/train-ddp" in dispatched:
            assert borrowing_lines(later) == [
                "team-a borrows nvidia.com/gpu (a100) from cohort gpu-pool: 1 above its "
                "quota (team-b lends 1)"
            ]
            break
    assert dispatched["vision/train-ddp"] == "a100"
    assert dispatched["vision/train-resnet"] == "a100"
    assert {dispatched[f"language/{op}"] for op in ("finetune", "pretrain")} == {"a100"}


def test_the_demo_says_a_queue_borrows_when_another_create_of_its_cycle_failed() -> None:
    """Borrowing is what the cycle's states hold above what the plan observed: a failed
    create elsewhere (the report recounts its queues) does not hide it."""
    from reconciler.cli.demo_cmd import borrowing_lines

    world = (
        World()
        .cohort("gpu-pool", "2h")
        .queue("team-a", priority=100, quota={GPU: 2}, cohort="gpu-pool", borrowing_limit={GPU: 2})
        .queue("team-b", priority=90, quota={GPU: 4}, cohort="gpu-pool")
    )
    world.op("p/a", queue="team-a", gpu=2)
    world.op("p/b", queue="team-a", gpu=2).timeout("1h")  # borrows: ends within 2h
    world.op("p/bad", queue="team-b", gpu=1)
    h = Harness(world.repo())
    h.clusters["local"].invalid.add("p-bad-g1")
    result = h.cycle()
    assert result.dispatched == ("p/a", "p/b") and set(result.failed) == {"p/bad"}
    assert borrowing_lines(result) == [
        "team-a borrows nvidia.com/gpu from cohort gpu-pool: 2 above its quota (team-b lends 2)"
    ]


def test_a_flavor_is_rendered_read_back_and_counted_in_its_own_flavor() -> None:
    # h100 first (1 GPU), a100 next (2): the second op falls back to a100, and the next
    # cycle reads each run's flavor from its Job, so a third 1-GPU op fits nowhere
    world = World().queue("team-a").flavored("team-a", ("h100", {"gpu": 1}), ("a100", {"gpu": 2}))
    for op in ("p/a", "p/b", "p/c", "p/d"):
        world.op(op, queue="team-a", gpu=1)
    h = Harness(world.repo())
    first = h.cycle()
    assert first.dispatched == ("p/a", "p/b", "p/c")
    jobs = h.clusters["local"].jobs
    flavor_of = {
        name: (
            job["metadata"]["labels"].get("reconciler.dev/flavor"),
            job["spec"]["template"]["spec"].get("nodeSelector"),
        )
        for (_, name), job in jobs.items()
    }
    assert flavor_of == {
        "p-a-g1": ("h100", {"nvidia.com/gpu.product": "h100"}),
        "p-b-g1": ("a100", {"nvidia.com/gpu.product": "a100"}),
        "p-c-g1": ("a100", {"nvidia.com/gpu.product": "a100"}),
    }
    for op in ("p/a", "p/b", "p/c"):
        h.move(op, "Running")
    second = h.cycle()
    assert {op: second.states[op].flavor for op in ("p/a", "p/b", "p/c")} == {
        "p/a": "h100",
        "p/b": "a100",
        "p/c": "a100",
    }
    assert second.dispatched == ()
    h.move("p/b", "Succeeded")  # an a100 GPU frees: p/d takes it, as a100
    third = h.cycle()
    assert third.dispatched == ("p/d",)
    assert jobs[h.job("p/d")]["metadata"]["labels"]["reconciler.dev/flavor"] == "a100"


def test_no_collection_runs_between_the_config_read_and_the_creates_sent() -> None:
    """The compile's and decide's own pauses would each end with a collection of what they
    leave alive, on the way to the first create: the cycle holds the collector until every
    create is handed to the pool."""

    h = Harness(team_a("p/a", "p/b").repo())
    render = cycle_module.render_operation
    enabled: list[bool] = []

    def noting(*args: Any, **kwargs: Any) -> Any:
        enabled.append(gc.isenabled())
        return render(*args, **kwargs)

    assert gc.isenabled()
    with mock.patch.object(cycle_module, "render_operation", noting):
        result = h.cycle()
    assert result.dispatched and enabled == [False] * len(result.dispatched)
    assert gc.isenabled()
