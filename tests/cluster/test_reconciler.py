"""The reconciler against the real control plane, on the example config repo."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cluster import KubeCluster
from support.helpers import wait_until
from support.reconciler_env import (
    active_by_queue,
    clean_workloads,
    commit_all,
    make_long_running,
    make_reconciler,
    run_once,
    second_cluster,
    start_run,
)

from reconciler.adapters.kube import Kube
from reconciler.core.decision.render import LABEL_QUEUE
from reconciler.core.observation.observe import ObservedReason, WorkloadState
from reconciler.core.reporting.status import operation_path
from reconciler.core.types import Phase

pytestmark = pytest.mark.cluster

TERMINAL = ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget")
# Active ops at most, per queue: GPU quota (per flavor: team-a 1 H100 + 1 A100, team-b 2 + 2)
# of 1-GPU ops, plus what team-a may borrow of team-b's idle GPUs (1 per flavor, cohort
# gpu-pool: its ops with a timeout of at most 2h, train-vit and train-ddp); batch: its
# concurrency. Never the cohort above its 6 GPUs.
CAPS = {"team-a": 4, "team-b": 4, "batch": 3}
# the first cycle: team-a its H100 and A100 (sweep-lr-0, sweep-lr-1) and a borrowed H100
# (train-vit); team-b's ops pin A100, so 2; batch 3
FIRST = {"team-a": 3, "team-b": 2, "batch": 3}
COHORT = ("team-a", "team-b")


class Sampler(threading.Thread):
    """Lists managed Jobs continuously and records the most active per queue ever seen."""

    def __init__(self, kube: Kube) -> None:
        super().__init__(daemon=True)
        self.kube = kube
        self.peak: dict[str, int] = {}
        self.samples = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            counts: dict[str, int] = {}
            for job in self.kube.list_managed("Job").items:
                if _finished(job):
                    continue
                queue = job["metadata"]["labels"][LABEL_QUEUE]
                counts[queue] = counts.get(queue, 0) + 1
            counts["(cohort)"] = sum(counts.get(q, 0) for q in COHORT)
            for queue, n in counts.items():
                self.peak[queue] = max(self.peak.get(queue, 0), n)
            self.samples += 1
            time.sleep(0.1)


def _finished(job: Mapping[str, Any]) -> bool:
    """A terminal Job condition, the same test the reconciler's observation uses."""
    return any(
        c.get("status") == "True" and c.get("type") in TERMINAL
        for c in (job.get("status") or {}).get("conditions") or []
    )


def _active_jobs(kube: Kube, queue: str) -> int:
    return sum(
        1
        for job in kube.list_managed("Job").items
        if job["metadata"]["labels"][LABEL_QUEUE] == queue and not _finished(job)
    )


