"""``run.distributed.backend: pytorchjob`` run by the runtime: the PyTorchJob is created,
listed (a fresh list and the watch cache), observed from its conditions and the pods the
Kubeflow Training Operator creates, annotated with its phase, stopped by its queue's
``startTimeout``, pruned, adopted after a restart, recorded in the status branch and its
replicas' logs read. Against the fake Kube, whose PyTorchJob status and pods are written
as the operator v1.8.1 writes them; the dev-cluster version is
tests/cluster/test_pytorchjob_runtime.py."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import pytest
from support.builders import NOW, World
from support.clocks import SteppedClock
from support.fake_kube import ENDED, STARTED, FakeCluster, FakeCycles, FakeKube

from reconciler.cli.logs_cmd import Target, show_logs
from reconciler.core.decision.cycle import memory_from_status
from reconciler.core.decision.render import ANNOTATION_PHASE, ANNOTATION_PHASE_REASON
from reconciler.core.decision.trigger import Trigger, event_trigger
from reconciler.core.observation.observe import ObservedReason, observe_workloads
from reconciler.core.reporting.status import operation_path, read_status
from reconciler.core.types import (
    CompiledRepo,
    Distributed,
    DistributedBackend,
    Phase,
)

GPU = "nvidia.com/gpu"
NAME = "p-train-g1"


class Harness(FakeCycles):
    """Cycles over a cluster that serves PyTorchJobs (unless ``cluster`` is given)."""

    def __init__(
        self,
        repo: CompiledRepo,
        cluster: FakeCluster | None = None,
        *,
        watch: bool = False,
        clock: SteppedClock | None = None,
    ) -> None:
        super().__init__(repo, cluster, backends={"pytorchjob"}, watch=watch, clock=clock)


def world(start_timeout: int | None = None, replicas: int = 4) -> World:
    w = World().queue("gpu", quota={GPU: 16})
    w.set_queue("gpu", start_timeout=start_timeout)
    pytorchjob = Distributed(backend=DistributedBackend.PYTORCHJOB)
    w.op("p/train").requests(gpu=2).replicas(replicas, pytorchjob).container(gpu=2)
    return w


def test_dispatch_creates_the_pytorchjob_and_counts_it_from_the_create_response() -> None:
    h = Harness(world().repo())
    result = h.cycle()
    assert result.dispatched == ("p/train",)
    assert h.cluster.calls == [f"create PyTorchJob p/{NAME}"]
    assert not h.cluster.jobs  # no Job, no Service: the operator makes its own
    obj = h.cluster.pytorchjobs[("p", NAME)]
    specs = obj["spec"]["pytorchReplicaSpecs"]
    assert (specs["Master"]["replicas"], specs["Worker"]["replicas"]) == (1, 3)
    state = result.states["p/train"]
    assert (state.kind, state.phase, state.pods) == ("PyTorchJob", Phase.DISPATCHED, 4)
    assert h.reconciler.memory.seen["p/train"].kind == "PyTorchJob"
    h.reconciler.close()
    assert h.cluster.events == []  # a dispatch sends no Event (docs/runtime.md, "Events")
    # listed next cycle: observed, not created again; the quota counts all 4 replicas
    again = h.cycle(after=1)
    assert again.dispatched == () and h.cluster.calls == [f"create PyTorchJob p/{NAME}"]
    listed = again.states["p/train"]
    assert (listed.kind, listed.uid) == ("PyTorchJob", f"uid-{NAME}")
    assert listed.requests == {GPU: Decimal(8)}
    assert (listed.reason, listed.message) == (
        ObservedReason.PENDING_POD,
        "waiting for the operator's pods",
    )


def test_its_phases_follow_the_operator_pods_and_conditions() -> None:
    h = Harness(world().repo())
    h.cycle()
    h.cluster.set_pytorchjob_condition("p", NAME, "Created", at=STARTED)
    h.cluster.set_operator_pods("p", NAME, placed=3, running=3)
    waiting = h.cycle(after=5).states["p/train"]
    assert (waiting.phase, waiting.reason) == (
        Phase.DISPATCHED,
        ObservedReason.WAITING_FOR_CAPACITY,
    )
    assert waiting.message == (
        "3 of 4 pods placed; 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    )
    assert waiting.gang is not None and waiting.gang.running == 3

    h.cluster.set_operator_pods("p", NAME, placed=4, running=4)
    h.cluster.set_pytorchjob_condition("p", NAME, "Running", at=STARTED)
    running = h.cycle(after=5).states["p/train"]
    assert (running.phase, running.reason) == (Phase.RUNNING, None)
    assert (running.pod, running.node) == (f"{NAME}-master-0", "gpu-node-0")
    assert running.started_at == STARTED

    h.cluster.set_pytorchjob_condition(
        "p",
        NAME,
        "Restarting",
        "PyTorchJob p-train-g1 is restarting because 1 Worker replica(s) failed.",
    )
    restarting = h.cycle(after=5).states["p/train"]
    assert (restarting.phase, restarting.reason) == (Phase.RUNNING, ObservedReason.RESTARTING)
    assert "1 Worker replica(s) failed" in restarting.message

    h.cluster.set_pytorchjob_condition("p", NAME, "Succeeded", at=ENDED)
    done = h.cycle(after=5)
    state = done.states["p/train"]
    assert (state.phase, state.reason) == (Phase.SUCCEEDED, ObservedReason.COMPLETED)
    assert state.finished_at == ENDED  # the Succeeded condition's time, not when seen
    (entry,) = list(h.reconciler.memory.ledger)
    assert (entry.workload, entry.phase) == (NAME, "Succeeded")
    assert (entry.start.isoformat(), entry.end.isoformat()) == (
        "2026-01-01T11:00:00+00:00",
        "2026-01-01T11:40:00+00:00",
    )
    assert entry.requests == {GPU: Decimal(8)}


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (
            "Job p-train-g1 has failed because it has reached the specified backoff limit",
            ObservedReason.BACKOFF_LIMIT_EXCEEDED,
        ),
        (
            "Job p-train-g1 has failed because it was active longer than specified deadline",
            ObservedReason.DEADLINE_EXCEEDED,
        ),
        (
            "PyTorchJob p-train-g1 is failed because 1 Worker replica(s) failed.",
            ObservedReason.JOB_FAILED,
        ),
    ],
)
def test_a_failed_condition_says_why(message: str, reason: ObservedReason) -> None:
    h = Harness(world().repo())
    h.cycle()
    h.cluster.set_pytorchjob_condition("p", NAME, "Failed", message, at=ENDED)
    state = h.cycle(after=1).states["p/train"]
    assert (state.phase, state.reason, state.message) == (Phase.FAILED, reason, message)
    assert state.finished_at == ENDED


def test_the_phase_annotation_is_written_on_the_pytorchjob() -> None:
    h = Harness(world().repo())
    h.cycle()
    h.cluster.set_operator_pods("p", NAME, placed=3, running=3)
    h.cycle(after=1)  # waits for room: written
    assert h.reconciler.wait_writes(5)
    annotations = h.cluster.pytorchjobs[("p", NAME)]["metadata"]["annotations"]
    assert (annotations[ANNOTATION_PHASE], annotations[ANNOTATION_PHASE_REASON]) == (
        "Dispatched",
        "WaitingForCapacity",
    )
    h.cluster.set_operator_pods("p", NAME, placed=4, running=4)
    h.cycle(after=1)  # runs: the phase written before is brought up to date
    assert h.reconciler.wait_writes(5)
    annotations = h.cluster.pytorchjobs[("p", NAME)]["metadata"]["annotations"]
    assert annotations[ANNOTATION_PHASE] == "Running"
    assert h.cluster.calls.count(f"annotate p/{NAME}") == 2


def test_start_timeout_deletes_the_pytorchjob_and_its_pods() -> None:
    h = Harness(world(start_timeout=60).repo())
    h.cycle()
    h.cluster.set_operator_pods("p", NAME, placed=3, running=3)
    assert h.bound_gpus() == 6
    stopped = h.cycle(after=61)
    assert stopped.stopped == ("p/train",)
    state = stopped.states["p/train"]
    assert (state.phase, state.reason) == (Phase.STOPPED, ObservedReason.GANG_TIMEOUT)
    assert state.message.startswith("3 of 4 pods placed, 3 running after startTimeout 60s")
    assert f"delete PyTorchJob p/{NAME}" in h.cluster.calls
    assert ("p", NAME) not in h.cluster.pytorchjobs
    assert h.bound_gpus() == 0  # no GPU stays held
    assert h.cycle(after=1).dispatched == ("p/train",)  # re-queued once
    h.reconciler.close()  # sends the Events still queued
    ((name, reason, message),) = h.cluster.events  # why the PyTorchJob is gone
    assert (name, reason) == (NAME, "GangTimeout")
    assert message.startswith("operation p/train: 3 of 4 pods placed, 3 running after")


def test_an_operation_removed_from_the_repo_has_its_pytorchjob_pruned() -> None:
    w = world()
    w.with_org(prune=True, allow_mass_prune=True)
    h = Harness(w.repo("c0"))
    h.cycle()
    h.cluster.set_operator_pods("p", NAME, placed=4, running=4)
    w.remove("p/train")
    h.repo = w.repo("c1")
    pruned = h.cycle(after=1)
    assert pruned.stopped == ("p/train",)
    assert h.cluster.calls[-1] == f"delete PyTorchJob p/{NAME}"
    assert ("p", NAME) not in h.cluster.pytorchjobs
    assert not h.cluster.pods


def test_a_restart_adopts_the_pytorchjob_through_the_status_branch() -> None:
    h = Harness(world().repo())
    first = h.cycle()
    assert first.plan is not None
    files = h.status_of(first)
    record = files[operation_path("p/train")].decode()
    assert "workloadKind: PyTorchJob" in record
    memory = memory_from_status(read_status(files))
    assert memory.seen["p/train"].kind == "PyTorchJob"
    # a new process on the same cluster: it sees the PyTorchJob and never creates another
    restarted = h.restart(files)
    h.cluster.set_operator_pods("p", NAME, placed=4, running=4)
    again = restarted.cycle(after=1)
    assert again.dispatched == () and again.adopted == ()
    assert again.states["p/train"].phase is Phase.RUNNING
    assert [c for c in h.cluster.calls if not c.startswith("annotate")] == [
        f"create PyTorchJob p/{NAME}"
    ]
    # a create that races an existing object adopts it (AlreadyExists)
    h.cluster.pytorchjobs.clear()
    h.cluster.add_pytorchjob(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": NAME, "namespace": "p"},
        }
    )
    result = FakeKube(h.cluster).create_or_adopt(
        {"kind": "PyTorchJob", "metadata": {"name": NAME, "namespace": "p"}}
    )
    assert (result.kind, result.created) == ("PyTorchJob", False)


def test_a_cluster_without_the_crd_lists_no_pytorchjobs_and_is_reachable() -> None:
    w = World().queue("gpu", quota={GPU: 16})
    w.op("p/plain", gpu=1)
    h = Harness(w.repo(), FakeCluster("local"))
    result = h.cycle()
    assert result.dispatched == ("p/plain",)
    assert all(c.reachable for c in result.clusters)


def test_the_watch_cache_lists_pytorchjobs_and_their_end_wakes_the_loop() -> None:
    woken: list[Trigger] = []
    h = Harness(world().repo(), watch=True)
    h.reconciler._on_trigger = woken.append
    try:
        h.cycle()
        h.cluster.set_operator_pods("p", NAME, placed=4, running=4)
        h.cluster.set_pytorchjob_condition("p", NAME, "Succeeded", at=ENDED)
        deadline = time.monotonic() + 5
        while Trigger.FINISHED not in woken and time.monotonic() < deadline:
            time.sleep(0.01)
        assert Trigger.FINISHED in woken
        result = h.cycle(after=1)
        assert result.states["p/train"].phase is Phase.SUCCEEDED
        informers = h.reconciler._informers["local"]
        assert [i.kind for i in informers] == ["Job", "Pod", "PyTorchJob"]
        assert informers[2].served and informers[2].healthy
    finally:
        h.reconciler.close()
        h.cluster.close()


def test_a_watch_cache_of_an_unserved_kind_is_empty_and_synced() -> None:
    w = World().queue("gpu", quota={GPU: 16})
    w.op("p/plain", gpu=1)
    cluster = FakeCluster("local")
    h = Harness(w.repo(), cluster, watch=True)
    try:
        result = h.cycle()
        assert result.dispatched == ("p/plain",)
        informer = h.reconciler._informers["local"][2]
        assert informer.healthy and not informer.served and informer.items() == ()
    finally:
        h.reconciler.close()
        cluster.close()


def test_trigger_on_pytorchjob_events() -> None:
    running = {"metadata": {}, "status": {"conditions": [{"type": "Running", "status": "True"}]}}
    done = {"metadata": {}, "status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}
    failed = {"metadata": {}, "status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    assert event_trigger("PyTorchJob", "MODIFIED", running, done) is Trigger.FINISHED
    assert event_trigger("PyTorchJob", "MODIFIED", running, failed) is Trigger.FAILED
    assert event_trigger("PyTorchJob", "MODIFIED", done, done) is None
    assert event_trigger("PyTorchJob", "MODIFIED", None, running) is None
    assert event_trigger("PyTorchJob", "DELETED", running, running) is Trigger.DELETED


def test_a_single_replica_pytorchjob_is_no_gang() -> None:
    h = Harness(world(replicas=1).repo())
    h.cycle()
    assert "Worker" not in h.cluster.pytorchjobs[("p", NAME)]["spec"]["pytorchReplicaSpecs"]
    h.cluster.set_operator_pods("p", NAME, placed=1, running=1)
    (state,) = observe_workloads(
        "local",
        (),
        list(h.cluster.pods.values()),
        list(h.cluster.pytorchjobs.values()),
    )
    assert (state.phase, state.gang, state.pods) == (Phase.RUNNING, None, 1)


def test_logs_read_a_replica_from_its_pytorch_container() -> None:
    h = Harness(world().repo())
    h.cycle()
    h.cluster.set_operator_pods("p", NAME, placed=4, running=4)
    reads: list[tuple[str, str]] = []
    kube = FakeKube(h.cluster)
    original = kube.read_logs

    def read_logs(namespace: str, pod: str, container: str = "main", **kw: Any) -> str:
        reads.append((pod, container))
        return original(namespace, pod, container, **kw)

    kube.read_logs = read_logs  # type: ignore[method-assign]
    out: list[str] = []
    target = Target("p/train", None, "p")
    show_logs(target, kube, False, None, echo=lambda s, nl=True: out.append(s), replica=2)  # type: ignore[arg-type]
    show_logs(target, kube, False, None, echo=lambda s, nl=True: out.append(s))  # type: ignore[arg-type]
    assert out == ["log of replica 2\n", "log of replica 0\n"]
    assert reads == [(f"{NAME}-worker-1", "pytorch"), (f"{NAME}-master-0", "pytorch")]


def test_the_listing_version_is_the_older_of_the_job_and_pytorchjob_caches() -> None:
    """A PyTorchJob created at resourceVersion 150 counts from its create response until
    the PyTorchJob cache is past 150, however far the Job cache has gone."""
    from reconciler.runtime.cycle import _listed_version
    from reconciler.runtime.informer import Informer

    jobs = Informer(FakeKube(FakeCluster("x")), "Job")  # type: ignore[arg-type]
    pytorchjobs = Informer(FakeKube(FakeCluster("x")), "PyTorchJob")  # type: ignore[arg-type]
    jobs._version, pytorchjobs._version = "200", "120"
    assert _listed_version(jobs, pytorchjobs) == "120"
    pytorchjobs.served = False  # the cluster does not serve it: nothing to wait for there
    assert _listed_version(jobs, pytorchjobs) == "200"


def test_a_created_pytorchjob_the_cache_has_not_shown_yet_still_counts() -> None:
    """The Job cache is past the create, the PyTorchJob cache is not: the run is in
    flight, never "deleted by hand"."""
    from reconciler.core.decision.cycle import ClusterListing, decide

    h = Harness(world().repo())
    first = h.cycle()
    created = h.reconciler.memory.inflight["p/train"].resource_version
    later = str(int(created) + 50)
    with_job_cache_only = {
        "local": ClusterListing(version=later, backends=frozenset({"pytorchjob"}))
    }
    seen_too_late = decide(h.repo, with_job_cache_only, h.reconciler.memory, NOW)
    assert seen_too_late.states["p/train"].phase is Phase.STOPPED  # why the version matters
    older = {
        "local": ClusterListing(version=str(int(created) - 1), backends=frozenset({"pytorchjob"}))
    }
    counted = decide(h.repo, older, h.reconciler.memory, NOW)
    assert counted.states["p/train"].phase is Phase.DISPATCHED
    assert first.states["p/train"].uid == counted.states["p/train"].uid


def test_the_operation_page_reads_the_masters_pytorch_container() -> None:
    from reconciler.runtime.web import WebApp

    h = Harness(world().repo())
    h.cycle()
    h.cluster.set_operator_pods("p", NAME, placed=4, running=4)
    result = h.cycle(after=1)
    asked: list[tuple[str, str]] = []

    def read_logs(cluster: str, namespace: str, pod: str, tail: int, container: str) -> str:
        asked.append((pod, container))
        return "epoch 1\n"

    app = WebApp(lambda: result, read_logs=read_logs)
    answer = app("/operations/p/train")
    assert answer is not None and answer[0] == 200
    assert "epoch 1" in answer[1].decode()
    assert asked == [(f"{NAME}-master-0", "pytorch")]
