"""ConfigRepo and StatusBranch against real Git repositories: a bare "remote" and clones."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.git_commands import ENV, commit_and_push, git

from reconciler.adapters.git import ConfigRepo, GitSyncError, StatusBranch, WorkClone, redact
from reconciler.adapters.repo import snapshot_git
from reconciler.core.reporting.status import record_paths
from reconciler.core.types import Phase
from reconciler.runtime.status import StatusPublisher


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    """A bare remote with one commit on main (two files and a symlink)."""
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(bare), str(work))
    git(work, "config", "user.name", "human")
    git(work, "config", "user.email", "human@example.com")
    git(work, "checkout", "-q", "-b", "main")
    (work / "queues").mkdir()
    (work / "queues" / "a.yaml").write_text("kind: Queue\ncluster: x\n")
    (work / "queues" / "b.yaml").write_text("kind: Queue\ncluster: y\n")
    os.symlink("a.yaml", work / "queues" / "link.yaml")
    commit_and_push(work, "one", when=1_700_000_000)
    return bare


@pytest.fixture
def work(remote: Path) -> Path:
    return remote.parent / "work"


def test_sync_reads_the_committed_tree_not_the_working_tree(
    remote: Path, work: Path, tmp_path: Path
) -> None:
    (work / "queues" / "a.yaml").write_text("uncommitted\n")
    (work / "queues" / "new.yaml").write_text("uncommitted\n")
    # a local path source (the working clone itself) is read at its committed branch tip
    repo = ConfigRepo(str(work), "main", cache_dir=tmp_path / "cache")
    snap = repo.sync()
    assert snap.version == git(work, "rev-parse", "HEAD")
    assert set(snap.files) == {"queues/a.yaml", "queues/b.yaml", "queues/link.yaml"}
    assert snap.files["queues/a.yaml"].content == b"kind: Queue\ncluster: x\n"
    assert snap.files["queues/link.yaml"].symlink_target == "a.yaml"
    assert snap.files["queues/link.yaml"].content == b""
    first = snap.files["queues/a.yaml"].first_commit_time
    assert first is not None and first.timestamp() == 1_700_000_000
    # the same answer as the one-shot reader
    assert snap == snapshot_git(work, "HEAD")
    # the cache is a bare repository, never a checkout
    assert (repo.git_dir / "HEAD").exists() and not (repo.git_dir / "queues").exists()


def test_incremental_sync_reads_only_changed_blobs(
    remote: Path, work: Path, tmp_path: Path
) -> None:
    repo = ConfigRepo(str(remote), "main", cache_dir=tmp_path / "cache")
    repo.sync()
    assert repo.last_sync_stats is not None and repo.last_sync_stats.blobs_read == 3

    again = repo.sync()
    assert repo.last_sync_stats.blobs_read == 0
    assert repo.last_sync_stats.version == again.version

    (work / "queues" / "b.yaml").write_text("kind: Queue\ncluster: changed\n")
    commit_and_push(work, "change b", when=1_700_000_100)
    snap = repo.sync()
    stats = repo.last_sync_stats
    assert (stats.blobs_read, stats.modified, stats.added, stats.deleted) == (1, 1, 0, 0)
    assert snap.files["queues/b.yaml"].content == b"kind: Queue\ncluster: changed\n"
    # a modified file keeps the time it was first added
    b_first = snap.files["queues/b.yaml"].first_commit_time
    assert b_first is not None and b_first.timestamp() == 1_700_000_000

    (work / "queues" / "a.yaml").unlink()
    (work / "queues" / "c.yaml").write_text("kind: Queue\n")
    commit_and_push(work, "replace a with c", when=1_700_000_200)
    snap = repo.sync()
    stats = repo.last_sync_stats
    assert (stats.blobs_read, stats.added, stats.deleted) == (1, 1, 1)
    assert "queues/a.yaml" not in snap.files
    c_first = snap.files["queues/c.yaml"].first_commit_time
    assert c_first is not None and c_first.timestamp() == 1_700_000_200
    # incremental equals a fresh full read of the same commit
    fresh = ConfigRepo(str(remote), "main", cache_dir=tmp_path / "fresh").sync()
    assert snap == fresh


@pytest.mark.slow
def test_incremental_sync_equals_a_full_read_over_many_kinds_of_change(
    remote: Path, work: Path, tmp_path: Path
) -> None:
    """The tree is diffed (``git diff-tree``), and without symlinks only added or changed
    config files are read: after each commit the snapshot is a fresh full read's."""
    repo = ConfigRepo(str(remote), "main", cache_dir=tmp_path / "cache")
    last = repo.sync()
    project = work / "projects" / "p" / "operations"
    steps: list[tuple[str, Callable[[], None], int | None]] = [
        ("drop the symlink", lambda: (work / "queues" / "link.yaml").unlink(), 0),
        (
            "add ops",
            lambda: [
                (
                    project.mkdir(parents=True, exist_ok=True),
                    *[
                        (project / f"o{i}.yaml").write_text(f"kind: Operation\nname: o{i}\n")
                        for i in range(5)
                    ],
                )
            ],
            5,
        ),
        ("add a non-config file", lambda: (work / "README.md").write_text("hi\n"), 0),
        ("change one op", lambda: (project / "o1.yaml").write_text("kind: Operation\n"), 1),
        ("make one executable", lambda: (project / "o2.yaml").chmod(0o755), 1),
        ("delete one op", lambda: (project / "o3.yaml").unlink(), 0),
        (
            "a file becomes a directory",
            lambda: [
                (work / "queues" / "b.yaml").unlink(),
                (work / "queues" / "b.yaml").mkdir(),
                (work / "queues" / "b.yaml" / "x.yaml").write_text("kind: Queue\n"),
            ],
            1,
        ),
        ("a symlink again", lambda: os.symlink("o1.yaml", project / "l.yaml"), None),
        ("the symlink's target changes", lambda: (project / "o1.yaml").write_text("x: 1\n"), None),
        ("no symlink again", lambda: (project / "l.yaml").unlink(), None),
        ("after it", lambda: (project / "o4.yaml").write_text("kind: Operation\nname: z\n"), 1),
        ("a submodule named like a config file", lambda: _nested_repo(work / "queues/s.yaml"), 0),
        ("a config file beside it", lambda: (project / "o5.yaml").write_text("x: 5\n"), 1),
        ("no submodule again", lambda: shutil.rmtree(work / "queues/s.yaml"), 0),
    ]
    hinted = 0
    for n, (what, change, blobs) in enumerate(steps):
        change()
        commit_and_push(work, what, when=1_700_000_000 + 100 * (n + 1))
        snap = repo.sync()
        fresh = ConfigRepo(str(remote), "main", cache_dir=tmp_path / f"fresh{n}").sync()
        assert snap == fresh, what
        assert snap == snapshot_git(work, "HEAD"), what
        stats = repo.last_sync_stats
        assert stats is not None
        if blobs is not None:
            assert stats.blobs_read == blobs, what
        # what it says changed since the last snapshot holds every path that did
        hinted += snap.changes is not None
        if snap.changes is not None:
            assert snap.changes.since == last.version, what
            paths = snap.files.keys() | last.files.keys()
            differ = {p for p in paths if snap.files.get(p) != last.files.get(p)}
            assert differ <= snap.changes.paths, what
        last = snap
    assert hinted >= 8  # each step without a symlink before or after it


