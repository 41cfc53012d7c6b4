"""A Cluster file's kubeconfig that cannot be loaded is that cluster's failure, said in
one line: ``connect_cluster`` raises ``KubeError`` (the cycle's and the views' signal for
an unreachable cluster), never the client's own exception."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.helpers import broken_kubeconfigs, write_kubeconfig
from support.paths import DATA

from reconciler.adapters.kube import KubeError, connect, connect_cluster

# connection-time failures (TLS, auth) need a server: tests/cluster/test_broken_kubeconfig.py
_AT_LOAD = ("truncated", "nul-byte", "a-list", "clusters-a-map", "users-a-string")


@pytest.mark.parametrize("case", _AT_LOAD)
def test_a_kubeconfig_that_does_not_load_is_a_one_line_kube_error(
    tmp_path: Path, case: str
) -> None:
    good = write_kubeconfig(tmp_path / "good", "https://127.0.0.1:1").read_text()
    path = tmp_path / case
    path.write_bytes(broken_kubeconfigs(good)[case])
    with pytest.raises(KubeError) as caught:
        connect_cluster({"path": str(path)}, None)
    message = str(caught.value)
    assert message.startswith(f"cannot load kubeconfig {path}: ")
    assert "\n" not in message


def test_a_secret_kubeconfig_that_is_not_a_map_is_a_kube_error(tmp_path: Path) -> None:
    path = tmp_path / "list"
    path.write_text("- a\n- b\n")
    with pytest.raises(KubeError, match="not a kubeconfig: expected a map, not a list"):
        connect_cluster({}, None, override=path)


CORPUS = DATA / "bad" / "kubeconfig"
# each file of the corpus, and the one line its cluster is unreachable with
EXPECT = {
    "a-list": "not a kubeconfig: expected a map, not a list",
    "a-string": "not a kubeconfig: expected a map, not a string",
    "clusters-a-map": "clusters: expected a list, not a map",
    "context-unknown": "Invalid kube-config file. Expected object with name nope in ",
    "empty": "not a kubeconfig: expected a map, not nothing",
    "nul-byte": "not YAML: character #x0000 is not allowed (byte 21)",
    "server-a-number": "clusters[0].cluster.server: expected a string, not a number",
    "server-bad-ipv6": "Invalid IPv6 URL",
    "truncated": "not YAML: could not find expected ':' (line 8, column 8)",
    "users-a-string": "users: expected a list, not a string",
}


def test_the_corpus_has_an_expectation_for_each_file() -> None:
    assert sorted(p.stem for p in CORPUS.glob("*.yaml")) == sorted(EXPECT)


@pytest.mark.parametrize("case", sorted(EXPECT))
def test_a_kubeconfig_of_the_corpus_is_one_located_line(case: str) -> None:
    path = CORPUS / f"{case}.yaml"
    with pytest.raises(KubeError) as caught:
        connect_cluster({"path": str(path)}, None)
    message = str(caught.value)
    assert message.startswith(f"cannot load kubeconfig {path}: {EXPECT[case]}"), message
    assert "\n" not in message


@pytest.mark.parametrize("case", sorted(EXPECT))
def test_a_lease_kubeconfig_that_does_not_load_is_a_one_line_error(case: str) -> None:
    """``run --lease-kubeconfig FILE`` (``connect``): the operator's file, said as such at
    start (exit 2), never a traceback that reads as a bug of the reconciler."""
    from click.testing import CliRunner

    from reconciler.cli.main import cli

    path = CORPUS / f"{case}.yaml"
    with pytest.raises(KubeError, match=f"^cannot load kubeconfig {path}: "):
        connect(path)
    if case in ("nul-byte", "a-list"):  # through the command, twice is enough
        result = CliRunner().invoke(
            cli,
            [
                "run",
                "--repo",
                str(path.parent),
                "--once",
                "--leader-elect",
                "--lease-kubeconfig",
                str(path),
            ],
        )
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"error: leader election: cannot load kubeconfig {path}")
