"""Issue 13, section 5: every hostile input is refused within a fixed budget, measured on
the real command in a child process: its peak RSS (``ru_maxrss`` of that very child, from
``wait4``) under 256 MiB and its CPU time a few seconds, for the template repo plus the bad
input. On the code before the fix, each of these grew past the budget (or hung).

Measured figures (2-core dev machine, shared) are in docs/reliability.md, R6.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from support.git_commands import git
from support.helpers import (
    BUDGET_KIB,
    Measured,
    http_get,
    peak_rss_kib,
    refused_port,
    run_measured,
    served_url,
    write_kubeconfig,
)
from support.hostile import OBSERVED, STATUS, alias_text_bomb, matrix_bomb
from support.paths import ROOT, TEMPLATE

from reconciler.adapters.git import ConfigRepo, StatusBranch
from reconciler.core.reporting.status import OperationStatus, dump_yaml, operation_path
from reconciler.core.types import Phase

CPU_SECONDS = 8.0  # "a few seconds": the template alone takes about 1 s of CPU
pytestmark = pytest.mark.timeout(300)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _reconciler(*args: str, cwd: Path | None = None) -> Measured:
    return run_measured(["-m", "reconciler", *args], env=_env(), cwd=cwd)


def _within_budget(m: Measured) -> None:
    print(f"peak {m.peak_kib / 1024:.0f} MiB, cpu {m.cpu:.2f} s, wall {m.wall:.2f} s")
    assert 0 < m.peak_kib < BUDGET_KIB, m
    assert m.cpu < CPU_SECONDS, m
    assert "Traceback" not in m.output and "internal error" not in m.output, m


def _repo(tmp_path: Path, files: dict[str, bytes]) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(TEMPLATE, root)
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return root


def _commit(root: Path) -> None:
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "template and the bad input")


def test_the_measure_sees_a_child_that_goes_over_the_budget(tmp_path: Path) -> None:
    (tmp_path / "greedy.py").write_text("b = bytearray(300 << 20)\nb[::4096] = b'x' * (300 << 8)\n")
    m = run_measured(["-m", "greedy"], env={**_env(), "PYTHONPATH": str(tmp_path)})
    assert m.returncode == 0 and m.peak_kib > BUDGET_KIB, m
    small = run_measured(["-m", "json.tool", "--help"], env=_env())
    assert 0 < small.peak_kib < 64 * 1024, small  # not the test process's memory


# --- config files --------------------------------------------------------------------------


def test_compiling_an_alias_text_bomb(tmp_path: Path) -> None:
    """1500 aliases of a 100 KB string: 150 MB of args once compiled (510 MB of RSS and
    12 s before the fix; 2.4 GB at 700 MB of text)."""
    op = "projects/vision/operations/bomb.yaml"
    root = _repo(tmp_path, {op: alias_text_bomb(100_000, 1500)})
    m = _reconciler("compile", "--repo", str(root), "vision/bomb", "-o", "json")
    assert m.returncode == 1, m
    assert f"{op}:6:10: the document expands to more than 1048576 characters" in m.output
    _within_budget(m)


def test_validating_a_matrix_substitution_bomb(tmp_path: Path) -> None:
    """200 children, each pasting a 1000-character parameter 2000 times: 400 MB of strings
    (out of memory, reported as an "internal error", at 2.4 GB before the fix)."""
    op = "projects/vision/operations/bomb.yaml"
    root = _repo(tmp_path, {op: matrix_bomb(200, 2000, 1000)})
    m = _reconciler("validate", "--repo", str(root))
    assert m.returncode == 1, m
    assert f"{op}:6:12: parameter substitution expands the workflow's children" in m.output
    _within_budget(m)


def test_ignored_files_on_disk_are_not_read(tmp_path: Path) -> None:
    """400 files of 2 MiB under docs/ (sparse: nothing on disk): the loader ignores them,
    so nothing reads them (400 MiB before the fix, 1 MiB + 1 of each)."""
    root = _repo(tmp_path, {})
    docs = root / "docs"
    docs.mkdir()
    for i in range(400):
        with (docs / f"page-{i}.png").open("wb") as fh:
            fh.truncate(2 << 20)
    m = _reconciler("validate", "--repo", str(root))
    assert m.returncode == 0, m
    _within_budget(m)


def _big_blob(root: Path, path: str, size: int) -> None:
    """Commit ``size`` zero bytes at ``path``, written as a loose object directly (``git
    hash-object`` takes seconds to compress it)."""
    header = b"blob %d\0" % size
    digest = hashlib.sha1(header)
    squeeze = zlib.compressobj(1)
    chunk = bytes(1 << 20)
    parts = [squeeze.compress(header)]
    for _ in range(size >> 20):
        digest.update(chunk)
        parts.append(squeeze.compress(chunk))
    parts.append(squeeze.flush())
    sha = digest.hexdigest()
    obj = root / ".git" / "objects" / sha[:2] / sha[2:]
    obj.parent.mkdir(parents=True, exist_ok=True)
    obj.write_bytes(b"".join(parts))
    git(root, "update-index", "--add", "--cacheinfo", f"100644,{sha},{path}")
    git(root, "commit", "-qm", f"add {path}")


@pytest.mark.parametrize("path", ["docs/dataset.bin", "queues/huge.yaml"])
def test_a_committed_256_mib_file_is_never_read_whole(tmp_path: Path, path: str) -> None:
    """A 256 MiB blob in the commit: not read at all where the loader does not look (docs/),
    its first 1 MiB + 1 byte where it does (refused as too large). Before the fix GitPython
    drained the rest of the blob in one read: 256 MiB more."""
    root = _repo(tmp_path, {})
    _commit(root)
    _big_blob(root, path, 256 << 20)
    m = _reconciler("plan", "--repo", str(root), "--base", "HEAD", "--head", "HEAD")
    if path.endswith(".yaml"):
        assert m.returncode == 1 and f"{path}:1:1: file is larger than the limit" in m.output, m
    else:
        assert m.returncode == 0, m
    _within_budget(m)


# --- --observed ----------------------------------------------------------------------------


def test_observed_dev_zero(tmp_path: Path) -> None:
    """``--observed /dev/zero`` read up to one byte past the limit (it hung, 1.9 GB)."""
    m = _reconciler("plan", "--repo", str(TEMPLATE), "--observed", "/dev/zero")
    assert m.returncode == 1, m
    assert "/dev/zero:1:1: file is larger than the limit of 1048576 bytes" in m.output, m
    _within_budget(m)


def test_observed_alias_text_bomb(tmp_path: Path) -> None:
    bomb = tmp_path / "observed.yaml"
    body = b'x: &s "' + b"v" * 200_000 + b'"\nentries: [' + b", ".join([b"*s"] * 2000) + b"]\n"
    bomb.write_bytes(body)
    m = _reconciler("plan", "--repo", str(TEMPLATE), "--observed", str(bomb))
    assert m.returncode == 1 and "characters of text (alias bomb?)" in m.output, m
    _within_budget(m)


@pytest.mark.parametrize("name", sorted(OBSERVED), ids=sorted(OBSERVED))
def test_every_hostile_observed_class_through_plan(tmp_path: Path, name: str) -> None:
    """Each class of ``hostile.OBSERVED`` (billion laughs, aliases of a long string, 5000
    levels of flow nesting and 300 of block nesting, Python, local and binary tags,
    5000-digit integers, ``1e400``, a 2 MiB file, bytes that are not UTF-8, NULs) through
    the real ``plan --observed``: the located error, within the budget (the in-process
    corpus test in test_bad_corpus.py checks the same messages without the measure)."""
    content, expect = OBSERVED[name]
    observed = tmp_path / "observed.yaml"
    observed.write_bytes(content)
    m = _reconciler("plan", "--repo", str(TEMPLATE), "--observed", str(observed))
    assert m.returncode == 1, m
    assert re.search(rf"observed\.yaml:\d+:\d+: .*{re.escape(expect)}", m.output), m
    _within_budget(m)


# --- the status branch: status, queues and serve -------------------------------------------


def _hostile_status_repo(tmp_path: Path, files: dict[str, bytes] | None = None) -> Path:
    """A Git repo of the template (plus ``files``) whose status branch holds every hostile
    status file of ``hostile.STATUS`` next to one good record."""
    root = _repo(tmp_path, files or {})
    _commit(root)
    status = {
        operation_path(f"vision/{name}"): content for name, (content, _) in sorted(STATUS.items())
    }
    status[operation_path("vision/good")] = dump_yaml(
        OperationStatus(operation="vision/train-resnet", phase=Phase.SUCCEEDED).to_dict()
    )
    assert StatusBranch(ConfigRepo(str(root), cache_dir=tmp_path / "writer")).write(
        status, "hostile status files"
    )
    return root


@pytest.mark.parametrize("command", ["status", "queues"])
def test_status_and_queues_on_a_hostile_status_branch(tmp_path: Path, command: str) -> None:
    """Alias bombs, deep nesting, tags, 5000-digit numbers and a 2 MiB file on the status
    branch: each a warning with its location (a billion laughs under ``message`` was a
    MemoryError before the fix)."""
    root = _hostile_status_repo(tmp_path)
    m = _reconciler(command, "--repo", str(root), "--cache-dir", str(tmp_path / "cache"))
    assert m.returncode == 0, m
    for name, (_, expect) in STATUS.items():
        where = re.escape(operation_path(f"vision/{name}"))
        assert re.search(rf"{where}:\d+:\d+: .*{re.escape(expect)}", m.output)
    _within_budget(m)


def test_serve_page_views_with_a_420_kb_queue_file_and_a_hostile_status_branch(
    tmp_path: Path,
) -> None:
    """``serve`` on a repo whose queue file is 420 KB (420 000 empty lines, valid) and whose
    status branch is hostile: the queue page and its JSON are served within the budget
    (blaming that file grew ``serve`` by 400 MB per view, 2.5 GB in the report)."""
    queue = (TEMPLATE / "queues" / "team-a.yaml").read_bytes() + b"\n" * 420_000
    root = _hostile_status_repo(tmp_path, {"queues/team-a.yaml": queue})
    with refused_port() as port:
        kubeconfig = write_kubeconfig(tmp_path / "gone.kubeconfig", f"https://127.0.0.1:{port}")
        log = tmp_path / "serve.log"
        args = [sys.executable, "-m", "reconciler", "serve", "--repo", str(root)]
        args += ["--cache-dir", str(tmp_path / "cache"), "--http", "127.0.0.1:0"]
        args += ["--interval", "1s", "--cluster-kubeconfig", f"local={kubeconfig}"]
        start = time.monotonic()
        proc = subprocess.Popen(
            args, env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
        )  # fmt: skip
        try:
            url = served_url(log)
            viewed = time.monotonic()
            for page in ("/queues/team-a", "/queues/team-a?partial=main", "/api/v1/queues/team-a"):
                body = http_get(url + page)
            settings = {s["key"]: s for s in json.loads(body)["settings"]}
            assert settings["priority"]["line"] > 0 and settings["priority"]["commit"]
            views = time.monotonic() - viewed
            peak = peak_rss_kib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    text = log.read_text()
    assert "Traceback" not in text, text
    print(f"serve: peak {peak / 1024:.0f} MiB, three page views {views:.2f} s")
    assert peak < BUDGET_KIB, f"peak {peak // 1024} MiB\n{text[-2000:]}"
    assert views < 30, f"three page views took {views:.1f} s (started {viewed - start:.1f} s)"