def _nested_repo(path: Path) -> None:
    """A repository inside the work tree: ``git add`` records it as a submodule."""
    path.mkdir(parents=True)
    (path / "q.yaml").write_text("kind: Queue\n")
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "nested")


def test_a_last_commit_gone_from_the_cache_lists_the_whole_tree(
    remote: Path, work: Path, tmp_path: Path
) -> None:
    """The tree diff needs the last commit read; when git cannot find it (pruned from the
    cache), the sync lists the whole tree instead of failing."""
    repo = ConfigRepo(str(remote), "main", cache_dir=tmp_path / "cache")
    repo.sync()
    repo._version = "0123456789abcdef0123456789abcdef01234567"  # a pruned commit
    (work / "queues" / "b.yaml").write_text("kind: Queue\ncluster: changed\n")
    commit_and_push(work, "change b", when=1_700_000_100)
    snap = repo.sync()
    assert snap == ConfigRepo(str(remote), "main", cache_dir=tmp_path / "fresh").sync()
    assert snap.files["queues/b.yaml"].content == b"kind: Queue\ncluster: changed\n"


def test_sync_after_a_force_push_rereads_history(remote: Path, work: Path, tmp_path: Path) -> None:
    repo = ConfigRepo(str(remote), "main", cache_dir=tmp_path / "cache")
    repo.sync()
    git(work, "checkout", "-q", "--orphan", "rewritten")
    git(work, "rm", "-rqf", ".")
    (work / "queues").mkdir(exist_ok=True)
    (work / "queues" / "a.yaml").write_text("kind: Queue\ncluster: x\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "rewrite", when=1_800_000_000)
    git(work, "push", "-qf", "origin", "HEAD:main")
    snap = repo.sync()
    assert repo.last_sync_stats is not None and repo.last_sync_stats.blobs_read == 0
    assert set(snap.files) == {"queues/a.yaml"}
    first = snap.files["queues/a.yaml"].first_commit_time
    assert first is not None and first.timestamp() == 1_800_000_000


def test_a_force_push_keeps_what_each_entry_is(remote: Path, work: Path, tmp_path: Path) -> None:
    """Across a rewritten history the unchanged entries are kept with new first-commit
    times: a submodule stays a submodule (it became an empty regular file)."""
    _nested_repo(work / "queues" / "vendored")
    commit_and_push(work, "a submodule", when=1_700_000_100)
    repo = ConfigRepo(str(remote), "main", cache_dir=tmp_path / "cache")
    assert repo.sync().files["queues/vendored"].submodule
    git(work, "commit", "-q", "--amend", "-m", "rewritten", when=1_700_000_200)
    git(work, "push", "-qf", "origin", "HEAD:main")
    snap = repo.sync()
    assert snap == ConfigRepo(str(remote), "main", cache_dir=tmp_path / "fresh").sync()
    assert snap.files["queues/vendored"].submodule


def test_sync_errors_are_typed_and_one_line(remote: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cases = [
        (str(tmp_path / "missing"), "main", "no such file or directory"),
        (str(remote), "nope", "branch 'nope' not found"),
        (str(tmp_path), "main", "does not appear to be a git repository"),
        ("http://127.0.0.1:9/x.git", "main", "cannot fetch http://127.0.0.1:9/x.git"),
    ]
    for source, branch, expected in cases:
        with pytest.raises(GitSyncError) as info:
            ConfigRepo(source, branch, cache_dir=cache).sync()
        assert expected in str(info.value)
        assert "\n" not in str(info.value)
        assert "Traceback" not in str(info.value)


def test_credentials_are_redacted() -> None:
    assert redact("cannot fetch https://bot:s3cr3t@git.example/x") == (
        "cannot fetch https://***@git.example/x"
    )
    with pytest.raises(GitSyncError) as info:
        ConfigRepo("http://bot:s3cr3t@127.0.0.1:9/x.git", cache_dir=Path("/nonexistent/c")).sync()
    assert "s3cr3t" not in str(info.value)


# --- the status branch ------------------------------------------------------------------


def remote_log(remote: Path, branch: str = "reconciler/status") -> list[str]:
    return git(remote, "rev-list", f"refs/heads/{branch}").split()


def test_status_write_makes_one_commit_only_when_something_changed(
    remote: Path, tmp_path: Path
) -> None:
    repo = ConfigRepo(str(remote), cache_dir=tmp_path / "cache")
    status = StatusBranch(repo)
    assert status.read() == {}
    assert status.write({"status/gone.yaml": None}, "nothing") is None  # no branch, no commit
    first = status.write({"status/a.yaml": b"a: 1\n", "status/b.yaml": b"b: 1\n"}, "first")
    assert first is not None
    assert remote_log(remote) == [first]
    assert git(remote, "log", "-1", "--format=%P", first) == ""  # an orphan commit
    # the config branch is untouched
    assert git(remote, "ls-tree", "-r", "--name-only", first).split() == [
        "status/a.yaml",
        "status/b.yaml",
    ]
    # same content again: no commit
    assert status.write({"status/a.yaml": b"a: 1\n"}, "same") is None
    assert remote_log(remote) == [first]
    second = status.write({"status/a.yaml": b"a: 2\n", "status/b.yaml": None}, "second")
    assert second is not None
    assert remote_log(remote) == [second, first]
    assert git(remote, "log", "-1", "--format=%s|%an", second) == "second|dispatch-reconciler"
    assert status.read() == {"status/a.yaml": b"a: 2\n"}
    # another reader sees the same files
    other = StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "other"))
    assert other.read() == {"status/a.yaml": b"a: 2\n"}


