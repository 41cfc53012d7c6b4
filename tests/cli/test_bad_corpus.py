"""Every file under tests/data/bad/ breaks the template repo in one way.

Each starts with ``# path: <where it goes in the repo>`` and ``# expect: <message>``; the
message must appear (as ``file:line:col: ...``) in ``reconciler validate``'s output, which
must exit 1 without a traceback. Inputs that cannot carry that header (empty files, a
leading BOM or binary, files over the size limit, symlinks) are built in the tests below.

``validate`` runs through the CLI for every case; its compile shares one ``ParseCache`` (as
the long-running reconciler does), so the unchanged template files are parsed once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.git_commands import git
from support.hostile import OBSERVED, STATUS
from support.paths import DATA, TEMPLATE

from reconciler.adapters.git import ConfigRepo, StatusBranch
from reconciler.adapters.repo import snapshot_git
from reconciler.cli import config_cmds
from reconciler.cli.main import cli
from reconciler.core.compile import compile_repo
from reconciler.core.load import MAX_FILE_BYTES, ParseCache
from reconciler.core.observation.observed import ObservedFileError, parse_observed
from reconciler.core.reporting.status import (
    OperationStatus,
    dump_yaml,
    operation_path,
    read_status,
)
from reconciler.core.types import Phase, RepoSnapshot

BAD = DATA / "bad"
CASES = sorted(BAD.glob("*.yaml"))
_LOCATED = re.compile(r"^\S+:\d+:\d+: \S")


pytestmark = pytest.mark.timeout(30)  # per case: no input may hang the loader
_CACHE = ParseCache()


@pytest.fixture(autouse=True)
def _shared_parse_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    def cached(snapshot: RepoSnapshot) -> object:
        return compile_repo(snapshot, parse_cache=_CACHE)

    monkeypatch.setattr(config_cmds, "compile_repo", cached)


def _validate(root: Path, expect: str) -> None:
    """``reconciler validate`` exits 1, without a traceback, and prints ``expect``."""
    result = CliRunner().invoke(cli, ["validate", "--repo", str(root)])
    output = result.output
    assert result.exit_code == 1, output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in output and "internal error" not in output
    assert expect in output, f"expected\n  {expect}\ngot\n{output}"


def _header(data: bytes) -> tuple[str, str]:
    lines = data.split(b"\n", 2)
    path = lines[0].decode().removeprefix("# path: ")
    expect = lines[1].decode().removeprefix("# expect: ")
    return path, expect


def test_corpus_is_large() -> None:
    assert len(CASES) + len(RAW) + len(LINKS) >= 200


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_bad_file(case: Path, tmp_path: Path) -> None:
    data = case.read_bytes()
    path, expect = _header(data)
    assert _LOCATED.match(expect), f"{case.name}: expectation must be file:line:col: message"
    root = tmp_path / "repo"
    shutil.copytree(TEMPLATE, root)
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    _validate(root, expect)
    if data.split(b"\n", 3)[2].startswith(b"# alone:"):  # its dependents are not blamed
        result = CliRunner().invoke(cli, ["validate", "--repo", str(root)])
        assert "invalid: 1 errors" in result.output, result.output


@pytest.mark.parametrize("case", CASES[:10], ids=[c.stem for c in CASES[:10]])
def test_bad_file_json(case: Path, tmp_path: Path) -> None:
    import json

    path, expect = _header(case.read_bytes())
    root = tmp_path / "repo"
    shutil.copytree(TEMPLATE, root)
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_bytes(case.read_bytes())
    result = CliRunner().invoke(cli, ["validate", "--repo", str(root), "-o", "json"])
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report["valid"] is False
    rendered = [f"{e['file']}:{e['line']}:{e['col']}: {e['message']}" for e in report["errors"]]
    assert any(expect in r for r in rendered)


# --- inputs that cannot carry a header -----------------------------------------------------

Q = "queues/extra.yaml"
RAW: dict[str, tuple[str, bytes, str]] = {
    "empty": (Q, b"", f"{Q}:1:1: file is empty"),
    "whitespace-only": (Q, b"  \n\n   \n", f"{Q}:1:1: file is empty"),
    "bom-only": (Q, b"\xef\xbb\xbf", f"{Q}:1:1: file is empty"),
    "bom-then-tab": (Q, b"\xef\xbb\xbf\tkind: Queue\n", f"{Q}:1:1: tab character"),
    "utf16-le": (Q, "kind: Queue\n".encode("utf-16-le").join([b"\xff\xfe", b""]), "UTF-16"),
    "utf16-be": (Q, b"\xfe\xff" + "kind: Queue\n".encode("utf-16-be"), "UTF-16"),
    "png": (Q, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", f"{Q}:1:1: file is not valid UTF-8"),
    "nul-bytes": (Q, b"\x00" * 64, f"{Q}:1:1: unacceptable character #x0000"),
    "random-binary": (Q, bytes((i * 151 + 7) % 256 for i in range(4096)), f"{Q}:1:"),
    "over-size-limit": (
        Q,
        b"kind: Queue\ncluster: local\ndescription: >\n" + b"  " + b"x" * MAX_FILE_BYTES + b"\n",
        f"{Q}:1:1: file is larger than the limit of {MAX_FILE_BYTES} bytes",
    ),
    "over-size-limit-operation": (
        "projects/vision/operations/big.yaml",
        b"#" * (MAX_FILE_BYTES + 1),
        f"file is larger than the limit of {MAX_FILE_BYTES} bytes",
    ),
}


@pytest.mark.parametrize("name", sorted(RAW))
def test_raw_bad_file(name: str, tmp_path: Path) -> None:
    path, data, expect = RAW[name]
    root = tmp_path / "repo"
    shutil.copytree(TEMPLATE, root)
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_bytes(data)
    _validate(root, expect)


# --- symlinks: refused on disk (validate) and in a commit (snapshot_git) -------------------

LINKS: dict[str, tuple[str, str, str]] = {
    "absolute": ("queues/evil.yaml", "/etc/passwd", "symlink to '/etc/passwd' leaves the repo"),
    "up-and-out": (
        "projects/vision/operations/evil.yaml",
        "../../../../etc/passwd",
        "symlink to '../../../../etc/passwd' leaves the repo",
    ),
    "just-out": ("queues/evil.yaml", "../../x.yaml", "symlink to '../../x.yaml' leaves the repo"),
    "directory-out": ("presets/evil", "/etc", "symlink to '/etc' leaves the repo"),
    "root-itself": (
        "queues/evil.yaml",
        "..",
        "symlink loop: '..' is a directory that contains the link",
    ),
    "into-git-dir": ("queues/evil.yaml", "../.git/config", "does not exist"),
    "dangling": ("queues/evil.yaml", "nowhere.yaml", "symlink target 'queues/nowhere.yaml'"),
    "loop": ("queues/evil.yaml", "evil.yaml", "symlink loop"),
    "via-an-escaping-link": (
        "queues/evil.yaml",
        "../presets/out/passwd",
        "symlink to '../presets/out/passwd' leaves the repo ('presets/out' links to '/etc')",
    ),
}


@pytest.mark.parametrize("name", sorted(LINKS))
def test_symlink_escape_is_refused_on_disk_and_in_git(name: str, tmp_path: Path) -> None:
    path, target, expect = LINKS[name]
    root = tmp_path / "repo"
    shutil.copytree(TEMPLATE, root)
    os.symlink("/etc", root / "presets" / "out")  # used by via-an-escaping-link
    os.symlink(target, root / path)
    located = f"{path}:1:1: "
    _validate(root, located)
    _validate(root, expect)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "evil link")
    # the committed tree, read directly and through the reconciler's Git sync
    synced = ConfigRepo(str(root), cache_dir=tmp_path / "cache").sync()
    for snapshot in (snapshot_git(root), synced):
        messages = [str(e) for e in compile_repo(snapshot).errors]
        assert any(m.startswith(located) and expect in m for m in messages), messages
        escaped = "presets/out:1:1: symlink to '/etc' leaves the repo"
        assert any(m.startswith(escaped) for m in messages), messages


# --- the other YAML inputs: --observed files and the status branch ----------------------------
# Read by the same strict loader as the config, with the same limits (issue 13, section 5).

OBSERVED_CASES = sorted((BAD / "observed").glob("*.yaml"))
STATUS_CASES = sorted((BAD / "status").glob("*.yaml"))


@pytest.mark.parametrize("case", OBSERVED_CASES, ids=[c.stem for c in OBSERVED_CASES])
def test_bad_observed_file(case: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``plan --observed FILE`` exits 1 with the located error, never a traceback."""
    data = case.read_bytes()
    path, expect = _header(data)
    assert _LOCATED.match(expect), f"{case.name}: expectation must be file:line:col: message"
    monkeypatch.chdir(tmp_path)
    (tmp_path / path).write_bytes(data)
    result = CliRunner().invoke(cli, ["plan", "--repo", str(TEMPLATE), "--observed", path])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert expect in result.output, f"expected\n  {expect}\ngot\n{result.output}"


