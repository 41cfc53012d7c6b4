"""``reconciler queues --live`` against the real control plane: compiles, observes and
plans without dispatching anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from reconciler_env import make_long_running, make_reconciler

from reconciler.adapters.kube import Kube
from reconciler.cli.main import cli

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]


def _live(repo: Path, cache: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    result = CliRunner().invoke(
        cli, ["queues", "--live", "--repo", str(repo), "--cache-dir", str(cache), "-o", "json"]
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["source"] == "live"
    return {q["name"]: q for q in data["queues"]}


def test_live_view_before_and_after_a_cycle(kube: Kube, config_repo: Path, tmp_path: Path) -> None:
    make_long_running(config_repo, "*")
    before = _live(config_repo, tmp_path / "cache")
    assert not kube.list_managed("Job").items  # read-only: nothing was created
    assert (before["team-a"]["active"], before["team-a"]["next"]) == (0, 2)
    assert before["team-a"]["quota"][0]["used"] == "0"

    reconciler = make_reconciler(config_repo)
    try:
        assert reconciler.run_once().ok
    finally:
        reconciler.close()
    after = _live(config_repo, tmp_path / "cache")
    assert (after["team-a"]["active"], after["team-a"]["next"]) == (2, 0)
    assert after["team-a"]["quota"][0] == {"resource": "nvidia.com/gpu", "used": "2", "limit": "2"}
    assert after["team-b"]["quota"][0]["used"] == "4"
    assert (after["batch"]["active"], after["batch"]["concurrency"]) == (3, 3)
    for name in ("team-a", "team-b", "batch"):
        q = after[name]
        assert q["running"] + q["waiting"] == q["active"]