def test_status_write_keeps_a_human_commit_and_rebuilds_on_it(remote: Path, tmp_path: Path) -> None:
    status = StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "cache"))
    first = status.write({"status/a.yaml": b"a: 1\n"}, "first")
    human = tmp_path / "human"
    git(tmp_path, "clone", "-q", "-b", "reconciler/status", str(remote), str(human))
    (human / "NOTES.md").write_text("hand-written\n")
    git(human, "add", "-A")
    git(human, "commit", "-qm", "human note")
    git(human, "push", "-q", "origin", "reconciler/status")
    human_tip = git(human, "rev-parse", "HEAD")
    second = status.write({"status/a.yaml": b"a: 2\n"}, "second")
    assert second is not None
    assert remote_log(remote) == [second, human_tip, first]
    assert git(remote, "show", f"{second}:NOTES.md") == "hand-written"


_ZERO = "0" * 40
RACE_ROUNDS = int(os.environ.get("RECONCILER_RACE_ROUNDS", "50"))


def ref_updates(remote: Path, branch: str) -> list[tuple[str, str]]:
    """Every (old, new) update of ``branch`` the bare remote accepted, from its reflog."""
    log = remote / "logs" / "refs" / "heads" / branch
    return [tuple(line.split(" ", 2)[:2]) for line in log.read_text().splitlines()]  # type: ignore[misc]


