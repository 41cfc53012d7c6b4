"""Compiler speed, measured side by side in one run (ratios, not absolute targets).

    PYTHONPATH=. python bench/compile_bench.py [N_OPERATIONS]
    PYTHONPATH=. python bench/compile_bench.py --incremental [N_OPERATIONS (default 10000)]

1. compile_repo on N operations vs. plain yaml.safe_load of the same files: the cost of
   strict loading + validation + merge + provenance per byte of YAML.
2. compile_operation (one op) vs. compile_repo (all): the lazy path `reconciler compile` uses.
3. first_commit_times in one `git log` pass vs. one `git log` per file.

With --incremental, the CPU time (one process, user + system) of the compiles the
reconciler does with its ``CompileCache``: the cold load (an empty cache), a commit adding
one operation, a commit changing a project preset that 1% of the operations apply, and
that last commit compiled from scratch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from reconciler.adapters.repo import first_commit_times, snapshot_worktree
from reconciler.core.compile import compile_operation, compile_repo
from reconciler.core.types import RepoFile, RepoSnapshot

TEMPLATE = Path(__file__).resolve().parent.parent / "config-repo-template"


def _repo(n: int) -> RepoSnapshot:
    files = dict(snapshot_worktree(TEMPLATE).files)
    for i in range(n):
        project = ("vision", "language")[i % 2]
        path = f"projects/{project}/operations/gen-{i}.yaml"
        body = (
            f"kind: Operation\nname: gen-{i}\npresets: [a100, data]\nrun:\n  container:\n"
            f"    command: [python, train.py]\n    args: [--seed, '{i}']\n"
            "    env: {A: '1', B: '2'}\n"
        )
        files[path] = RepoFile(path, body.encode())
    return RepoSnapshot(files)


def _best(fn: object, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def _cpu(fn: object) -> tuple[float, object]:
    start = time.process_time()
    out = fn()  # type: ignore[operator]
    return time.process_time() - start, out


def incremental(n: int) -> None:
    from reconciler.core.compile import CompileCache

    snap = _repo(n)
    files = dict(snap.files)
    preset = "projects/vision/presets/one-percent.yaml"
    files[preset] = RepoFile(preset, b"kind: Preset\nname: one-percent\nrun: {timeout: 11h}\n")
    for i in range(0, n, 100):  # 1% of the operations (all of them vision ones)
        path = f"projects/vision/operations/gen-{i}.yaml"
        body = files[path].content.replace(b"[a100, data]", b"[a100, data, one-percent]")
        files[path] = RepoFile(path, body)
    cache = CompileCache()
    rows = []
    snap = RepoSnapshot(dict(files))
    t, repo = _cpu(lambda: compile_repo(snap, cache=cache))
    assert repo.valid, repo.errors[:3]  # type: ignore[attr-defined]
    rows.append(("cold (an empty cache)", cache.compiled, t))
    new = "projects/language/operations/added.yaml"
    files[new] = RepoFile(new, files["projects/language/operations/gen-1.yaml"].content)
    files[new] = RepoFile(new, files[new].content.replace(b"gen-1\n", b"added\n"))
    snap = RepoSnapshot(dict(files))
    before = cache.compiled
    t, _ = _cpu(lambda: compile_repo(snap, cache=cache))
    rows.append(("adds one operation", cache.compiled - before, t))
    files[preset] = RepoFile(preset, b"kind: Preset\nname: one-percent\nrun: {timeout: 10h}\n")
    snap = RepoSnapshot(dict(files))
    before = cache.compiled
    t, _ = _cpu(lambda: compile_repo(snap, cache=cache))
    rows.append(("changes a preset used by 1% of operations", cache.compiled - before, t))
    fresh = CompileCache()
    t, _ = _cpu(lambda: compile_repo(snap, cache=fresh))
    rows.append(("the same commit, compiled from scratch", fresh.compiled, t))
    for what, compiled, cpu in rows:
        print(f"{what:<44} {compiled:>7} compiled  {cpu:6.2f} s CPU")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--incremental":
        incremental(int(sys.argv[2]) if len(sys.argv) > 2 else 10_000)
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    snap = _repo(n)
    yaml_files = [f.content for p, f in snap.files.items() if p.endswith(".yaml")]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    t_yaml = _best(lambda: [yaml.load(c, Loader=loader) for c in yaml_files])
    t_repo = _best(lambda: compile_repo(snap))
    compiled = compile_repo(snap)
    assert compiled.valid, compiled.errors[:3]
    t_one = _best(lambda: compile_operation(snap, "vision/gen-0"))
    print(f"operations compiled:          {len(compiled.operations)}")
    per_op = t_repo / len(compiled.operations) * 1e6
    print(f"compile_repo:                 {t_repo * 1000:8.1f} ms ({per_op:.0f} us/op)")
    print(f"yaml.load ({loader.__name__}):  {t_yaml * 1000:8.1f} ms")
    print(f"ratio compile_repo / yaml.load:       {t_repo / t_yaml:6.1f}x")
    print(f"ratio compile_repo / compile_operation: {t_repo / t_one:6.1f}x")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = dict(
            os.environ,
            GIT_AUTHOR_NAME="b",
            GIT_AUTHOR_EMAIL="b@b",
            GIT_COMMITTER_NAME="b",
            GIT_COMMITTER_EMAIL="b@b",
        )
        git = ["git", "-C", str(root)]
        subprocess.run([*git, "init", "-q"], check=True, env=env)
        paths = []
        for batch in range(20):
            for j in range(10):
                p = root / f"f{batch}-{j}.yaml"
                p.write_text("a: 1\n")
                paths.append(p.name)
            subprocess.run([*git, "add", "-A"], check=True, env=env)
            subprocess.run([*git, "commit", "-qm", str(batch)], check=True, env=env)
        import git as gitpython

        r = gitpython.Repo(root)
        t_pass = _best(lambda: first_commit_times(r, "HEAD"), repeat=3)
        t_each = _best(
            lambda: [r.git.log("--diff-filter=A", "--format=%ct", "--", name) for name in paths],
            repeat=1,
        )
        print(
            f"first_commit_times, {len(paths)} files: one pass {t_pass * 1000:.1f} ms, "
            f"per file {t_each * 1000:.1f} ms, ratio {t_each / t_pass:.1f}x"
        )


if __name__ == "__main__":
    main()
