"""Two shards writing one status branch at once (``StatusBranch.write_joined``): each push
that loses the race is joined again with the new tip, never forced, so neither shard's
files nor its part of a shared file is lost."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from support.git_commands import git

from reconciler.adapters.git import ConfigRepo, Retention, StatusBranch

ROUNDS = 12
SHARED = "status/queues.yaml"


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    git(bare, "config", "core.logAllRefUpdates", "always")
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(bare), str(work))
    (work / "reconciler.yaml").write_text("kind: Org\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "one")
    git(work, "push", "-q", "origin", "HEAD:main")
    return bare


def _join(shard: str, n: int) -> Callable[[Mapping[str, bytes]], dict[str, bytes | None]]:
    """The shard's round ``n``: its own file, and its line in the shared file."""

    def join(tip: Mapping[str, bytes]) -> dict[str, bytes | None]:
        lines = {
            line
            for line in tip.get(SHARED, b"").decode().splitlines()
            if not line.startswith(f"{shard} ")
        }
        lines.add(f"{shard} {n}")
        return {
            f"status/{shard}/op.yaml": f"round: {n}\n".encode(),
            SHARED: "".join(f"{line}\n" for line in sorted(lines)).encode(),
        }

    return join


def test_two_shards_racing_lose_nothing_and_never_force(remote: Path, tmp_path: Path) -> None:
    writers = {
        s: StatusBranch(
            ConfigRepo(str(remote), cache_dir=tmp_path / f"cache-{s}"),
            max_attempts=50,
            backoff=0.001,
        )
        for s in ("a", "b")
    }
    attempts: dict[str, int] = {"a": 0, "b": 0}
    start = threading.Barrier(2)

    def write(shard: str) -> None:
        start.wait()
        for n in range(1, ROUNDS + 1):
            writers[shard].write_joined(_join(shard, n), f"{shard} {n}")
            attempts[shard] += writers[shard].attempts

    threads = [threading.Thread(target=write, args=(s,)) for s in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert git(remote, "show", f"reconciler/status:{SHARED}") == f"a {ROUNDS}\nb {ROUNDS}"
    for s in writers:
        assert git(remote, "show", f"reconciler/status:status/{s}/op.yaml") == f"round: {ROUNDS}"
    log = remote / "logs" / "refs" / "heads" / "reconciler" / "status"
    for line in log.read_text().splitlines():
        old, new = line.split(" ", 2)[:2]
        if set(old) != {"0"}:  # each update a fast-forward
            ok = subprocess.run(["git", "merge-base", "--is-ancestor", old, new], cwd=remote)
            assert ok.returncode == 0
    commits = git(remote, "rev-list", "--count", "reconciler/status")
    assert int(commits) == 2 * ROUNDS
    assert sum(attempts.values()) >= 2 * ROUNDS


def test_retention_racing_a_shards_writes_never_forces_over_them(
    remote: Path, tmp_path: Path
) -> None:
    """a squashes the branch after each of its writes (the replica holding the first
    partition) while b writes: each squash is pushed with a lease on the tip it squashed,
    so one that lost the race to b's write pushes nothing and is tried again, and b's
    write that lost the race to a squash is joined again on the new history. Every
    update of the branch is a fast-forward or a squash that keeps the tip's tree."""
    writers = {
        s: StatusBranch(
            ConfigRepo(str(remote), cache_dir=tmp_path / f"cache-{s}"),
            max_attempts=50,
            backoff=0.001,
        )
        for s in ("a", "b")
    }
    kept = Retention(max_commits=4)
    outcomes = {"squashed": 0, "lost": 0}
    start = threading.Barrier(2)

    def write(shard: str) -> None:
        start.wait()
        for n in range(1, ROUNDS + 1):
            writers[shard].write_joined(_join(shard, n), f"{shard} {n}")
            if shard == "a":
                done = writers[shard].retain(kept)
                outcomes["squashed"] += done.squashed > 0
                outcomes["lost"] += done.lost_lease

    threads = [threading.Thread(target=write, args=(s,)) for s in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    writers["a"].retain(kept)  # after the race: nothing moves it now
    assert git(remote, "show", f"reconciler/status:{SHARED}") == f"a {ROUNDS}\nb {ROUNDS}"
    for s in writers:
        assert git(remote, "show", f"reconciler/status:status/{s}/op.yaml") == f"round: {ROUNDS}"
    assert int(git(remote, "rev-list", "--count", "reconciler/status")) <= 4
    assert outcomes["squashed"] >= 1
    log = remote / "logs" / "refs" / "heads" / "reconciler" / "status"
    squashes = 0
    for line in log.read_text().splitlines():
        old, new = line.split(" ", 2)[:2]
        if set(old) == {"0"}:
            continue
        ff = subprocess.run(["git", "merge-base", "--is-ancestor", old, new], cwd=remote)
        if ff.returncode != 0:  # a squash: the same files, nobody's write undone
            squashes += 1
            assert git(remote, "rev-parse", f"{old}^{{tree}}") == git(
                remote, "rev-parse", f"{new}^{{tree}}"
            )
    assert squashes >= 1


def test_a_join_that_changes_nothing_makes_no_commit(remote: Path, tmp_path: Path) -> None:
    status = StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "cache"))
    first, files = status.write_joined(_join("a", 1), "a 1")
    assert first is not None and files[SHARED] == b"a 1\n"
    again, same = status.write_joined(_join("a", 1), "a 1")
    assert again is None and same == files