def forced_updates(remote: Path, branch: str) -> list[tuple[str, str]]:
    """Updates of ``branch`` that were not fast-forwards (a force push, or a deletion)."""
    out = []
    for old, new in ref_updates(remote, branch):
        if old == _ZERO:
            continue  # the branch was created
        ff = subprocess.run(["git", "merge-base", "--is-ancestor", old, new], cwd=remote)
        if new == _ZERO or ff.returncode != 0:
            out.append((old, new))
    return out


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_status_write_races_humans_without_losing_either_or_forcing(
    remote: Path, work: Path, tmp_path: Path
) -> None:
    """R4: humans push to the status branch and to the config branch while the reconciler
    writes status, RACE_ROUNDS rounds. Nothing is lost and no update is a force push: the
    bare remote's reflog records every accepted ref update, each must be a fast-forward."""
    git(remote, "config", "core.logAllRefUpdates", "always")
    rounds = RACE_ROUNDS
    status = StatusBranch(
        ConfigRepo(str(remote), cache_dir=tmp_path / "cache"), max_attempts=50, backoff=0.001
    )
    assert status.write({"status/seed.yaml": b"seed\n"}, "seed") is not None
    human = tmp_path / "human"
    git(tmp_path, "clone", "-q", "-b", "reconciler/status", str(remote), str(human))
    human_commits: list[str] = []
    config_commits: list[str] = []
    errors: list[BaseException] = []

    human_attempts = 0

    def push_human(clone: Path, branch: str, path: str, text: str, into: list[str]) -> None:
        nonlocal human_attempts
        while True:
            human_attempts += 1
            git(clone, "fetch", "-q", "origin", branch)
            git(clone, "reset", "-q", "--hard", "FETCH_HEAD")
            (clone / path).parent.mkdir(parents=True, exist_ok=True)
            (clone / path).write_text(text)
            git(clone, "add", "-A")
            git(clone, "commit", "-qm", f"human {path}")
            pushed = subprocess.run(
                ["git", "push", "-q", "origin", f"HEAD:{branch}"],
                cwd=clone,
                env=ENV,
                capture_output=True,
            )
            if pushed.returncode == 0:
                into.append(git(clone, "rev-parse", "HEAD"))
                return

    def human_loop() -> None:
        try:
            for i in range(rounds):
                push_human(
                    human, "reconciler/status", f"notes/{i}.md", f"note {i}\n", human_commits
                )
                if i % 2 == 0:
                    push_human(work, "main", f"docs/{i}.md", f"doc {i}\n", config_commits)
        except BaseException as err:  # surfaced below
            errors.append(err)

    thread = threading.Thread(target=human_loop)
    thread.start()
    tips: list[str] = []
    ours: list[str] = []
    raced = 0
    for i in range(rounds):
        sha = status.write({f"status/op{i % 5}.yaml": f"round {i}\n".encode()}, f"cycle {i}")
        assert sha is not None
        raced += status.attempts > 1
        ours.append(sha)
        tips.append(git(remote, "rev-parse", "refs/heads/reconciler/status"))
    thread.join(timeout=180)
    assert not thread.is_alive()
    assert not errors, errors
    assert len(human_commits) == rounds and len(config_commits) == (rounds + 1) // 2

    final = git(remote, "rev-parse", "refs/heads/reconciler/status")
    history = set(remote_log(remote))
    # every human commit and every status write is in the final history
    assert set(human_commits) <= history
    assert set(ours) <= history
    assert set(config_commits) <= set(remote_log(remote, "main"))
    # linear: no merges, and every tip seen along the way is an ancestor of the final one
    assert git(remote, "rev-list", "--merges", final) == ""
    for tip in tips:
        subprocess.run(["git", "merge-base", "--is-ancestor", tip, final], cwd=remote, check=True)
    # never a force push, on either branch: every accepted update is a fast-forward
    updates = ref_updates(remote, "reconciler/status")
    assert len(updates) >= 2 * rounds  # every push of ours and of the human is recorded
    assert forced_updates(remote, "reconciler/status") == []
    assert forced_updates(remote, "main") == []
    # the status writer never touched the config branch
    authors = git(remote, "log", "--format=%an", "main").split()
    assert "dispatch-reconciler" not in authors
    # the final tree holds all human notes and the last status content
    names = git(remote, "ls-tree", "-r", "--name-only", final).split()
    assert {f"notes/{i}.md" for i in range(rounds)} <= set(names)
    for k in range(5):
        last = max(i for i in range(rounds) if i % 5 == k)
        assert git(remote, "show", f"{final}:status/op{k}.yaml") == f"round {last}"
    # the check itself can fail: a force push to a scratch branch is caught
    git(human, "push", "-q", "origin", f"{human_commits[-1]}:refs/heads/scratch")
    git(human, "push", "-q", "--force", "origin", f"{human_commits[0]}:refs/heads/scratch")
    assert forced_updates(remote, "scratch") == [(human_commits[-1], human_commits[0])]
    print(f"R4: {rounds} rounds, {raced} status writes retried, human pushes {human_attempts}")


