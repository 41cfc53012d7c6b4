"""Borrowing inside a cohort of fleet queues on two real control planes (docs/dispatch.md,
"Cohorts of fleet queues"): team-a (2 GPUs, may borrow 2) and team-b (4 GPUs), fleet queues
over ``local`` (the session's dev cluster: 4-GPU H100 and A100 nodes) and ``remote`` (a second
one: one 8-GPU H200 node), in cohort gpu-pool (maxBorrowDuration 2h).

team-a's own 2 GPUs are taken by a long A100 job (on local); a 1 h-timeout H200 job of
team-a borrows 2 of team-b's idle quota and goes to remote, the first cluster with room
(check 10: local has no H200). A later 4-GPU team-b job waits ``WaitingForLentQuota``,
recorded on the status branch with the borrower's end time (its Job's dispatched-at
annotation plus 1 h), though local has room for it: quota is fleet-wide. It starts in the
first cycle after the borrower finishes (simulated durations: the dev clusters' kwok
stages)."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from support.helpers import wait_until
from support.reconciler_env import (
    GPU,
    bound_node,
    commit_all,
    cycles_until_lent_quota_returns,
    git,
    gpu_op,
    job_names,
    make_reconciler,
)

from reconciler.adapters.git import ConfigRepo, StatusBranch
from reconciler.adapters.kube import Kube
from reconciler.cli.main import cli
from reconciler.core.decision.render import ANNOTATION_DISPATCHED_AT
from reconciler.core.reporting.status import operation_path
from reconciler.runtime.cycle import CycleResult
from reconciler.runtime.status import StatusPublisher

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

H200 = "NVIDIA-H200-141GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"


def _queue(name: str, priority: int, gpus: int, extra: str = "") -> str:
    return (
        f"kind: Queue\nname: {name}\nclusters: [local, remote]\nrequireCapacity: true\n"
        f"priority: {priority}\nquota: {{{GPU}: {gpus}}}\ncohort: gpu-pool\n{extra}"
        "kinds: [job]\n"
    )


def _recorded(repo: Path, path: str) -> dict[str, Any]:
    """A file of the status branch (``{}`` until it is written)."""
    try:
        data = yaml.safe_load(git(repo, "show", f"reconciler/status:{path}"))
    except subprocess.CalledProcessError:
        return {}
    return data if isinstance(data, dict) else {}


def _queues_view(repo: Path, cache: Path) -> dict[str, dict[str, Any]]:
    """``reconciler queues -o json``: what the status branch records, per queue (``{}``
    before the first status is written)."""
    result = CliRunner().invoke(
        cli, ["queues", "--repo", str(repo), "--cache-dir", str(cache), "-o", "json"]
    )
    if result.exit_code == 1 and "no status yet" in result.stderr:
        return {}
    assert result.exit_code == 0, result.output
    return {q["name"]: q for q in json.loads(result.stdout)["queues"]}


def test_a_fleet_queue_borrows_idle_quota_on_the_cluster_with_room_and_gives_it_back(
    kube: Kube, config_repo: Path, h200_remote: Kube, tmp_path: Path
) -> None:
    remote = h200_remote
    queues = config_repo / "queues"
    (queues / "team-a.yaml").write_text(_queue("team-a", 100, 2, f"borrowingLimit: {{{GPU}: 2}}\n"))
    (queues / "team-b.yaml").write_text(_queue("team-b", 90, 4))
    ops = config_repo / "projects" / "vision" / "operations"
    # team-a's own quota, for 10 minutes; the preset's 12h timeout is too long to borrow
    (ops / "long.yaml").write_text(gpu_op("long", "team-a", 2, "600s", product=A100))
    # fits only by borrowing; only remote has H200s
    (ops / "sweep.yaml").write_text(gpu_op("sweep", "team-a", 2, "20s", timeout="1h", product=H200))
    commit_all(config_repo, "fleet cohort: team-a's own job, and one that borrows")

    reconciler = make_reconciler(config_repo)
    branch = StatusBranch(ConfigRepo(str(config_repo), cache_dir=tmp_path / "cache"))
    publisher = StatusPublisher(branch, background=True)
    try:
        first = reconciler.run_once()
        assert first.ok and first.plan is not None, first
        publisher.publish(first)
        # the own-quota job in step 4 (local, listed first), the borrower in step 4b;
        # check 10 sends it to remote, the first cluster with room for it
        assert [(d.operation, d.cluster) for d in first.plan.dispatch] == [
            ("vision/long", "local"),
            ("vision/sweep", "remote"),
        ]
        summary = {q.name: q for q in first.plan.queues}
        team_a, team_b = summary["team-a"], summary["team-b"]
        assert (team_a.used_after[GPU], team_a.borrowed_after[GPU]) == (4, 2)
        assert team_b.lent_after[GPU] == 2
        assert {s.cluster: s.used[GPU] for s in team_a.members} == {"local": 2, "remote": 2}
        # the real Jobs on the real apiservers
        assert job_names(kube) == ["vision-long-g1"] and job_names(remote) == ["vision-sweep-g1"]
        job = remote.batch.read_namespaced_job("vision-sweep-g1", "team-a")
        assert job.spec.active_deadline_seconds == 3600  # what lets it borrow
        dispatched_at = datetime.fromisoformat(
            job.metadata.annotations[ANNOTATION_DISPATCHED_AT].replace("Z", "+00:00")
        )
        ends_by = dispatched_at + timedelta(hours=1)
        # as the status and the message say it: to the second, rounded up
        ends = (ends_by + timedelta(microseconds=999_999)).strftime("%Y-%m-%dT%H:%M:%SZ")

        # kube-scheduler bound the borrower's pod to the remote H200 node
        wait_until(
            lambda: bound_node(remote, "vision-sweep-g1"),
            timeout=60,
            what="the borrower's pod bound on remote",
        )

        # the status branch (written by the publisher's own thread) records the borrowing
        def recorded_borrowing() -> bool:
            view = _queues_view(config_repo, tmp_path / "cli-cache")
            return bool(
                view
                and view["team-a"]["quota"][0]["borrowed"] == "2"
                and view["team-b"]["quota"][0]["lent"] == "2"
            )

        wait_until(recorded_borrowing, timeout=30, what="the borrowing in the status branch")

        (config_repo / "projects" / "language" / "operations" / "big.yaml").write_text(
            gpu_op("big", "team-b", 4, "5s", timeout="1h", product=A100)
        )
        commit_all(config_repo, "team-b: a job that needs all of its 4 GPUs")

        def each_wait(result: CycleResult, n: int) -> None:
            publisher.publish(result)
            assert result.plan is not None
            [big] = [p for p in result.plan.pending if p.operation == "language/big"]
            assert "2 of team-b's quota is lent in cohort gpu-pool" in big.message
            # though local has an idle A100 node: the quota is fleet-wide
            assert "language-big-g1" not in job_names(kube) + job_names(remote)
            if n > 0:
                return

            # the wait and its end time on the status branch, and in `queues`
            def recorded_wait() -> dict[str, Any]:
                record = _recorded(config_repo, operation_path("language/big"))
                return record if record.get("reason") == "WaitingForLentQuota" else {}

            record = wait_until(recorded_wait, timeout=30, what="the wait in the status branch")
            assert record["blockedBy"]["borrowers"] == ["vision/sweep"], record
            assert record["blockedBy"]["endsBy"] == ends, record
            row = _queues_view(config_repo, tmp_path / "cli-cache")["team-b"]
            assert (row["pending"], row["headReason"]) == (1, "WaitingForLentQuota"), row
            admitted = f"admitted when vision/sweep ends, by {ends} at the latest"
            assert admitted in row["headMessage"], row

        result = cycles_until_lent_quota_returns(
            reconciler, "language/big", "vision/sweep", ends_by, each_wait=each_wait
        )
        publisher.publish(result)
        assert result.plan is not None
        # started in the cycle that saw the borrower succeed; team-a's own job still runs
        assert result.states["vision/long"].phase.active
        assert [(d.operation, d.cluster) for d in result.plan.dispatch] == [
            ("language/big", "local")  # the first cluster with room for 4 A100s
        ]
        assert "language-big-g1" in job_names(kube) and "language-big-g1" not in job_names(remote)
        summary = {q.name: q for q in result.plan.queues}
        team_a, team_b = summary["team-a"], summary["team-b"]
        assert team_a.borrowed_after[GPU] == 0
        assert (team_b.used_after[GPU], team_b.lent_after[GPU]) == (4, 0)

        def recorded_return() -> bool:
            record = _recorded(config_repo, operation_path("language/big"))
            view = _queues_view(config_repo, tmp_path / "cli-cache")
            return bool(
                record.get("cluster") == "local"
                and record.get("phase") in ("Dispatched", "Running", "Succeeded")
                and view["team-a"]["quota"][0]["borrowed"] == "0"
                and view["team-b"]["quota"][0]["lent"] == "0"
            )

        wait_until(recorded_return, timeout=30, what="the quota back in the status branch")
    finally:
        publisher.close(timeout=30)
        reconciler.close()