def test_seed_example_flows_to_completion_within_limits(kube: Kube, config_repo: Path) -> None:
    reconciler = make_reconciler(config_repo)
    sampler = Sampler(kube)
    sampler.start()
    try:
        first = reconciler.run_once()
        assert first.ok, first
        for queue, count in FIRST.items():
            assert _active_jobs(kube, queue) == count, queue
        pending_team_a = [p for p in first.plan.pending if p.queue == "team-a"]
        at = first.plan.positions()
        assert [(p.reason.value, at[p.operation]) for p in pending_team_a] == [
            ("BorrowingNotAllowed", 1),  # sweep-lr-2: both flavors full, a 12h timeout
            ("QuotaExceeded", 2),
            ("QuotaExceeded", 3),
        ]
        total = len(first.compiled.operations)
        deadline = time.monotonic() + 240
        result = first
        while time.monotonic() < deadline:
            time.sleep(1)
            result = reconciler.run_once()
            assert result.ok, result
            active = active_by_queue(result)
            for queue, cap in CAPS.items():
                assert active.get(queue, 0) <= cap, (queue, active)
            # each flavor within its quota and what it may borrow
            for q in result.plan.queues:
                spec = result.compiled.queues[q.name]
                for used, flavor in zip(q.flavors, spec.flavors, strict=True):
                    for r, amount in used.used_after.items():
                        most = flavor.quota.get(r, 0) + flavor.borrowing_limit.get(r, 0)
                        assert amount <= most, (q.name, flavor.name, r, amount)
            concurrency = [
                p
                for p in result.plan.pending
                if p.queue == "batch" and p.reason.value == "QueueConcurrencyLimit"
            ]
            if concurrency:  # a freed slot is refilled in the same cycle that sees it free
                assert active.get("batch", 0) >= 3, (active, concurrency)
            assert sum(active.get(q, 0) for q in COHORT) <= 6
            if sum(s.phase is Phase.SUCCEEDED for s in result.states.values()) == total:
                break
        done = {op: s.phase for op, s in result.states.items()}
        assert done == {op.id: Phase.SUCCEEDED for op in first.compiled.operations}
        assert reconciler.wait_writes(30.0)  # the phase annotations, written off the cycle
        finished = kube.batch.read_namespaced_job("vision-sweep-lr-0-g1", "team-a")
        assert finished.metadata.annotations["reconciler.dev/phase"] == "Succeeded"
    finally:
        sampler.halt.set()
        sampler.join()
    assert sampler.samples > 20
    for queue, cap in CAPS.items():
        assert sampler.peak.get(queue, 0) <= cap, (queue, sampler.peak)
    assert sampler.peak["(cohort)"] <= 6
    assert sampler.peak["team-a"] >= 3 and sampler.peak["team-b"] == 2  # team-b: A100s only


def test_rerun_is_idempotent_and_priority_or_quota_changes_touch_nothing_running(
    kube: Kube, config_repo: Path
) -> None:
    make_long_running(config_repo, "vision")
    reconciler = make_reconciler(config_repo)
    reconciler.run_once()
    assert reconciler.wait_writes(30.0)  # the phase annotations, written off the cycle
    before = {j["metadata"]["name"]: j["metadata"]["uid"] for j in kube.list_managed("Job").items}
    assert before
    job = kube.batch.read_namespaced_job("vision-sweep-lr-0-g1", "team-a")
    # what a user reads of the dispatch is on the Job; no phase is written while it runs
    assert job.metadata.labels["reconciler.dev/queue"] == "team-a"
    assert {"reconciler.dev/config-commit", "reconciler.dev/dispatched-at"} <= set(
        job.metadata.annotations
    )
    assert "reconciler.dev/phase" not in job.metadata.annotations

    def once_the_controller_made_the_pod() -> list[Any]:
        events = kube.core.list_namespaced_event(
            "team-a", field_selector=f"involvedObject.uid={job.metadata.uid}"
        ).items
        return list(events) if any(e.reason == "SuccessfulCreate" for e in events) else []

    # the Job controller's Event says it made the pod; the reconciler sends none of its own
    events = wait_until(
        once_the_controller_made_the_pod,
        timeout=30,
        what="the Job controller's SuccessfulCreate Event",
    )
    assert not [e for e in events if "dispatch-reconciler" in (e.reporting_component or "")]

    again = make_reconciler(config_repo).run_once()  # a fresh process: adopts, never duplicates
    assert again.dispatched == ()
    queue = config_repo / "queues" / "team-a.yaml"
    queue.write_text(
        queue.read_text()
        .replace("priority: 100", "priority: 1000")
        .replace("quota: {nvidia.com/gpu: 1}", "quota: {nvidia.com/gpu: 0}", 1)  # its H100
    )
    commit_all(config_repo, "team-a: higher priority, no H100 of its own")
    result = reconciler.run_once()
    assert result.ok and result.stopped == ()
    after = {j["metadata"]["name"]: j["metadata"]["uid"] for j in kube.list_managed("Job").items}
    assert {k: after[k] for k in before} == before  # same Jobs, same uids: nothing restarted
    team_a = [p for p in result.plan.pending if p.queue == "team-a"]
    assert team_a and not [d for d in result.plan.dispatch if d.queue == "team-a"]
    assert {p.reason.value for p in team_a} <= {"QuotaExceeded", "BorrowingNotAllowed"}


