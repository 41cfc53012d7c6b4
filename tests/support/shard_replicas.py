"""``reconciler run --shards`` processes on one config repo, killed -9 and started again,
with a sampler of every cluster's Jobs: shared by tests/cluster/test_shards.py (2 kills)
and bench/shard_fault_loop.py (20 or more).

The sampler lists each cluster's managed Jobs every ``period`` and records a violation when
a Job of an operation and generation is seen with another uid than before (made twice),
or when a queue is over its limits (``over_limits``, as R1's)."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

from reconciler.adapters.git import ConfigRepo, StatusBranch
from reconciler.adapters.kube import Kube, KubeError
from reconciler.adapters.lease import list_leases
from reconciler.adapters.repo import snapshot_git
from reconciler.core.compile import compile_repo
from reconciler.core.reporting.status import read_status
from reconciler.core.types import CompiledRepo
from reconciler.runtime.shards import GROUP_LABEL, ROLE_LABEL
from support.fault_loop import job_key, over_limits
from support.reconciler_env import commit_all, start_run

LEASE_NAME = "dispatch-reconciler"  # --lease-name's default
# the operation each round adds per partition: (project, queue)
NEW_OPS = (("vision", "team-a"), ("language", "team-b"))


def split_team_b(repo: Path) -> CompiledRepo:
    """The example with team-b on the cluster ``remote`` (out of cohort gpu-pool): two
    partitions. ``vision/train-ddp`` goes: it borrows gpu-pool's A100s, which team-b no
    longer lends, so it would never run. Committed; the config compiled."""
    queue = repo / "queues" / "team-b.yaml"
    queue.write_text(
        re.sub(r"(?m)^cohort: .*\n", "", queue.read_text()).replace(
            "cluster: local", "cluster: remote"
        )
    )
    (repo / "projects" / "vision" / "operations" / "train-ddp.yaml").unlink()
    commit_all(repo, "team-b runs on the remote cluster")
    compiled = compile_repo(snapshot_git(repo, "main"))
    assert compiled.valid, compiled.errors
    return compiled


def move_team_b(repo: Path, cluster: str) -> CompiledRepo:
    """team-b's queue moved to ``cluster``. Committed; the config compiled."""
    queue = repo / "queues" / "team-b.yaml"
    queue.write_text(re.sub(r"(?m)^cluster: .*$", f"cluster: {cluster}", queue.read_text()))
    commit_all(repo, f"team-b moves to {cluster}")
    compiled = compile_repo(snapshot_git(repo, "main"))
    assert compiled.valid, compiled.errors
    return compiled


