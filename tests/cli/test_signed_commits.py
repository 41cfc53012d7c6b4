"""``policy.requireSignedCommits``: a config commit not signed by a key of the allowed
signers, as of the last good config, is refused whole like an invalid commit. Real keys
(``ssh-keygen -t ed25519``), real SSH-signed commits (``git -c gpg.format=ssh commit -S``),
read by the reconciler through its Git cache and checked by ``git`` itself."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from support.clocks import SteppedClock
from support.fake_kube import FakeCluster, FakeKube
from support.helpers import write_kubeconfig
from support.paths import TEMPLATE

from reconciler.adapters.git import ConfigRepo
from reconciler.cli.main import cli
from reconciler.core.types import ClusterSpec
from reconciler.runtime.cycle import CycleResult, Reconciler
from reconciler.runtime.service import make_runtime
from reconciler.runtime.status import render_cycle_status

pytestmark = pytest.mark.skipif(
    shutil.which("ssh-keygen") is None or shutil.which("git") is None,
    reason="needs ssh-keygen and git",
)

SIGNERS = "security/allowed_signers"
POLICY = f"  requireSignedCommits:\n    allowedSigners: {SIGNERS}\n"
NEW_OP = "projects/vision/operations/extra-{n}.yaml"
OP = "kind: Operation\nqueue: batch\nrun:\n  container: {{image: busybox}}\n# {n}\n"


class Keys:
    def __init__(self, root: Path) -> None:
        self.root = root

    def make(self, name: str) -> Path:
        key = self.root / name
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)],
            check=True,
        )
        return key

    @staticmethod
    def line(who: str, key: Path) -> str:
        kind, blob = key.with_suffix(".pub").read_text().split()[:2]
        return f"{who} {kind} {blob}\n"


class Repo:
    """A config repo (the example's, with the signing policy) committed to by hand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        shutil.copytree(TEMPLATE, path)
        org = path / "reconciler.yaml"
        text = org.read_text()
        org.write_text(text.replace("policy:\n", "policy:\n" + POLICY, 1))
        self.git("init", "-q", "-b", "main")
        self.n = 0

    def git(self, *args: str) -> str:
        base = ["git", "-c", "user.name=t", "-c", "user.email=t@x", "-c", "commit.gpgsign=false"]
        out = subprocess.run([*base, *args], cwd=self.path, check=True, capture_output=True)
        return out.stdout.decode().strip()

    def commit(self, key: Path | None, files: dict[str, str | None] | None = None) -> str:
        self.n += 1
        if files is None:
            files = {NEW_OP.format(n=self.n): OP.format(n=self.n)}
        for rel, text in files.items():
            target = self.path / rel
            if text is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        self.git("add", "-A")
        sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}"] if key else []
        self.git(*sign, "commit", "-q", *(["-S"] if key else []), "-m", f"commit {self.n}")
        return self.git("rev-parse", "HEAD")

    def reset(self, sha: str) -> None:
        self.git("reset", "-q", "--hard", sha)


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return Keys(tmp_path / "keys")


@pytest.fixture
def setup(tmp_path: Path, keys: Keys) -> tuple[Repo, Keys, Path]:
    (tmp_path / "keys").mkdir()
    alice = keys.make("alice")
    repo = Repo(tmp_path / "config")
    (repo.path / SIGNERS).parent.mkdir()
    (repo.path / SIGNERS).write_text(Keys.line("alice@example.org", alice))
    return repo, keys, alice


class Runner:
    def __init__(self, repo: Repo, cache: Path, cluster: FakeCluster | None = None) -> None:
        self.cluster = cluster or FakeCluster("local")
        self.config = ConfigRepo(str(repo.path), "main", cache)
        self.reconciler = Reconciler(
            self.config.sync,
            self._connect,
            SteppedClock(),
            watch=False,
            verify_commits=self.config.verify_signatures,
        )

    def _connect(self, spec: ClusterSpec) -> Any:
        return FakeKube(self.cluster)

    def cycle(self) -> CycleResult:
        return self.reconciler.run_once()

    def creates(self) -> list[str]:
        return [c for c in self.cluster.calls if c.startswith("create")]


def _has(result: CycleResult, n: int) -> bool:
    """Whether the config in force holds the operation of commit ``n``."""
    assert result.compiled is not None
    return any(o.id == f"vision/extra-{n}" for o in result.compiled.operations)