def test_status_write_gives_up_with_a_typed_error(remote: Path, tmp_path: Path) -> None:
    status = StatusBranch(
        ConfigRepo(str(remote), cache_dir=tmp_path / "cache"), max_attempts=3, sleep=lambda s: None
    )
    assert status.write({"status/a.yaml": b"1\n"}, "first") is not None
    pushes = 0
    human = tmp_path / "human"
    git(tmp_path, "clone", "-q", "-b", "reconciler/status", str(remote), str(human))
    real_push = status._push

    def push_after_human(commit: str) -> str | None:
        nonlocal pushes
        pushes += 1
        (human / f"h{pushes}").write_text("x\n")
        git(human, "add", "-A")
        git(human, "commit", "-qm", "human wins")
        git(human, "push", "-q", "origin", "reconciler/status")
        return real_push(commit)

    status._push = push_after_human  # type: ignore[method-assign]
    with pytest.raises(GitSyncError) as info:
        status.write({"status/a.yaml": b"2\n"}, "second")
    assert "after 3 attempts" in str(info.value)
    assert "non-fast-forward" in str(info.value)
    assert pushes == 3
    # nothing was forced: the human's last commit is the tip
    assert git(remote, "rev-parse", "refs/heads/reconciler/status") == git(
        human, "rev-parse", "HEAD"
    )


def test_status_branch_on_a_bare_clone_path(remote: Path, tmp_path: Path) -> None:
    clone = tmp_path / "clone.git"
    git(tmp_path, "clone", "-q", "--bare", str(remote), str(clone))
    status = StatusBranch(clone)  # pushes to the clone's origin
    sha = status.write({"status/x.yaml": b"x\n"}, "from a bare clone")
    assert sha is not None
    assert remote_log(remote) == [sha]
    with pytest.raises(GitSyncError, match="not a Git repository"):
        StatusBranch(tmp_path / "nowhere")


