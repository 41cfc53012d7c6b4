"""``run --shards``: the modes it does not go with, and a Lease kubeconfig that does not load,
are one line at start (exit 2), before anything is fetched."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from reconciler.cli.main import cli


@pytest.mark.parametrize("other", ["--leader-elect", "--once", "--watch"])
def test_shards_is_not_for_another_mode(other: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["run", "--repo", str(tmp_path), "--shards", other])
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: --shards is not for {other}\n"


def test_a_lease_kubeconfig_that_does_not_load_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("- a list\n")
    result = CliRunner().invoke(
        cli,
        ["run", "--repo", str(tmp_path), "--shards", "--lease-kubeconfig", str(broken)],
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: shards: cannot load kubeconfig {broken}")
    assert result.stderr.count("\n") == 1


def test_the_durations_are_checked_as_for_leader_election(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    result = CliRunner().invoke(
        cli,
        [
            "run",
            "--repo",
            str(tmp_path),
            "--shards",
            "--lease-kubeconfig",
            str(kubeconfig),
            "--lease-duration",
            "5",
            "--renew-deadline",
            "10",
        ],
    )
    assert result.exit_code == 2, result.output
    assert result.stderr == ("error: shards: lease_duration must be greater than renew_deadline\n")