def _status(result: CycleResult) -> dict[str, Any]:
    assert result.compiled is not None and result.plan is not None
    files = render_cycle_status(result, result.compiled, result.plan)
    loaded = yaml.safe_load(files["status/config.yaml"])
    assert isinstance(loaded, dict)
    return loaded


def test_a_signed_commit_goes_an_unsigned_one_is_refused_whole(
    setup: tuple[Repo, Keys, Path], tmp_path: Path
) -> None:
    repo, _keys, alice = setup
    first = repo.commit(alice, {})
    run = Runner(repo, tmp_path / "cache")
    assert run.cycle().version == first
    signed = repo.commit(alice)
    result = run.cycle()
    assert result.version == signed and result.config_errors == ()
    assert _has(result, repo.n)
    calls = list(run.cluster.calls)

    unsigned = repo.commit(None)
    refused = run.cycle()
    assert refused.version == signed  # the last good config stays in force
    assert refused.attempted_version == unsigned
    assert run.cluster.calls == calls  # nothing changed in the cluster
    (error,) = refused.config_errors
    assert str(error) == (
        f"{SIGNERS}:0:0: commit {unsigned[:12]} is not signed (policy.requireSignedCommits)"
    )
    status = _status(refused)
    assert status["version"] == unsigned and status["applied"] == signed
    assert status["valid"] is False and status["errors"] == [str(error)]

    # a signed commit on top does not launder the unsigned one under it
    repo.commit(alice)
    assert run.cycle().version == signed
    assert run.cluster.calls == calls
    # the branch rewritten without it: the signed work goes
    repo.reset(signed)
    again = repo.commit(alice)
    back = run.cycle()
    assert back.version == again and _has(back, repo.n)


def test_a_commit_signed_by_an_unknown_key_is_refused(
    setup: tuple[Repo, Keys, Path], tmp_path: Path
) -> None:
    repo, keys, alice = setup
    good = repo.commit(alice, {})
    run = Runner(repo, tmp_path / "cache")
    run.cycle()
    mallory = keys.make("mallory")
    bad = repo.commit(mallory)
    refused = run.cycle()
    assert refused.version == good and refused.attempted_version == bad
    (error,) = refused.config_errors
    assert f"commit {bad[:12]} is signed by key SHA256:" in str(error)
    assert f"not in {SIGNERS} as of {good[:12]}" in str(error)
    assert not _has(refused, repo.n)

    # nor can that key allow itself: the file's change is checked against the keys before it
    repo.reset(good)
    text = (repo.path / SIGNERS).read_text() + Keys.line("mallory@example.org", mallory)
    selfish = repo.commit(mallory, {SIGNERS: text})
    refused = run.cycle()
    assert refused.version == good and refused.attempted_version == selfish
    assert "is signed by key" in str(refused.config_errors[0])

    # nor turn the policy off unsigned: the policy in force is the last good config's
    repo.reset(good)
    org = (repo.path / "reconciler.yaml").read_text().replace(POLICY, "")
    off = repo.commit(None, {"reconciler.yaml": org})
    refused = run.cycle()
    assert refused.version == good and refused.attempted_version == off


def test_a_key_rotation_and_the_commits_after_it_arrive_in_one_push(
    setup: tuple[Repo, Keys, Path], tmp_path: Path
) -> None:
    repo, keys, alice = setup
    good = repo.commit(alice, {})
    run = Runner(repo, tmp_path / "cache")
    run.cycle()
    bob = keys.make("bob")
    rotate = {SIGNERS: Keys.line("bob@example.org", bob)}  # bob in, alice out
    # bob's work signed before the rotation that allows him is refused
    early = repo.commit(bob)
    repo.commit(alice, rotate)
    refused = run.cycle()
    assert refused.version == good
    assert f"commit {early[:12]} is signed by key" in str(refused.config_errors[0])
    # alice signs the rotation, then bob signs work: one fetch sees both, both go
    repo.reset(good)
    repo.commit(alice, rotate)
    work = repo.commit(bob)
    result = run.cycle()
    assert result.config_errors == () and result.version == work
    assert _has(result, repo.n)
    # alice is out from the rotation on
    late = repo.commit(alice)
    refused = run.cycle()
    assert refused.version == work and refused.attempted_version == late
    assert f"not in {SIGNERS} as of {work[:12]}" in str(refused.config_errors[0])