def test_status_write_of_many_files_goes_in_one_pack_and_reads_back(
    remote: Path, tmp_path: Path
) -> None:
    status = StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "cache"))
    # 300 files, 151 distinct contents (one empty, one of 70 KB: a multi-byte size header)
    files = {f"status/op-{i:03d}.yaml": f"phase: {i % 150}\n".encode() for i in range(299)}
    files["status/empty.yaml"] = b""
    files["status/big.yaml"] = b"x: " + b"y" * 70_000 + b"\n"
    status.read()  # the cache exists
    pack_dir = Path(status._git.git_dir) / "objects" / "pack"
    packs_before = len(list(pack_dir.glob("*.pack")))
    sha = status.write(files, "many")
    assert sha is not None
    packs = list(pack_dir.glob("*.pack"))
    assert len(packs) == packs_before + 1  # the blobs went in one pack, not 300 loose objects
    assert git(remote, "fsck", "--no-progress", "--strict") == ""
    assert StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "other")).read() == files
    # what git itself hashes for a blob is what the pack was indexed by
    blob = git(remote, "rev-parse", f"{sha}:status/big.yaml")
    hashed = subprocess.run(
        ["git", "hash-object", "--stdin"], input=files["status/big.yaml"], capture_output=True
    )
    assert blob == hashed.stdout.decode().strip()


def test_status_write_builds_only_the_paths_it_changes_with_any_name(
    remote: Path, tmp_path: Path
) -> None:
    status = StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "cache"))
    odd = ['status/p/0a1/q"uote.yaml', "status/p/0a1/back\\slash.yaml", "status/p/é t.yaml"]
    files = {path: f"n: {i}\n".encode() for i, path in enumerate(odd)}
    files["status/p/fff/last.yaml"] = b"n: last\n"
    first = status.write(files, "odd names")
    assert first is not None
    assert status.read() == files
    # the folder whose last file goes is gone from the tree, and git finds it well formed
    second = status.write({"status/p/fff/last.yaml": None}, "the last of a folder")
    assert second is not None
    assert "status/p/fff" not in git(remote, "ls-tree", "-r", "-t", "--name-only", second)
    assert git(remote, "fsck", "--no-progress", "--strict") == ""
    assert git(remote, "log", "-1", "--format=%P", second) == first
    # the unchanged folder is the same tree object: nothing but the changed path was built
    assert git(remote, "rev-parse", f"{first}:status/p/0a1") == git(
        remote, "rev-parse", f"{second}:status/p/0a1"
    )
    assert StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "other")).read() == {
        p: d for p, d in files.items() if p != "status/p/fff/last.yaml"
    }
    # the ref each build is made on is gone once it is built: the cache keeps no such refs
    refs = git(Path(status._git.git_dir), "for-each-ref", "--format=%(refname)")
    assert "status-build" not in refs


def _status_file(phase: str) -> bytes:
    return (
        "operation: p/a\n"
        f"phase: {phase}\n"
        "generation: 1\n"
        "cluster: local\n"
        "namespace: ns\n"
        "workload: p-a-g1\n"
    ).encode()


def test_a_follower_reads_the_status_branch_again_only_when_its_tip_moves(
    remote: Path, tmp_path: Path
) -> None:
    leader = StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "leader"))
    assert leader.write({"status/p/a.yaml": _status_file("Running")}, "one") is not None
    now = [0.0]
    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    follower = StatusPublisher(
        StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "follower")),
        clock=clock,
        follow_interval=10.0,
    )
    start = follower.recorded()  # as make_runtime seeds it
    assert start.seen["p/a"].phase is Phase.RUNNING
    assert follower.leader_record() is None  # fetched: the tip has not moved
    assert leader.write({"status/p/a.yaml": _status_file("Succeeded")}, "two") is not None
    now[0] = 5.0
    assert follower.leader_record() is None  # within the interval: not fetched
    now[0] = 10.0
    moved = follower.leader_record()
    assert moved is not None and moved.seen["p/a"].phase is Phase.SUCCEEDED
    now[0] = 20.0
    assert follower.leader_record() is None  # read once per move