def test_dispatch_is_not_placement(kube: Kube, config_repo: Path) -> None:
    (config_repo / "queues" / "big.yaml").write_text(
        "kind: Queue\nname: big\ncluster: local\npriority: 1000\nkinds: [job]\n"
    )
    project = config_repo / "projects" / "vision" / "project.yaml"
    project.write_text(project.read_text().replace("allowedQueues: [", "allowedQueues: [big, "))
    (config_repo / "projects" / "vision" / "operations" / "huge.yaml").write_text(
        "kind: Operation\nname: huge\nqueue: big\n"
        "run:\n  container:\n    resources:\n      limits: {nvidia.com/gpu: 8}\n"
    )
    commit_all(config_repo, "an op asking for more GPUs than any node has")
    reconciler = make_reconciler(config_repo)
    first = reconciler.run_once()
    assert "vision/huge" in first.dispatched  # the queue admits it: dispatch is not placement

    def unschedulable() -> WorkloadState | None:
        state = reconciler.run_once().states.get("vision/huge")
        if state is not None and state.reason is ObservedReason.WAITING_FOR_CAPACITY:
            return state
        return None

    waiting = wait_until(unschedulable, timeout=60, what="vision/huge to be Unschedulable")
    assert waiting.phase is Phase.DISPATCHED
    assert "Insufficient nvidia.com/gpu" in waiting.message
    # the Job says only that it is active: the reconciler writes why it waits onto it
    assert reconciler.wait_writes(30.0)
    annotations = kube.batch.read_namespaced_job(
        waiting.name, waiting.namespace
    ).metadata.annotations
    assert (annotations["reconciler.dev/phase"], annotations["reconciler.dev/phase-reason"]) == (
        "Dispatched",
        "WaitingForCapacity",
    )
    assert reconciler.last is not None
    assert "vision/huge" not in {p.operation for p in reconciler.last.plan.pending}


def test_invalid_commit_changes_nothing_and_prune_stops_removed_ops(
    kube: Kube, config_repo: Path
) -> None:
    make_long_running(config_repo, "language")
    reconciler = make_reconciler(config_repo)
    good = reconciler.run_once()
    jobs = {j["metadata"]["uid"] for j in kube.list_managed("Job").items}
    assert "language/distill" in good.dispatched

    broken = config_repo / "queues" / "team-b.yaml"
    original = broken.read_text()
    broken.write_text("kind: Queue\nname: team-b\ncluster: [oops\n")
    (config_repo / "projects" / "language" / "operations" / "distill.yaml").unlink()
    commit_all(config_repo, "broken YAML and a deletion")
    bad = reconciler.run_once()
    assert bad.config_errors
    assert any(re.match(r"queues/team-b\.yaml:\d+:\d+: ", str(e)) for e in bad.config_errors)
    assert bad.version == good.version  # the last good config stays in force
    assert bad.stopped == () and bad.dispatched == ()
    assert {j["metadata"]["uid"] for j in kube.list_managed("Job").items} == jobs

    broken.write_text(original)
    commit_all(config_repo, "fix the queue; distill stays deleted")
    fixed = reconciler.run_once()
    assert not fixed.config_errors
    assert fixed.stopped == ("language/distill",)  # prune is on in the example org
    names = {j["metadata"]["name"] for j in kube.list_managed("Job").items}
    assert "language-distill-g1" not in names
    # the Job is gone; an Event says why
    stopped = fixed.states["language/distill"]
    events = wait_until(
        lambda: (
            kube.core.list_namespaced_event(
                stopped.namespace,
                field_selector=f"involvedObject.uid={stopped.uid},reason=RemovedFromRepo",
            ).items
        ),
        timeout=30,
        what="the RemovedFromRepo Event",
    )
    assert events[0].reporting_component == "dispatch-reconciler"
    assert "language/distill is no longer in the repo" in events[0].message