class ShardReplicas:
    def __init__(
        self,
        repo: Path,
        kubeconfig: Path,
        namespace: str,
        work: Path,
        kubes: dict[str, Kube],
        compiled: CompiledRepo,
        *,
        lease: float = 3.0,
        deadline: float = 2.0,
        retry: float = 0.5,
        period: float = 0.2,
    ) -> None:
        self.repo, self.kubeconfig, self.namespace, self.work = repo, kubeconfig, namespace, work
        self.kubes, self.compiled = kubes, compiled
        self.lease, self.deadline, self.retry, self.period = lease, deadline, retry, period
        self.processes: dict[str, subprocess.Popen[str]] = {}
        self.takeovers: list[float] = []  # seconds from each kill to its partitions held
        self._uids: dict[tuple[str, str, str], str] = {}  # (cluster, op, generation) -> uid
        self._violations: list[str] = []
        self.samples = 0
        self._halt = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True, name="shard-sampler")
        self._sampler.start()
        self._api = kubes["local"].api  # the Leases are on the session's cluster

    # --- processes ------------------------------------------------------------------------

    def add_operations(self, index: int) -> None:
        """One more operation in each partition: there is work when the next kill comes."""
        for project, queue in NEW_OPS:
            name = f"shard-{index}-{queue}"
            path = self.repo / "projects" / project / "operations" / f"{name}.yaml"
            path.write_text(
                f"kind: Operation\nname: {name}\nqueue: {queue}\n"
                "presets: [a100]\nrun:\n  container: {command: [sh, -c, 'true']}\n"
            )
        commit_all(self.repo, f"round {index}: one more operation in each partition")
        compiled = compile_repo(snapshot_git(self.repo, "main"))
        assert compiled.valid, compiled.errors
        self.compiled = compiled

    def start(self, identity: str, *extra: str) -> None:
        self.processes[identity] = start_run(
            self.repo,
            self.kubeconfig,
            self.work / f"{identity}.log",
            "--shards",
            "--lease-kubeconfig",
            str(self.kubeconfig),
            "--lease-namespace",
            self.namespace,
            "--lease-duration",
            f"{self.lease:g}",
            "--renew-deadline",
            f"{self.deadline:g}",
            "--retry-period",
            f"{self.retry:g}",
            "--identity",
            identity,
            "--log-format",
            "json",
            *extra,
            cache_dir=self.work / f"cache-{identity}",
        )

    def holders(self) -> dict[str, str]:
        """Each partition Lease's holder ("" when free)."""
        selector = f"{GROUP_LABEL}={LEASE_NAME},{ROLE_LABEL}=shard"
        try:
            leases = list_leases(self._api, self.namespace, selector)
        except KubeError:
            return {}
        return {name: record.holder for name, record in sorted(leases.items())}

    def members(self) -> list[str]:
        """The holders of the replicas' membership Leases (a replica gone: until deleted)."""
        selector = f"{GROUP_LABEL}={LEASE_NAME},{ROLE_LABEL}=member"
        try:
            leases = list_leases(self._api, self.namespace, selector)
        except KubeError:
            return []
        return sorted(record.holder for record in leases.values())

    def kill(self, identity: str, timeout: float = 60.0) -> float:
        """kill -9 ``identity``; the seconds until its partitions are held by the others."""
        process = self.processes.pop(identity)
        held = [p for p, h in self.holders().items() if h == identity]
        process.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        process.wait(10)
        while time.monotonic() - killed < timeout:
            now = self.holders()
            if all(now.get(p) not in ("", identity, None) for p in held):
                took = time.monotonic() - killed
                self.takeovers.append(took)
                return took
            time.sleep(0.1)
        raise AssertionError(f"{held} of {identity} not taken over within {timeout}s")

    def close(self) -> None:
        for process in self.processes.values():
            process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        self.processes.clear()
        self._halt.set()
        self._sampler.join(10)

    # --- what is checked ------------------------------------------------------------------

    def _sample(self) -> None:
        while not self._halt.is_set():
            for cluster, kube in self.kubes.items():
                try:
                    jobs = kube.list_managed("Job").items
                except Exception:  # a sample lost (API busy), not a verdict
                    continue
                for job in jobs:
                    op, generation = job_key(job)
                    uid = str(job["metadata"]["uid"])
                    known = self._uids.setdefault((cluster, op, generation), uid)
                    if known != uid:
                        self._violations.append(f"{op} g{generation} made twice in {cluster}")
                        self._uids[(cluster, op, generation)] = uid
                self._violations.extend(over_limits(self.compiled, list(jobs)))
            self.samples += 1
            self._halt.wait(self.period)

    def violations(self) -> list[str]:
        return list(self._violations)

    def seen_on(self, cluster: str) -> set[str]:
        """The operations with a Job seen on ``cluster``."""
        return {op for (where, op, _) in list(self._uids) if where == cluster}

    def jobs_per_operation(self) -> Counter[str]:
        """Jobs ever seen per operation, over every cluster and generation."""
        return Counter(op for (_, op, _) in self._uids)

    def phases(self) -> dict[str, str]:
        """Each operation's phase on the status branch (read from the config repo)."""
        branch = StatusBranch(ConfigRepo(str(self.repo), cache_dir=self.work / "status-reader"))
        try:
            view = read_status(branch.read())
        except Exception:
            return {}
        return {op: str(record.phase) for op, record in view.operations.items()}

    def wait_all_succeeded(self, timeout: float) -> dict[str, str]:
        """Until the branch says every operation of the config Succeeded; the phases."""
        wanted = {op.id for op in self.compiled.operations}
        deadline = time.monotonic() + timeout
        phases = self.phases()
        while any(phases.get(op) != "Succeeded" for op in wanted):
            if time.monotonic() > deadline:
                left = {op: phases.get(op) for op in wanted if phases.get(op) != "Succeeded"}
                raise AssertionError(f"not all Succeeded after {timeout}s: {left}")
            time.sleep(1.0)
            phases = self.phases()
        return phases
