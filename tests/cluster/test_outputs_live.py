"""Outputs on the real dev cluster: a matrix whose project sets ``defaults.outputs`` runs
each child with its own ``RECONCILER_OUTPUTS``; the kwok stages turn each pod's
``reconciler.dev/simulated-outputs`` into its termination message, which becomes the
child's named outputs on its status record and on the workflow's page, sorted by any."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.cluster import Reconcilers
from support.helpers import wait_until
from support.reconciler_env import commit_all

from reconciler.adapters.kube import Kube
from reconciler.core.reporting.report import status_view
from reconciler.core.types import Phase
from reconciler.runtime.cycle import CycleResult
from reconciler.runtime.web import WebApp

pytestmark = pytest.mark.cluster

SWEEP = """kind: Operation
queue: batch
matrix:
  kind: grid
  params:
    acc: [0.5, 0.9, 0.7]
run:
  kind: job
  container:
    image: busybox
    command: [train]
    resources:
      requests: {cpu: 100m}
  environment:
    annotations:
      reconciler.dev/simulated-duration: 1s
      reconciler.dev/simulated-outputs: '{"accuracy": {{ params.acc }}, "loss": 0.1}'
"""

RESULTS = """kind: Connection
bucket:
  url: s3://ml-results/
  urlEnv: RESULTS_URL
"""


def test_a_sweeps_children_write_to_their_own_paths_and_compare_their_outputs(
    kube: Kube, config_repo: Path, reconcilers: Reconcilers
) -> None:
    for old in config_repo.glob("projects/*/operations/*.yaml"):
        old.unlink()  # only the sweep: nothing else takes the batch queue
    (config_repo / "connections" / "results.yaml").write_text(RESULTS)
    (config_repo / "projects" / "vision" / "operations" / "sweep.yaml").write_text(SWEEP)
    project = config_repo / "projects" / "vision" / "project.yaml"
    project.write_text(
        project.read_text().replace("defaults:\n", "defaults:\n  outputs: results\n")
    )
    commit_all(config_repo, "a sweep that keeps its outputs")
    reconciler = reconcilers.start(config_repo)
    children = [f"vision/sweep-{i}" for i in range(3)]

    def done() -> CycleResult | None:
        result = reconciler.run_once()
        phases = [result.states[c].phase if c in result.states else None for c in children]
        return result if all(p is Phase.SUCCEEDED for p in phases) else None

    result = wait_until(done, timeout=90, what="the sweep's children to succeed", interval=0.5)

    jobs = {j["metadata"]["name"]: j for j in kube.list_managed("Job").items}
    for i, child in enumerate(children):
        workload = f"vision-sweep-{i}-g1"
        path = f"s3://ml-results/vision/sweep-{i}/{workload}/"
        env = jobs[workload]["spec"]["template"]["spec"]["containers"][0]["env"]
        assert {"name": "RECONCILER_OUTPUTS", "value": path} in env
        assert result.states[child].outputs_path == path

    report = result.report
    assert report is not None
    records = status_view(report).operations
    accuracy = [records[c].named_outputs["accuracy"] for c in children]
    assert accuracy == [0.5, 0.9, 0.7] and records[children[0]].named_outputs["loss"] == 0.1
    assert records[children[1]].outputs_path == "s3://ml-results/vision/sweep-1/vision-sweep-1-g1/"

    app = WebApp(lambda: result)
    got = app("/operations/vision/sweep", "sort=accuracy&order=desc")
    assert got is not None and got[0] == 200
    table = got[1].decode().split("<h2>Children")[1].split("</table>")[0]
    assert re.findall(r"vision/sweep-(\d)</a>", table) == ["1", "2", "0"]