def test_files_since_an_earlier_commit_are_the_files_read_whole(
    remote: Path, tmp_path: Path
) -> None:
    """A follower reads only the blobs a leader's write changed: the same files as a whole
    read, for files changed, added, deleted, turned into a symlink, and outside status/."""
    leader = StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "leader"))
    follower = StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "follower"))
    leader.write({f"status/p/{c}.yaml": f"{c}: 1\n".encode() for c in "abcd"}, "one")
    old = follower.fetch()
    assert old is not None
    known = follower.files_at(old)
    leader.write({"status/p/a.yaml": b"a: 2\n", "status/p/e.yaml": b"e: 1\n"}, "two")
    human = tmp_path / "human"
    git(tmp_path, "clone", "-q", "-b", "reconciler/status", str(remote), str(human))
    (human / "status" / "p" / "b.yaml").unlink()
    (human / "status" / "p" / "c.yaml").unlink()
    os.symlink("d.yaml", human / "status" / "p" / "c.yaml")
    (human / "NOTES.md").write_text("hand-written\n")
    git(human, "add", "-A")
    git(human, "commit", "-qm", "human")
    git(human, "push", "-q", "origin", "reconciler/status")
    tip = follower.fetch()
    assert tip is not None
    since = follower.files_at(tip, (old, known))
    assert since == follower.files_at(tip)
    assert since == {
        "status/p/a.yaml": b"a: 2\n",
        "status/p/d.yaml": b"d: 1\n",
        "status/p/e.yaml": b"e: 1\n",
    }
    assert since["status/p/d.yaml"] is known["status/p/d.yaml"]  # not read again
    # an earlier commit the clone no longer has: read whole
    assert follower.files_at(tip, ("0" * 40, known)) == since


def test_a_commit_dated_past_year_9999_is_blamed_and_listed(
    remote: Path, work: Path, tmp_path: Path
) -> None:
    """Git takes any committer date; the serve pages' blame and status history raised on
    one past year 9999 (a datetime's last year). Its time is held at the last one."""
    (work / "queues" / "a.yaml").write_text("kind: Queue\ncluster: future\n")
    git(work, "add", "-A")
    future = "@1000000000000 +0000"
    env = dict(ENV, GIT_AUTHOR_DATE=future, GIT_COMMITTER_DATE=future)
    subprocess.run(["git", "commit", "-qm", "future"], cwd=work, env=env, check=True)
    git(work, "push", "-q", "origin", "HEAD:main")
    repo = ConfigRepo(str(remote), "main", cache_dir=tmp_path / "cache")
    snap = repo.sync()
    _, line = repo.blame(snap.version, "queues/a.yaml")  # line 2: the future commit's
    assert line.committed_at == datetime.max.replace(tzinfo=UTC)
    assert snap.files["queues/b.yaml"].first_commit_time == datetime.fromtimestamp(
        1_700_000_000, UTC
    )


def test_a_repository_that_starts_with_a_dash_is_never_a_git_option(
    remote: Path, tmp_path: Path
) -> None:
    """A config repo, status repo or ``--repo`` URL such as ``--upload-pack=CMD ://x`` is a
    repository that cannot be read: git took it for an option of fetch, push and clone,
    and ran CMD."""
    marker = tmp_path / "ran"
    fetching = f"--upload-pack=touch {marker} ://x"
    pushing = f"--receive-pack=touch {marker} ://x"
    with pytest.raises(GitSyncError):
        ConfigRepo(fetching, "main", cache_dir=tmp_path / "cache").sync()
    config = ConfigRepo(str(remote), "main", cache_dir=tmp_path / "cache")
    config.sync()
    with pytest.raises(GitSyncError):
        StatusBranch(config, remote=fetching).read()
    with pytest.raises(GitSyncError):
        StatusBranch(config, remote=pushing, max_attempts=1).write({"status/a": b"1\n"}, "m")
    with pytest.raises(GitSyncError):
        WorkClone.cached(fetching, "main", tmp_path / "clones")
    assert not marker.exists()