@pytest.mark.parametrize("name", sorted(OBSERVED), ids=sorted(OBSERVED))
def test_hostile_observed_content_is_a_located_error(name: str) -> None:
    content, expect = OBSERVED[name]
    with pytest.raises(ObservedFileError) as err:
        parse_observed(content, "observed.yaml")
    (error,) = err.value.errors
    assert error.location.file == "observed.yaml" and error.location.line >= 1
    assert expect in error.message and len(error.message) < 400


@pytest.mark.parametrize("case", STATUS_CASES, ids=[c.stem for c in STATUS_CASES])
def test_bad_status_file(case: Path) -> None:
    """An unreadable status file is a located problem; the others are still read."""
    data = case.read_bytes()
    path, expect = _header(data)
    assert _LOCATED.match(expect), f"{case.name}: expectation must be file:line:col: message"
    good = dump_yaml(OperationStatus(operation="vision/good", phase=Phase.RUNNING).to_dict())
    view = read_status({path: data, operation_path("vision/good"): good})
    assert view.problems == (expect,)
    assert list(view.operations) == ["vision/good"]


@pytest.mark.parametrize("name", sorted(STATUS), ids=sorted(STATUS))
def test_hostile_status_content_is_a_located_problem(name: str) -> None:
    content, expect = STATUS[name]
    path = operation_path("vision/bomb")
    (problem,) = read_status({path: content}).problems
    assert problem.startswith(f"{path}:") and expect in problem


