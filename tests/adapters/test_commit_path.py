"""A commit's snapshot, compile and plan, each O(what changed), along a real Git history:
after every sync they equal a fresh full read of the same commit, its compile without a
cache and a full plan, byte for byte. The histories have the shapes a config repo's
branch takes: edits, files added, removed, moved between projects, made executable or
symlinks, turned into directories, presets and defaults moving operations between
queues, workflows' children added and removed, pauses, stops, invalid commits then
fixed, empty commits, merges of older branches, several commits fetched at once,
force-pushes back to an earlier tree, and a restart (the Git cache kept) between two."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.builders import NOW
from support.git_commands import git

from reconciler.adapters.git import ConfigRepo
from reconciler.core.compile import CompileCache, compile_repo
from reconciler.core.compile import cache as cache_module
from reconciler.core.plan.groups import PlanCache, plan_repo_by_groups
from reconciler.core.plan.planner import plan_repo
from reconciler.core.types import CompiledRepo, ObservedOperation, Phase
from reconciler.core.views.plan_render import plan_to_json

CLUSTER = "kind: Cluster\nname: {name}\nkubeconfig:\n  path: /nowhere\n{extra}"
ORG = "kind: Org\nname: org\ndefaults:\n  queue: qc\n"
QUEUE = "kind: Queue\nname: {name}\ncluster: {cluster}\npriority: {priority}\n{extra}"
PROJECT = "kind: Project\nname: {name}\nnamespace: {name}\ndefaults:\n  queue: {queue}\n"
PRESET = "kind: Preset\nname: pick\npatchStrategy: replace\nqueue: {queue}\n"
OP = (
    "kind: Operation\nname: {name}\n{presets}run:\n  kind: job\n  container:\n"
    "    image: busybox\n    resources:\n      requests: {{cpu: {cpu}}}\n{extra}"
)
MATRIX = (
    "kind: Operation\nname: sweep\nqueue: {queue}\nrun:\n  kind: job\n  container:\n"
    "    image: busybox\n    args: ['{{{{ params.lr }}}}']\nmatrix:\n  kind: grid\n"
    "  concurrency: 2\n  params:\n    lr: [{values}]\n"
)
DAG = (
    "kind: Operation\nname: sweep\nqueue: {queue}\nrun:\n  kind: job\n  container:\n"
    "    image: busybox\ndag:\n  concurrency: 1\n  operations:\n    - name: a\n"
    "    - name: b\n      dependencies: [a]\n{more}"
)
STEPS = (
    "workflow",
    "edit",
    "add",
    "remove",
    "stop",
    "move",
    "preset",
    "defaults",
    "pause",
    "limit",
    "break",
    "fix",
    "chmod",
    "symlink",
    "directory",
    "empty",
    "merge",
    "force",
    "rename-queue",
    "restart",
)


class History:
    """A work clone of a bare remote, committed to one random step at a time."""

    def __init__(self, root: Path, ops: int) -> None:
        self.remote = root / "remote.git"
        self.work = root / "work"
        git(root, "init", "-q", "--bare", "-b", "main", str(self.remote))
        git(root, "clone", "-q", str(self.remote), str(self.work))
        git(self.work, "checkout", "-q", "-b", "main")
        self.when = 1_700_000_000
        self.write("reconciler.yaml", ORG)
        self.write("clusters/c1.yaml", CLUSTER.format(name="c1", extra=""))
        self.write("clusters/c2.yaml", CLUSTER.format(name="c2", extra="concurrency: 3\n"))
        for name, cluster, priority in (("qa", "c1", 50), ("qb", "c2", 40), ("qc", "c1", 10)):
            self.queue(name, cluster, priority, "")
        self.write("presets/pick.yaml", PRESET.format(queue="qb"))
        for project in ("p", "r"):
            self.write(f"projects/{project}/project.yaml", PROJECT.format(name=project, queue="qa"))
        for n in range(ops):
            self.op("p" if n % 3 else "r", f"o{n:03}", n)
        self.write("projects/p/operations/sweep.yaml", MATRIX.format(queue="qc", values="1, 2"))
        self.commit("first")

    def write(self, path: str, text: str) -> None:
        file = self.work / path
        if file.is_symlink() or file.is_file():
            file.unlink()
        elif file.is_dir():
            shutil.rmtree(file)
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)

    def queue(self, name: str, cluster: str, priority: int, extra: str) -> None:
        text = QUEUE.format(name=name, cluster=cluster, priority=priority, extra=extra)
        self.write(f"queues/{name}.yaml", text)

    def op(self, project: str, name: str, n: int, extra: str = "") -> None:
        presets = "presets: [pick]\n" if n % 4 == 0 else ""
        text = OP.format(name=name, presets=presets, cpu=1 + n % 3, extra=extra)
        self.write(f"projects/{project}/operations/{name}.yaml", text)

    def ops(self) -> list[Path]:
        paths = self.work.glob("projects/*/operations/*.yaml")
        return sorted(p for p in paths if p.stem != "sweep" and p.is_file())

    def commit(self, message: str, when: int | None = None) -> None:
        self.when += 100
        git(self.work, "add", "-A")
        git(self.work, "commit", "-q", "--allow-empty", "-m", message, when=when or self.when)

    def push(self, force: bool = False) -> None:
        git(self.work, "push", "-q", *(["-f"] if force else []), "origin", "HEAD:main")

    def step(self, kind: str, n: int) -> None:
        """One commit (a merge: three) of the change ``kind``, chosen by ``n``."""
        ops = self.ops()
        pick = ops[n % len(ops)] if ops else None
        parent = subprocess.run(
            ["git", "rev-parse", "-q", "--verify", "HEAD~1"], cwd=self.work, capture_output=True
        )
        older = "HEAD~1" if parent.returncode == 0 and n % 2 else "HEAD"
        if kind == "force" and older != "HEAD":  # back to an earlier tree (a revert by force)
            git(self.work, "reset", "-q", "--hard", "HEAD~1")
            return self.push(force=True)
        if kind == "force":  # the last commit rewritten
            self.write("README.md", f"rewritten {n}\n")
            self.when += 100
            git(self.work, "add", "-A")
            git(self.work, "commit", "-q", "--amend", "-m", "amended", when=self.when)
            return self.push(force=True)
        if kind == "merge":  # a branch from an older commit, dated before the main line's
            # (or after: a skewed clock)
            side = f"side{self.when}"
            git(self.work, "branch", side, older)
            git(self.work, "checkout", "-q", side)
            self.op("p", f"m{n:03}", n)
            if pick is not None and n % 3 == 0 and pick.is_file():
                pick.write_text(pick.read_text() + "# side\n")
            self.commit("side", when=self.when + (10_000 if n % 5 == 0 else -10_000))
            git(self.work, "checkout", "-q", "main")
            self.op("r" if n % 2 else "p", f"m{n:03}", n)  # the same path, on both sides
            self.commit("main")
            self.when += 100
            git(
                self.work,
                "merge",
                "-q",
                "--no-ff",
                "-X",
                "ours",
                "-m",
                "merge",
                side,
                when=self.when,
            )
            return self.push()
        if kind == "edit" and pick is not None:
            self.op(pick.parent.parent.name, pick.stem, n)
        elif kind == "workflow":  # children added, removed, moved to another queue
            queue = ("qa", "qb", "qc")[n % 3]
            if n % 2:
                more = "    - name: c\n      dependencies: [a, b]\n" if n % 4 == 1 else ""
                text = DAG.format(queue=queue, more=more)
            else:
                text = MATRIX.format(queue=queue, values=", ".join(map(str, range(n % 5 + 1))))
            self.write("projects/p/operations/sweep.yaml", text)
        elif kind == "add":
            self.op("p" if n % 2 else "r", f"n{n:03}", n)
        elif kind == "remove" and pick is not None:
            pick.unlink()
        elif kind == "stop" and pick is not None:
            text = pick.read_text()
            stopped = "stopped: true\n"
            pick.write_text(text.replace(stopped, "") if stopped in text else text + stopped)
        elif kind == "move" and pick is not None:  # into the other project
            other = "r" if pick.parent.parent.name == "p" else "p"
            target = self.work / "projects" / other / "operations" / pick.name
            if not target.exists():
                git(self.work, "mv", str(pick), str(target))
        elif kind == "preset":
            self.write("presets/pick.yaml", PRESET.format(queue=("qa", "qb", "qc")[n % 3]))
        elif kind == "defaults":
            project = "p" if n % 2 else "r"
            text = PROJECT.format(name=project, queue=("qa", "qb", "qc")[n % 3])
            self.write(f"projects/{project}/project.yaml", text)
        elif kind in ("pause", "limit"):
            name = ("qa", "qb", "qc")[n % 3]
            extra = "paused: true\n" if kind == "pause" and n % 2 else ""
            extra += f"concurrency: {n % 3 + 1}\n" if kind == "limit" else ""
            self.queue(name, "c2" if n % 4 == 0 else "c1", 50 - 10 * (n % 3), extra)
        elif kind == "break" and pick is not None:
            pick.write_text(pick.read_text() + "run: [unclosed\n")
        elif kind == "fix":  # every operation file written again, valid
            for path in ops:
                self.op(path.parent.parent.name, path.stem, n)
            for name, cluster in (("qa", "c1"), ("qb", "c2"), ("qc", "c1")):
                if not (self.work / "queues" / f"{name}.yaml").is_file():
                    self.queue(name, cluster, 30, "")
        elif kind == "chmod" and pick is not None:
            pick.chmod(pick.stat().st_mode ^ 0o111)
        elif kind == "symlink" and pick is not None and len(ops) > 1:
            target = ops[(n + 1) % len(ops)]
            pick.unlink()
            os.symlink(os.path.relpath(target, pick.parent), pick)
        elif kind == "directory" and pick is not None:  # a file, then a directory of its name
            pick.unlink()
            pick.mkdir()
            (pick / "inner.yaml").write_text("kind: Operation\n")
        elif kind == "rename-queue":  # its operations then name a queue that is gone
            old = self.work / "queues" / "qb.yaml"
            if old.is_file():
                old.rename(self.work / "queues" / "qd.yaml")
                self.queue("qd", "c2", 40, "")
        self.commit(kind)
        if kind != "empty" or n % 2:
            self.push()
        return None


def _same_compile(cached: CompiledRepo, full: CompiledRepo, last: CompiledRepo | None) -> None:
    assert cached == full
    assert dict(cached.by_id) == dict(full.by_id)
    assert cached.stopped_ids == full.stopped_ids
    assert dict(cached.generations) == dict(full.generations)
    changes = cached.operation_changes
    if changes is not None:  # the last compile's operations, less those removed, and added
        assert last is not None and changes.since is last.operations
        count = Counter(map(id, changes.since))
        count.subtract(map(id, changes.removed))
        count.update(map(id, changes.added))
        assert +count == Counter(map(id, cached.operations))


def _observed(compiled: CompiledRepo) -> list[ObservedOperation]:
    """Some operations running, as a cycle observes them: in their queue."""
    ops = compiled.operations
    return [ObservedOperation(op.id, Phase.RUNNING, queue=op.queue) for op in ops[::5]]


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.integers(4, 14),
    st.lists(st.tuples(st.sampled_from(STEPS), st.integers(0, 40), st.booleans()), max_size=10),
)
@pytest.mark.slow
def test_a_commit_reads_compiles_and_plans_as_a_full_recompute(
    tmp_path_factory: pytest.TempPathFactory, ops: int, steps: list[tuple[str, int, bool]]
) -> None:
    root = tmp_path_factory.mktemp("history")
    history = History(root, ops)
    reader = ConfigRepo(str(history.remote), "main", cache_dir=root / "cache")
    compiles, plans = CompileCache(), PlanCache()
    last: CompiledRepo | None = None
    # blocks of 2 to 4 operations in the cache's order: split and emptied by a few commits
    with mock.patch.object(cache_module, "_BLOCK", 2):
        for i, (kind, n, sync) in enumerate([("empty", 1, True), *steps]):
            history.step(kind, n)
            if kind == "restart":  # a new process: its Git cache kept, nothing in memory
                reader = ConfigRepo(str(history.remote), "main", cache_dir=root / "cache")
                compiles, plans, last = CompileCache(), PlanCache(), None
            if not sync and i < len(steps):
                continue  # another commit before the next fetch
            snap = reader.sync()
            fresh = ConfigRepo(str(history.remote), "main", cache_dir=root / f"fresh{i}").sync()
            assert snap == fresh, (kind, n)
            compiled = compile_repo(snap, cache=compiles)
            full = compile_repo(fresh)
            _same_compile(compiled, full, last)
            last = compiled
            if not compiled.valid:
                continue  # the last good config stays in force: planned as before
            observed = _observed(full)
            by_groups = plan_repo_by_groups(plans, compiled, observed, NOW)
            assert plan_to_json(by_groups) == plan_to_json(plan_repo(full, observed, NOW))