def _side_then_main(work: Path, side: str, main: str) -> None:
    """A branch ``side`` that adds ``queues/<side>.yaml`` (committed at 100, not pushed),
    then main adding ``queues/<main>.yaml`` (at 200, pushed)."""
    git(work, "checkout", "-q", "-b", "side")
    (work / "queues" / f"{side}.yaml").write_text("kind: Queue\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "side", when=1_700_000_100)
    git(work, "checkout", "-q", "main")
    (work / "queues" / f"{main}.yaml").write_text("kind: Queue\n")
    commit_and_push(work, "main", when=1_700_000_200)


def test_a_merged_branch_that_added_a_path_earlier_gives_its_time_as_a_full_read_does(
    remote: Path, work: Path, tmp_path: Path
) -> None:
    """A branch merged in added a path before the main line did: its first-commit time
    is the branch's along an incremental sync as on a full read, whether the last
    snapshot held the path (what changed then says so) or not (git's history
    simplification, given paths, follows one side of a merge)."""
    (work / "queues" / "link.yaml").unlink()
    commit_and_push(work, "no symlink", when=1_700_000_050)
    repo = ConfigRepo(str(remote), "main", cache_dir=tmp_path / "cache")
    before = ConfigRepo(str(remote), "main", cache_dir=tmp_path / "before")
    before.sync()  # before either add
    _side_then_main(work, "both", "both")
    last = repo.sync()  # both.yaml first added at 200 on this history
    git(work, "merge", "-q", "--no-ff", "-m", "merge", "side", when=1_700_000_300)
    git(work, "push", "-q", "origin", "HEAD:main")
    snap = repo.sync()
    assert snap == ConfigRepo(str(remote), "main", cache_dir=tmp_path / "fresh").sync()
    assert before.sync() == snap
    first = snap.files["queues/both.yaml"].first_commit_time
    assert first is not None and first.timestamp() == 1_700_000_100
    assert snap.changes is not None and snap.changes.since == last.version
    assert "queues/both.yaml" in snap.changes.paths


def test_a_merge_whose_second_parent_is_the_last_commit_read_is_a_fast_forward(
    remote: Path, work: Path, tmp_path: Path
) -> None:
    """The last commit read reached through a merge's second parent (the main line merged
    into a branch, pushed as main): read as what changed since it, equal to a full read."""
    (work / "queues" / "link.yaml").unlink()
    commit_and_push(work, "no symlink", when=1_700_000_050)
    _side_then_main(work, "side", "main")
    repo = ConfigRepo(str(remote), "main", cache_dir=tmp_path / "cache")
    last = repo.sync()
    git(work, "checkout", "-q", "side")
    git(work, "merge", "-q", "--no-ff", "-m", "merge main", "main", when=1_700_000_300)
    git(work, "push", "-q", "origin", "HEAD:main")
    snap = repo.sync()
    assert snap == ConfigRepo(str(remote), "main", cache_dir=tmp_path / "fresh").sync()
    assert snap.changes is not None and snap.changes.since == last.version
    assert snap.changes.paths == {"queues/side.yaml"}


def test_a_records_history_follows_it_from_the_flat_layout_into_its_bucket(
    remote: Path, tmp_path: Path
) -> None:
    """A branch written before the buckets, then moved by a write: the record's versions
    are those of both paths, each commit's at its bucket's path when it holds one."""
    branch = StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "cache"))
    path, flat = record_paths("p/a")
    branch.write({flat: _status_file("Queued")}, "one")
    branch.write({flat: _status_file("Running")}, "two")
    branch.write({flat: None, path: _status_file("Running").replace(b"ns", b"ns2")}, "moved")
    branch.write({"status/p/other.yaml": _status_file("Queued")}, "another record")
    branch.write({path: _status_file("Succeeded")}, "three")
    versions = branch.file_history(path, flat)
    assert [data.split(b"\n")[1] for _, _, data in versions] == [
        b"phase: Queued",
        b"phase: Running",
        b"phase: Running",  # the move: its bucket's version
        b"phase: Succeeded",
    ]
    assert b"namespace: ns2" in versions[2][2]
    assert len(branch.file_history(path)) == 2  # its bucket's alone
    branch.write({path: None}, "removed")
    assert len(branch.file_history(path, flat)) == 4  # a commit that deleted it: no version