def test_status_and_queues_report_every_bad_status_file(tmp_path: Path) -> None:
    """``status`` and ``queues`` on a status branch holding every bad status file: each is a
    warning with its location, the rest of the branch is shown, no traceback."""
    work = tmp_path / "work"
    shutil.copytree(TEMPLATE, work)
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "template")
    files = {
        operation_path("vision/good"): dump_yaml(
            OperationStatus(operation="vision/good", phase=Phase.RUNNING).to_dict()
        )
    }
    expected = []
    for case in STATUS_CASES:
        data = case.read_bytes()
        path, expect = _header(data)
        where = operation_path(f"vision/{case.stem}")
        files[where] = data
        expected.append(expect.replace(path, where))
    branch = StatusBranch(ConfigRepo(str(work), cache_dir=tmp_path / "cache"))
    assert branch.write(files, "hostile status files")
    for command in (["status"], ["queues"]):
        result = CliRunner().invoke(
            cli, [*command, "--repo", str(work), "--cache-dir", str(tmp_path / "cache")]
        )
        output = result.output
        assert "Traceback" not in output and "internal error" not in output, output
        for expect in expected:
            assert expect in output, f"{command}: expected\n  {expect}\ngot\n{output}"
    result = CliRunner().invoke(
        cli, ["status", "--repo", str(work), "--cache-dir", str(tmp_path / "cache")]
    )
    assert "vision/good" in result.output


# --- the ledger on the status branch: one bad entry never lowers what is spent ---------------

LEDGER_CASES = sorted((BAD / "ledger").glob("*.yaml"))


def _counts(data: bytes) -> str:
    return data.split(b"\n", 3)[2].decode().removeprefix("# counts: ")


@pytest.mark.parametrize("case", LEDGER_CASES, ids=[c.stem for c in LEDGER_CASES])
def test_bad_ledger_file(case: Path) -> None:
    """A bad entry is skipped alone: counted at its worst case when it can be read at all
    (``worst``), else its queue's budget waits (``queue``; ``all`` when the entry names no
    queue, or the file cannot be read)."""
    data = case.read_bytes()
    path, expect = _header(data)
    assert _LOCATED.match(expect), f"{case.name}: expectation must be file:line:col: message"
    view = read_status({path: data})
    assert view.problems == (expect,)
    found = view.ledger_problems
    counts = _counts(data)
    if counts == "worst":
        assert (len(found.worst), found.unread) == (1, {})
        assert [e.operation for e in view.ledger] == ["p/o0"]
    elif counts == "queue":
        assert found.unread == {"team-b": expect}
    else:
        assert counts == "all" and found.unread == {"": expect}


def test_every_view_says_why_a_budget_waits_on_its_ledger(tmp_path: Path) -> None:
    """``plan``, ``status`` and ``queues`` on a status branch holding every bad ledger file
    (each in a month of its own): each problem on stderr, and team-b's operations (a 500 USD
    budget) wait ``LedgerUnreadable`` in the plan."""
    work = tmp_path / "work"
    shutil.copytree(TEMPLATE, work)
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "template")
    files: dict[str, bytes] = {}
    expected = []
    for month, case in enumerate(LEDGER_CASES, start=1):
        data = case.read_bytes()
        path, expect = _header(data)
        where = f"status/ledger/2025-{month:02d}.yaml"
        files[where] = data
        expected.append(expect.replace(path, where))
    branch = StatusBranch(ConfigRepo(str(work), cache_dir=tmp_path / "cache"))
    assert branch.write(files, "bad ledger files")
    cache = ["--cache-dir", str(tmp_path / "cache")]
    for command in (
        ["plan", "--repo", str(work)],
        ["status", "--repo", str(work), *cache],
        ["queues", "--repo", str(work), *cache],
    ):
        result = CliRunner().invoke(cli, command)
        assert result.exit_code == 0, result.output
        assert "Traceback" not in result.output and "internal error" not in result.output
        for expect in expected:
            assert expect in result.stderr, f"{command}: expected\n  {expect}\ngot\n{result.stderr}"
    plan = CliRunner().invoke(cli, ["plan", "--repo", str(work), "-o", "json"])
    pending = {p["operation"]: p for p in json.loads(plan.stdout)["pending"]}
    waiting = [p for p in pending.values() if p["reason"] == "LedgerUnreadable"]
    assert waiting and all(p["queue"] == "team-b" for p in waiting)
    assert waiting[0]["blockedBy"]["ledgerProblem"] in expected