def test_a_job_deleted_by_hand_is_stopped_not_recreated(kube: Kube, config_repo: Path) -> None:
    make_long_running(config_repo, "vision")
    reconciler = make_reconciler(config_repo)
    first = reconciler.run_once()
    victim = first.states["vision/sweep-lr-1"]  # on team-a's A100
    kube.delete_workload(victim.namespace, victim.name)
    # The cycle reads the watch caches, which see the deletion a moment after it is made
    # (up to the watch's 50 ms gather): until they do, the Job still counts as Dispatched.
    # No cycle may create it again, and the one that sees it gone stops the operation.
    cycles = []

    def stopped() -> bool:
        cycles.append(reconciler.run_once())
        return cycles[-1].states["vision/sweep-lr-1"].phase is Phase.STOPPED

    wait_until(stopped, timeout=30, what="vision/sweep-lr-1 to be Stopped", interval=0.05)
    assert all("vision/sweep-lr-1" not in c.dispatched for c in cycles)
    assert victim.name not in {j["metadata"]["name"] for j in kube.list_managed("Job").items}
    # its quota (team-a's A100) is free again, so the next team-a op is dispatched there in
    # the same cycle
    assert "vision/sweep-lr-2" in cycles[-1].dispatched
    assert all("vision/sweep-lr-2" not in c.dispatched for c in cycles[:-1])


def test_kill_9_between_create_and_status_leaves_no_duplicates(
    kube: Kube, config_repo: Path, kube_cluster: KubeCluster
) -> None:
    def run(faults: str) -> subprocess.CompletedProcess[str]:
        return run_once(
            config_repo,
            kube_cluster.kubeconfig,
            env={**os.environ, "RECONCILER_FAULTS": faults},
        )

    def op_uids() -> dict[str, str]:
        jobs = kube.list_managed("Job").items
        ops = [j["metadata"]["annotations"]["reconciler.dev/operation-id"] for j in jobs]
        assert set(Counter(ops).values()) <= {1}  # never two workloads for one op
        return {op: j["metadata"]["uid"] for op, j in zip(ops, jobs, strict=True)}

    killed = run("after-create=3")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # died when its 3rd create returned; creates already in flight in the pool may land too
    before = op_uids()
    assert 3 <= len(before) <= 10, killed.stderr

    again = run("")
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    after = op_uids()
    assert {op: after[op] for op in before} == before  # observed, never recreated
    assert not set(summary["dispatched"]) & set(before)
    assert set(after) == set(before) | set(summary["dispatched"])  # nothing else created
    assert len(after) >= 10  # what the first cycle planned (more if a DAG step has finished)
    assert summary["ok"] is True
    assert all(summary["phases"][op] in ("Dispatched", "Running", "Succeeded") for op in after)


def _queues_of_jobs(kube: Kube) -> list[str]:
    jobs = sorted(kube.list_managed("Job").items, key=lambda j: j["metadata"]["creationTimestamp"])
    return [j["metadata"]["labels"][LABEL_QUEUE] for j in jobs]


def test_higher_priority_queues_go_first_on_a_capped_cluster(kube: Kube, config_repo: Path) -> None:
    cluster = config_repo / "clusters" / "local.yaml"
    cluster.write_text(cluster.read_text() + "concurrency: 3\n")
    commit_all(config_repo, "cap the cluster at 3 operations")
    first = make_reconciler(config_repo).run_once()
    assert [d.queue for d in first.plan.dispatch] == ["notebooks", "sandboxes", "team-a"]
    assert sorted(_queues_of_jobs(kube)) == ["notebooks", "sandboxes", "team-a"]
    held = {p.reason.value for p in first.plan.pending if p.queue == "team-b"}
    assert held == {"ClusterConcurrencyLimit"}

    clean_workloads(kube)
    queue = config_repo / "queues" / "team-b.yaml"
    queue.write_text(queue.read_text().replace("priority: 90", "priority: 1000"))
    commit_all(config_repo, "team-b first")
    second = make_reconciler(config_repo).run_once()
    # team-b's ops pin A100, and it has 2 of them: the third slot goes to the next queue
    assert [d.queue for d in second.plan.dispatch] == ["team-b", "team-b", "notebooks"]
    assert sorted(_queues_of_jobs(kube)) == ["notebooks", "team-b", "team-b"]


