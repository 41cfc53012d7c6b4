"""A schedule on the real dev cluster: ``kind: interval, frequency: 1m`` with ``startAt`` in
the past makes one run per minute, each a Job named by its minute, none twice: not by a
second cycle in the same minute, nor by a new process that knows only the cluster. The
clock is the system's, moved a minute on instead of waiting for it. The fake-Kube version
is tests/core/test_schedule.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.helpers import wait_until
from support.reconciler_env import commit_all

from reconciler.adapters.kube import Kube, connect_cluster
from reconciler.adapters.repo import snapshot_git
from reconciler.core.types import ClusterSpec, Phase
from reconciler.runtime.cycle import Reconciler

pytestmark = pytest.mark.cluster

SCHEDULED = """kind: Operation
name: every-minute
queue: ticks
schedule:
  kind: interval
  frequency: 1m
  startAt: 2026-01-01T00:00:00Z
  concurrencyPolicy: Allow
run:
  kind: batch
  container: {command: [sh, -c, 'true']}
"""


class MovedClock:
    """The system clock, ``offset`` on."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def monotonic(self) -> float:
        return time.monotonic()


@pytest.fixture
def scheduled_repo(config_repo: Path) -> Path:
    # a queue of its own: the example's batch queue is full with its own work
    (config_repo / "queues/ticks.yaml").write_text("kind: Queue\ncluster: local\nconcurrency: 10\n")
    project = config_repo / "projects/vision/project.yaml"
    project.write_text(project.read_text().replace("[team-a, batch,", "[team-a, batch, ticks,"))
    (config_repo / "projects/vision/operations/every-minute.yaml").write_text(SCHEDULED)
    commit_all(config_repo, "a run every minute")
    return config_repo


def _reconciler(repo: Path, clock: MovedClock) -> Reconciler:
    def connect(spec: ClusterSpec) -> Kube:
        return Kube(connect_cluster(spec.kubeconfig, spec.context))

    return Reconciler(lambda: snapshot_git(repo), connect, clock)


@pytest.fixture
def made() -> Iterator[list[Reconciler]]:
    out: list[Reconciler] = []
    yield out
    for reconciler in out:
        reconciler.close()


def _ticks(kube: Kube) -> list[str]:
    return sorted(
        j["metadata"]["name"]
        for j in kube.list_managed("Job").items
        if j["metadata"]["name"].startswith("vision-every-minute-")
    )


def test_an_interval_schedule_makes_one_run_a_minute_and_none_twice(
    kube: Kube, scheduled_repo: Path, made: list[Reconciler]
) -> None:
    clock = MovedClock()
    first = _reconciler(scheduled_repo, clock)
    made.append(first)
    # startAt is in the past: the tick of this minute is due at once (not across its end)
    minute = clock.now().replace(second=0, microsecond=0)
    if (clock.now() - minute).total_seconds() > 50:
        clock.offset += timedelta(seconds=15)
        minute += timedelta(minutes=1)
    stamp = minute.strftime("%Y%m%d%H%M")
    result = first.run_once()
    assert f"vision/every-minute-{stamp}" in result.dispatched
    assert _ticks(kube) == [f"vision-every-minute-{stamp}-g1"]
    # again in the same minute: nothing new
    assert not [d for d in first.run_once().dispatched if "every-minute" in d]

    clock.offset += timedelta(minutes=1)
    later = (minute + timedelta(minutes=1)).strftime("%Y%m%d%H%M")
    assert [d for d in first.run_once().dispatched if "every-minute" in d] == [
        f"vision/every-minute-{later}"
    ]
    assert _ticks(kube) == [f"vision-every-minute-{stamp}-g1", f"vision-every-minute-{later}-g1"]

    # a new process that knows only the cluster makes neither again
    second = _reconciler(scheduled_repo, clock)
    made.append(second)
    assert not [d for d in second.run_once().dispatched if "every-minute" in d]

    # both run to the end, the newest shown as the last run
    def done() -> bool:
        states = second.run_once().states
        runs = (f"vision/every-minute-{stamp}", f"vision/every-minute-{later}")
        return all(r in states and states[r].phase is Phase.SUCCEEDED for r in runs)

    wait_until(done, timeout=60, what="both runs Succeeded")
    assert len(_ticks(kube)) == 2
