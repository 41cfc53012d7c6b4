"""``stopped: true`` on the real dev cluster: the running Job of a stopped operation is
deleted (reason ``StoppedInRepo``, with an Event), with ``prune.enabled`` off, its record
names the commit and author that stopped it, and ``false`` with a ``generation`` bump runs
it again. The fake-Kube version is tests/core/test_stop_in_repo.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import git as gitpython
import pytest
from support.cluster import Reconcilers
from support.helpers import wait_until
from support.reconciler_env import commit_all, make_long_running

from reconciler.adapters.git import blame
from reconciler.adapters.kube import Kube
from reconciler.core.observation.observe import ObservedReason
from reconciler.core.types import Phase
from reconciler.runtime.cycle import CycleResult

pytestmark = pytest.mark.cluster

OP = "language/distill"
FILE = "projects/language/operations/distill.yaml"


def _commit_as(repo: Path, author: str, message: str) -> str:
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    identity = ["-c", f"user.name={author}", "-c", "user.email=a@example.com"]
    subprocess.run(
        ["git", *identity, "commit", "-q", "-m", message],
        cwd=repo,
        check=True,
    )
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


def _jobs(kube: Kube) -> set[str]:
    return {j["metadata"]["name"] for j in kube.list_managed("Job").items}


def test_a_stopped_operations_job_is_deleted_and_a_bump_runs_it_again(
    kube: Kube, config_repo: Path, reconcilers: Reconcilers
) -> None:
    make_long_running(config_repo, "language")
    org = config_repo / "reconciler.yaml"
    org.write_text(org.read_text().replace("  enabled: true ", "  enabled: false"))
    commit_all(config_repo, "prune off: a stop in the repo does not need it")
    repo = gitpython.Repo(config_repo)
    reconciler = reconcilers.start(config_repo, blame=lambda rev, path: blame(repo, rev, path))
    first = reconciler.run_once()
    assert OP in first.dispatched
    assert "language-distill-g1" in _jobs(kube)

    op_file = config_repo / FILE
    original = op_file.read_text()
    op_file.write_text(original.replace("name: distill\n", "name: distill\nstopped: true\n"))
    commit = _commit_as(config_repo, "Ada Lovelace", "stop distill")
    stopping = reconciler.run_once()
    assert stopping.stopped == (OP,)
    assert OP not in stopping.dispatched
    assert "language-distill-g1" not in _jobs(kube)
    state = stopping.states[OP]
    assert state.reason is ObservedReason.STOPPED_IN_REPO
    assert state.message.endswith(f"set by Ada Lovelace in {commit[:12]}")
    events = wait_until(
        lambda: (
            kube.core.list_namespaced_event(
                state.namespace,
                field_selector=f"involvedObject.uid={state.uid},reason=StoppedInRepo",
            ).items
        ),
        timeout=30,
        what="the StoppedInRepo Event",
    )
    assert f"operation {OP}: stopped: true at {FILE}:4" in events[0].message

    # later cycles keep it stopped, with the commit and author that stopped it
    later = wait_until(
        lambda: (r := reconciler.run_once()).states[OP].phase is Phase.STOPPED and r,
        timeout=30,
        what=f"{OP} to be Stopped",
        interval=0.1,
    )
    assert OP not in later.dispatched  # its freed quota may go to the next one in line
    stopped = later.states[OP]
    assert stopped.reason is ObservedReason.STOPPED_IN_REPO
    assert stopped.stopped_by == {
        "commit": commit,
        "author": "Ada Lovelace",
        "file": FILE,
        "line": 4,
    }

    # false and a generation bump: a new run. The quota distill freed went to the next
    # ops in line; stop those too, and rank distill first in its queue (priority), so the
    # new run is dispatched as soon as their Jobs are gone
    took = [op for r in (stopping, later) for op in r.dispatched]
    assert took
    for other in took:
        name = other.partition("/")[2]
        path = config_repo / "projects" / "language" / "operations" / f"{name}.yaml"
        path.write_text(
            path.read_text().replace("kind: Operation\n", "kind: Operation\nstopped: true\n")
        )
    op_file.write_text(
        original.replace("name: distill\n", "name: distill\ngeneration: 2\npriority: 1000\n")
    )
    commit_all(config_repo, "run distill again, first in its queue")
    runs: list[CycleResult] = []

    def dispatched() -> bool:
        runs.append(reconciler.run_once())
        return OP in runs[-1].dispatched

    wait_until(dispatched, timeout=60, what=f"{OP} generation 2 to be dispatched", interval=0.2)
    assert sorted(op for r in runs for op in r.stopped) == sorted(took)
    assert "language-distill-g2" in _jobs(kube)