def test_a_first_start_checks_the_tip_against_the_signers_before_it(
    setup: tuple[Repo, Keys, Path], tmp_path: Path
) -> None:
    repo, _keys, alice = setup
    repo.commit(alice, {})
    repo.commit(None)  # unsigned, and no config in force yet: nothing is dispatched
    run = Runner(repo, tmp_path / "cache")
    first = run.cycle()
    assert first.plan is None and first.version is None
    assert "is not signed" in str(first.config_errors[0])
    assert run.cluster.calls == []
    signed = repo.commit(alice)
    assert run.cycle().version == signed


def test_a_restart_checks_every_commit_since_the_config_recorded_in_force(
    setup: tuple[Repo, Keys, Path], tmp_path: Path
) -> None:
    repo, keys, alice = setup
    good = repo.commit(alice, {})
    first = Runner(repo, tmp_path / "cache")
    assert first.cycle().version == good
    first.reconciler.close()
    # while no process runs: an unsigned commit allows mallory, who then signs the tip
    mallory = keys.make("mallory")
    text = (repo.path / SIGNERS).read_text() + Keys.line("mallory@example.org", mallory)
    sneaked = repo.commit(None, {SIGNERS: text})
    tip = repo.commit(mallory)
    # the next process starts from the status branch's ``applied``: the chain is checked
    calls = list(first.cluster.calls)
    run = Runner(repo, tmp_path / "cache", first.cluster)
    run.reconciler.trust(good, run.config.snapshot)
    refused = run.cycle()
    assert refused.version == good and refused.attempted_version == tip
    assert f"commit {sneaked[:12]} is not signed" in str(refused.config_errors[0])
    assert refused.plan is not None  # the recorded config stays in force
    assert run.cluster.calls == calls  # nothing changed in the cluster


def test_validate_warns_when_head_would_be_refused(
    setup: tuple[Repo, Keys, Path], tmp_path: Path
) -> None:
    repo, keys, alice = setup

    def validate() -> tuple[int, str]:
        result = CliRunner().invoke(cli, ["validate", "--repo", str(repo.path)])
        assert "Traceback" not in result.output
        return result.exit_code, result.stderr

    repo.commit(alice, {})
    code, err = validate()
    assert code == 0 and "warning" not in err
    unsigned = repo.commit(None)
    code, err = validate()
    assert code == 0  # the files are valid: the signature is a warning
    assert f"warning: HEAD: commit {unsigned[:12]} is not signed" in err
    repo.commit(keys.make("mallory"))
    code, err = validate()
    assert code == 0 and "is signed by key SHA256:" in err


def test_the_same_commits_are_checked_once(setup: tuple[Repo, Keys, Path], tmp_path: Path) -> None:
    repo, _keys, alice = setup
    good = repo.commit(alice, {})
    run = Runner(repo, tmp_path / "cache")
    checks: list[tuple[str | None, str]] = []
    verify = run.config.verify_signatures

    def counted(base: str | None, tip: str, signers: str) -> str:
        checks.append((base, tip))
        return verify(base, tip, signers)

    run.reconciler._verify_commits = counted
    run.cycle()
    broken = repo.commit(alice, {NEW_OP.format(n=99): "kind: Operation\nname: [\n"})
    for _ in range(3):  # signed, but invalid: the last good config stays, checked once
        result = run.cycle()
        assert result.version == good and result.attempted_version == broken
        assert result.config_errors and "extra-99" in str(result.config_errors[0])
    unsigned = repo.commit(None)
    for _ in range(3):
        assert "is not signed" in str(run.cycle().config_errors[0])
    assert checks == [(None, good), (good, broken), (good, unsigned)]


def test_make_runtime_starts_from_the_config_the_status_branch_records(
    setup: tuple[Repo, Keys, Path], tmp_path: Path
) -> None:
    repo, keys, alice = setup
    good = repo.commit(alice, {})
    # the cluster is a closed port: nothing here may reach a real one
    nowhere = {"local": write_kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:9")}

    def runtime() -> Any:
        return make_runtime(str(repo.path), "main", nowhere, cache_dir=tmp_path / "cache")

    first = runtime()
    result = first.reconciler.run_once()
    assert result.version == good
    first.on_cycle(result)  # writes status/config.yaml: applied is good
    first.close()
    first.reconciler.close()
    mallory = keys.make("mallory")
    text = (repo.path / SIGNERS).read_text() + Keys.line("mallory@example.org", mallory)
    sneaked = repo.commit(None, {SIGNERS: text})
    repo.commit(mallory)
    second = runtime()
    try:
        refused = second.reconciler.run_once()
        assert refused.version == good
        assert f"commit {sneaked[:12]} is not signed" in str(refused.config_errors[0])
    finally:
        second.reconciler.close()