def test_queues_route_to_their_clusters_and_a_down_cluster_holds_only_its_queues(
    kube: Kube, config_repo: Path, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    if kube_cluster.dev is None:
        pytest.skip("starts a second dev cluster; needs the dev-cluster binaries")
    from reconciler.devcluster.shape import default_shape

    shape = default_shape(gpu_nodes=2, cpu_nodes=0)
    with second_cluster(tmp_path / "second", config_repo, shape) as (second, remote):
        queue = config_repo / "queues" / "team-b.yaml"
        queue.write_text(  # a cohort's queues share one cluster: team-b leaves gpu-pool
            re.sub(r"(?m)^cohort: .*\n", "", queue.read_text()).replace(
                "cluster: local", "cluster: remote"
            )
        )
        commit_all(config_repo, "team-b runs on the remote cluster")
        reconciler = make_reconciler(config_repo)
        result = reconciler.run_once()
        assert result.ok, result
        # its A100 flavor's 2 (its ops pin A100)
        assert set(_queues_of_jobs(remote)) == {"team-b"} and len(_queues_of_jobs(remote)) == 2
        assert "team-b" not in _queues_of_jobs(kube)

        second.down(progress=lambda _m: None)
        local_before = len(kube.list_managed("Job").items)
        (config_repo / "projects" / "vision" / "operations" / "extra.yaml").write_text(
            "kind: Operation\nname: extra\nqueue: batch\n"
        )
        commit_all(config_repo, "one more batch op while remote is down")
        # The cycle reads remote's watch caches until their watches fail (the apiserver's
        # shutdown ends them a moment after `down` returns): cycles until it is seen down.
        cycles = []

        def remote_down() -> bool:
            cycles.append(reconciler.run_once())
            return {h.name: h.reachable for h in cycles[-1].clusters} == {
                "local": True,
                "remote": False,
            }

        wait_until(remote_down, timeout=60, what="remote to be seen down", interval=0.2)
        down = cycles[-1]
        team_b = [op.id for op in down.compiled.operations if op.queue == "team-b"]
        for cycle in cycles:
            assert not any(d.cluster == "remote" for d in cycle.plan.dispatch)
            assert cycle.stopped == () and cycle.failed == {}
            # unseen, not Queued: a remote op is never re-dispatched or pruned while down
            assert not any(op in cycle.dispatched for op in team_b)
        # local queues go on, the new op dispatched once
        assert sum("vision/extra" in c.dispatched for c in cycles) == 1
        assert len(kube.list_managed("Job").items) > local_before


def test_watch_mode_replans_as_files_are_saved(
    kube: Kube, config_repo: Path, kube_cluster: KubeCluster
) -> None:
    proc = start_run(
        config_repo, kube_cluster.kubeconfig, subprocess.PIPE, "--watch", interval="300s"
    )
    try:
        wait_until(
            lambda: len(kube.list_managed("Job").items) == 10,
            timeout=60,
            what="the first plan's 10 Jobs",
        )
        # saved, never committed: --watch reads the files as they are on disk
        (config_repo / "queues" / "extra.yaml").write_text(
            "kind: Queue\nname: extra\ncluster: local\npriority: 5\nkinds: [job]\n"
        )
        project = config_repo / "projects" / "vision" / "project.yaml"
        project.write_text(
            project.read_text().replace("allowedQueues: [", "allowedQueues: [extra, ")
        )
        (config_repo / "projects" / "vision" / "operations" / "saved.yaml").write_text(
            "kind: Operation\nname: saved\nqueue: extra\n"
        )
        wait_until(
            lambda: (
                "vision-saved-g1" in {j["metadata"]["name"] for j in kube.list_managed("Job").items}
            ),
            timeout=30,
            what="the saved op to be dispatched long before the 300s interval",
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.returncode in (0, -signal.SIGTERM), (proc.stderr.read() if proc.stderr else "")[
        -4000:
    ]


def test_demo_runs_the_example_to_completion(
    kube: Kube, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    if kube_cluster.dev is None:
        pytest.skip("the demo drives the dev cluster")
    demo = subprocess.run(
        [
            sys.executable,
            "-m",
            "reconciler",
            "demo",
            "--workdir",
            str(tmp_path),
            "--state-dir",
            str(kube_cluster.dev.state_dir),
            "--interval",
            "1",
        ],  # type: ignore[attr-defined]
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert demo.returncode == 0, (demo.stdout + demo.stderr)[-3000:]
    # piped: plain lines on stdout, whole (no 80-column frames), no Python reprs
    lines = demo.stdout.splitlines()
    assert "operations: 19 (19 Succeeded)" in lines
    assert not any("…" in line or "{'" in line or "\x1b[" in line for line in lines)
    header = next(line for line in lines if line.lstrip().startswith("queue "))
    assert header.split()[:3] == ["queue", "cluster", "priority"]
    assert any(line.split()[:1] == ["team-a"] and "nvidia.com/gpu" in line for line in lines)
    jobs = {j["metadata"]["name"]: j for j in kube.list_managed("Job").items}
    assert "vision-train-vit-g1" in jobs
    # the distributed train-ddp: one Indexed Job of 2 pods, both succeeded
    ddp = jobs["vision-train-ddp-g1"]
    assert ddp["spec"]["completionMode"] == "Indexed" and ddp["spec"]["parallelism"] == 2
    assert ddp["status"].get("succeeded") == 2
    # the cohort at work: train-vit (timeout 1h) runs on an idle team-b H100, train-ddp
    # (2 x A100, team-a has 1) on an idle team-b A100
    for flavor in ("h100", "a100"):
        borrows = f"team-a borrows nvidia.com/gpu ({flavor}) from cohort gpu-pool"
        assert any(line.startswith(borrows) for line in lines), flavor
    # the fallback: sweep-lr-1 finds team-a's H100 taken by sweep-lr-0
    assert "vision/sweep-lr-1 falls back to flavor a100 of team-a: h100 has no room" in lines
    assert jobs["vision-sweep-lr-1-g1"]["metadata"]["labels"]["reconciler.dev/flavor"] == "a100"
    # the status branch's tip says what the summary says: the last cycle was written
    argv = ["status", "-o", "json", "--repo", str(tmp_path / "config")]
    status = subprocess.run(
        [sys.executable, "-m", "reconciler", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0, status.stderr[-3000:]
    recorded = json.loads(status.stdout)
    runs = [o for o in recorded["operations"] if not o.get("children")]
    assert Counter(o["phase"] for o in runs if o["phase"] != "Rejected") == {"Succeeded": 19}
    for queue in recorded["queues"]:
        assert queue["active"] == 0 and not any(
            v not in ("0", 0) for v in queue.get("used", {}).values()
        ), queue


def test_status_branch_one_commit_per_cycle_and_human_commits_kept(
    kube: Kube, config_repo: Path, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    from support.reconciler_env import git

    from reconciler.runtime.service import make_runtime

    runtime = make_runtime(str(config_repo), "main", {}, cache_dir=tmp_path / "cache")
    assert runtime.publisher is not None

    def cycle() -> None:
        runtime.on_cycle(runtime.reconciler.run_once())

    def status_log() -> list[str]:
        return git(config_repo, "log", "--format=%an|%s", "reconciler/status").splitlines()

    cycle()
    files = git(config_repo, "ls-tree", "-r", "--name-only", "reconciler/status").splitlines()
    assert "status/queues.yaml" in files and "status/config.yaml" in files
    assert operation_path("vision/sweep-lr-0") in files
    assert operation_path("language/distill") in files
    record = git(config_repo, "show", f"reconciler/status:{operation_path('vision/sweep-lr-0')}")
    assert "phase: Dispatched" in record and "workload: vision-sweep-lr-0-g1" in record
    assert "logs: reconciler logs vision/sweep-lr-0" in record
    queued = git(config_repo, "show", f"reconciler/status:{operation_path('vision/train-resnet')}")
    assert "reason: QuotaExceeded" in queued and "position" not in queued
    # its place in the queue is in the queue's order file, 3rd
    order = git(config_repo, "show", "reconciler/status:status/_queues/team-a.yaml")
    assert yaml.safe_load(order)["pending"].index("vision/train-resnet") == 2
    assert len(status_log()) == 1 and "dispatched 10" in status_log()[0]

    # a human commits a note onto the status branch while the reconciler runs
    note = tmp_path / "human"
    git(tmp_path, "clone", "-q", "--branch", "reconciler/status", str(config_repo), str(note))
    (note / "NOTES.md").write_text("on-call: keep an eye on team-a\n")
    git(note, "add", "NOTES.md")
    git(note, "commit", "-q", "-m", "human note")
    git(note, "push", "-q", "origin", "reconciler/status")

    wait_until(
        lambda: any(
            s.phase is Phase.SUCCEEDED for s in runtime.reconciler.run_once().states.values()
        ),
        timeout=60,
        what="a first op to finish",
    )
    before = len(status_log())
    cycle()
    log = status_log()
    assert len(log) == before + 1  # exactly one commit for the cycle
    assert any(line.endswith("|human note") for line in log)  # the human commit is kept
    assert "NOTES.md" in git(config_repo, "ls-tree", "--name-only", "reconciler/status")
    assert "finished" in log[0]


def test_spec_change_is_out_of_sync_and_a_generation_bump_reruns_within_quota(
    kube: Kube, config_repo: Path, tmp_path: Path
) -> None:
    from support.reconciler_env import git

    from reconciler.runtime.service import make_runtime

    make_long_running(config_repo, "language")
    runtime = make_runtime(str(config_repo), "main", {}, cache_dir=tmp_path / "cache")
    runtime.on_cycle(runtime.reconciler.run_once())
    uid = kube.batch.read_namespaced_job("language-distill-g1", "team-b").metadata.uid

    op = config_repo / "projects" / "language" / "operations" / "distill.yaml"
    op.write_text(op.read_text().replace("run:\n", "run:\n  timeout: 2h\n", 1))
    commit_all(config_repo, "change distill's spec")
    result = runtime.reconciler.run_once()
    runtime.on_cycle(result)
    assert kube.batch.read_namespaced_job("language-distill-g1", "team-b").metadata.uid == uid
    record = git(config_repo, "show", f"reconciler/status:{operation_path('language/distill')}")
    assert "sync: OutOfSync" in record

    op.write_text(op.read_text().replace("kind: Operation\n", "kind: Operation\ngeneration: 2\n"))
    commit_all(config_repo, "re-run distill")
    bumped = runtime.reconciler.run_once()
    # team-b's 4 GPUs are all held, one of them by distill's first run: g2 waits for quota
    assert "language/distill" not in bumped.dispatched
    pending = {p.operation: p.reason.value for p in bumped.plan.pending}
    assert pending["language/distill"] == "QuotaExceeded"
    names = {j["metadata"]["name"] for j in kube.list_managed("Job").items}
    assert "language-distill-g1" in names and "language-distill-g2" not in names
    assert bumped.stopped == ()  # the old run is never pruned
