"""Issue 13, section 6: file names.

- A path is printed through one helper (``types.printable_path``, used by ``Location``,
  ``Provenance`` and ``InternalError``; messages by ``printable_text`` in
  ``ConfigError.__str__``): a name with a newline, an escape or a bidi override can never
  forge a line, in the CLI, the status branch, the logs or the web pages.
- Symlinks, as an Argo CD or Flux user expects from a checkout: inside the repo they are
  followed, to a file or to a directory; leaving the repo, dangling or looping, they are an
  error at the link, but only where the loader reads (config paths). Anywhere else (docs/,
  README.md) they are ignored like the files there.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.git_commands import git
from support.paths import TEMPLATE

from reconciler.adapters.git import ConfigRepo
from reconciler.adapters.repo import snapshot_git, snapshot_worktree
from reconciler.cli.main import cli
from reconciler.core.compile import compile_repo
from reconciler.core.load import resolve_files
from reconciler.core.plan import plan_repo
from reconciler.core.reporting.status import (
    CONFIG_FILE,
    OperationStatus,
    parse_status_file,
    render_status,
)
from reconciler.core.types import (
    ConfigError,
    InternalError,
    Location,
    Phase,
    Provenance,
    RepoFile,
    RepoSnapshot,
    printable_path,
    printable_text,
)

FORGED = "reconciler.yaml:1:1: PolicyViolation: forged line"
EVIL = f"evil\n{FORGED}\n.yaml"  # one file name: no '/'


# --- printing ----------------------------------------------------------------------------------


def test_the_quoting_rule() -> None:
    assert printable_path("queues/team-a.yaml") == "queues/team-a.yaml"
    assert printable_path("docs/é ü.yaml") == "docs/é ü.yaml"  # printable: as is
    assert printable_path("a\nb.yaml") == '"a\\nb.yaml"'
    assert printable_path("a\x1b[31mred.yaml") == '"a\\x1b[31mred.yaml"'
    assert printable_path("a\u202egpj.yaml") == '"a\\u202egpj.yaml"'  # bidi override
    assert printable_path("a\udcffb") == '"a\\udcffb"'  # not UTF-8 on disk
    assert printable_path('say "hi".yaml') == '"say \\"hi\\".yaml"'  # quotes stay unambiguous
    assert printable_text("one\ntwo\tthree") == "one\\ntwo\\tthree"
    error = ConfigError(Location(EVIL, 2, 3), "bad\nvalue")
    assert str(error) == f'"evil\\n{FORGED}\\n.yaml":2:3: bad\\nvalue'
    assert str(Provenance(EVIL, 4, "operation")) == f'operation at "evil\\n{FORGED}\\n.yaml":4'
    assert "\n" not in str(InternalError("compiling", ValueError("x"), EVIL))


def test_a_newline_in_a_file_name_cannot_forge_a_line_of_validate(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(TEMPLATE, root)
    (root / "queues" / EVIL).write_text("kind: Queue\ncluster: local\n")
    result = CliRunner().invoke(cli, ["validate", "--repo", str(root)])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert not any(line.startswith(FORGED) for line in lines), result.output
    assert lines[0].startswith(f'"queues/evil\\n{FORGED}\\n.yaml":1:1: file name'), lines
    assert len(lines) == 2  # the error, then the summary
    # JSON carries the name as it is: JSON escapes it
    result = CliRunner().invoke(cli, ["validate", "--repo", str(root), "-o", "json"])
    assert json.loads(result.output)["errors"][0]["file"] == f"queues/{EVIL}"


@pytest.mark.parametrize("name", ["queues/extra\n.yaml", "projects/vision/operations/x\n.yaml"])
def test_a_name_that_ends_in_a_newline_is_not_a_dns_label(tmp_path: Path, name: str) -> None:
    """``$`` matches before a final newline: ``queues/extra\\n.yaml`` was the queue
    ``'extra\\n'``, and an operation file so named an operation ``vision/x\\n``, whose
    workload name Kubernetes refuses."""
    root = tmp_path / "repo"
    shutil.copytree(TEMPLATE, root)
    (root / name).write_text("kind: Queue\ncluster: local\n")
    result = CliRunner().invoke(cli, ["validate", "--repo", str(root)])
    assert result.exit_code == 1
    stem = name.rsplit("/", 1)[1].removesuffix(".yaml")
    assert result.output.splitlines()[0] == (
        f"{printable_path(name)}:1:1: file name {stem!r} is not a valid name: use lowercase "
        "letters, digits and '-' (DNS-1123 label, at most 63 characters)"
    )


def test_run_watch_reads_a_directory_whatever_its_file_names(tmp_path: Path) -> None:
    """``run --watch`` versions the directory by a hash of its paths and contents: a name
    that is not UTF-8 (anywhere, ``docs/`` too) raised UnicodeEncodeError there, so no
    config was ever loaded while it existed. The version also follows a link's target."""
    from reconciler.runtime.service import worktree_source

    root = tmp_path / "repo"
    shutil.copytree(TEMPLATE, root)
    (root / "docs").mkdir()
    with open(os.fsencode(root / "docs") + b"/caf\xe9.md", "wb") as fh:
        fh.write(b"x")
    first = worktree_source(root)
    assert compile_repo(first).valid
    (root / "queues" / "nightly.yaml").symlink_to("batch.yaml")
    linked = worktree_source(root)
    (root / "queues" / "nightly.yaml").unlink()
    (root / "queues" / "nightly.yaml").symlink_to("team-a.yaml")
    assert worktree_source(root).version != linked.version != first.version


def test_control_characters_never_reach_the_status_branch(tmp_path: Path) -> None:
    snapshot = snapshot_worktree(TEMPLATE)
    files = dict(snapshot.files)
    files[f"queues/{EVIL}"] = RepoFile(f"queues/{EVIL}", b"kind: Queue\ncluster: local\n")
    bad = compile_repo(RepoSnapshot(files))
    good = compile_repo(snapshot)
    plan = plan_repo(good, [], datetime(2026, 1, 1, tzinfo=UTC))
    status = render_status(good, plan, {}, config_error=bad.errors)
    config = parse_status_file(CONFIG_FILE, status[CONFIG_FILE])
    assert config.errors and all(e.isprintable() for e in config.errors), config.errors
    assert config.errors[0].startswith(f'"queues/evil\\n{FORGED}\\n.yaml":1:1:')


# --- symlinks ----------------------------------------------------------------------------------


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(TEMPLATE, root)
    return root


def _compiled_three_ways(root: Path, tmp_path: Path) -> list[list[str]]:
    """The errors of the working tree, of the commit (``snapshot_git``) and of the Git sync
    (``ConfigRepo``): the three readers must agree."""
    worktree = compile_repo(snapshot_worktree(root))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "links")
    synced = ConfigRepo(str(root), cache_dir=tmp_path / "cache").sync()
    out = []
    for compiled in (worktree, compile_repo(snapshot_git(root)), compile_repo(synced)):
        assert [op.id for op in compiled.operations] == [op.id for op in worktree.operations]
        out.append([str(e) for e in compiled.errors])
    return out


def test_links_to_files_and_directories_inside_the_repo_are_followed(tmp_path: Path) -> None:
    """``presets`` is a link to ``shared/presets``; a queue is a link to a file in a
    directory the loader ignores. Valid, as if the targets were copied there."""
    root = _repo(tmp_path)
    (root / "shared").mkdir()
    shutil.move(root / "presets", root / "shared" / "presets")
    os.symlink("shared/presets", root / "presets")
    text = (root / "queues" / "batch.yaml").read_text().replace("name: batch", "name: nightly")
    (root / "shared" / "nightly.yaml").write_text(text)
    os.symlink("../shared/nightly.yaml", root / "queues" / "nightly.yaml")
    for errors in _compiled_three_ways(root, tmp_path):
        assert errors == []
    compiled = compile_repo(snapshot_worktree(root))
    assert "nightly" in compiled.queues
    assert len(compiled.operations) == len(compile_repo(snapshot_worktree(TEMPLATE)).operations)


def test_links_where_the_loader_does_not_read_are_ignored(tmp_path: Path) -> None:
    """Dangling, escaping or looping links in docs/ or at the top are not followed: they
    do not break the repo (they did: every one was an error)."""
    root = _repo(tmp_path)
    (root / "docs").mkdir()
    os.symlink("/etc/passwd", root / "docs" / "passwd")
    os.symlink("../../outside", root / "docs" / "outside")
    os.symlink("loop", root / "docs" / "loop")
    os.symlink("nowhere.md", root / "README.md")
    os.symlink("/", root / "rootfs")
    os.symlink("docs/nowhere.yaml", root / "top-level.yaml")
    for errors in _compiled_three_ways(root, tmp_path):
        assert errors == []


@pytest.mark.parametrize(
    ("link", "target", "expect"),
    [
        ("presets/self", ".", "symlink loop: '.' is a directory that contains the link"),
        ("presets/up", "..", "symlink loop: '..' is a directory that contains the link"),
        ("queues/more", "../queues", "symlink loop: '../queues' is a directory that contains"),
        ("presets/out", "../..", "symlink to '../..' leaves the repo"),
        ("presets/etc", "/etc", "symlink to '/etc' leaves the repo"),
        ("queues/gone.yaml", "../docs/gone.yaml", "symlink target 'docs/gone.yaml' does not exist"),
        (
            "queues/file-dir.yaml",
            "../reconciler.yaml/x",
            "symlink target 'reconciler.yaml' is a file, not a directory",
        ),
    ],
)
def test_links_that_leave_dangle_or_loop_are_errors_at_the_link(
    tmp_path: Path, link: str, target: str, expect: str
) -> None:
    root = _repo(tmp_path)
    os.symlink(target, root / link)
    for errors in _compiled_three_ways(root, tmp_path):
        assert errors == [f"{link}:1:1: {expect}"] or (
            len(errors) == 1 and errors[0].startswith(f"{link}:1:1: {expect}")
        ), errors


def test_directory_links_that_point_at_each_other_are_a_loop() -> None:
    snapshot = RepoSnapshot(
        {
            "queues/q.yaml": RepoFile("queues/q.yaml", b"kind: Queue\ncluster: c\n"),
            "presets/a": RepoFile("presets/a", b"", symlink_target="../shared/a"),
            "shared/a/b": RepoFile("shared/a/b", b"", symlink_target="../b"),
            "shared/b/c": RepoFile("shared/b/c", b"", symlink_target="../a"),
        }
    )
    files, errors = resolve_files(snapshot)
    assert list(files) == ["queues/q.yaml"]
    assert [str(e) for e in errors] == [
        "presets/a/b/c:1:1: symlink loop: '../a' is a directory that contains the link"
    ]


def test_a_linked_directory_shows_its_files_under_the_link() -> None:
    snapshot = RepoSnapshot(
        {
            "shared/q/a.yaml": RepoFile("shared/q/a.yaml", b"kind: Queue\n"),
            "shared/q/README.md": RepoFile("shared/q/README.md", b""),
            "shared/q/b.yaml": RepoFile("shared/q/b.yaml", b"", symlink_target="a.yaml"),
            "queues": RepoFile("queues", b"", symlink_target="shared/q"),
            "docs/queues": RepoFile("docs/queues", b"", symlink_target="../shared/q"),
        }
    )
    files, errors = resolve_files(snapshot)
    assert errors == []
    assert files == {"queues/a.yaml": b"kind: Queue\n", "queues/b.yaml": b"kind: Queue\n"}


SUBMODULE = "is a Git submodule, which the reconciler does not read: commit its files instead"


def _with_submodule(tmp_path: Path, moved: str, at: str) -> Path:
    """The template with ``moved`` (a directory of it) made a repository of its own and
    added back as a submodule at ``at``."""
    root = _repo(tmp_path)
    source = tmp_path / "submodule"
    shutil.move(root / moved, source)
    git(source, "init", "-q", "-b", "main")
    git(source, "add", "-A")
    git(source, "commit", "-qm", "its own repo")
    git(root, "init", "-q", "-b", "main")
    git(root, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(source), at)
    return root


def test_a_submodule_where_the_loader_reads_is_an_error_at_its_path(tmp_path: Path) -> None:
    """A project moved into a repo of its own and added back as a submodule: a checkout
    shows its files, but the commit holds only a link to another repo's commit. Before,
    the Git readers skipped it without a word: its operations were gone from the config
    (pruned, with prune on) while ``validate`` read the checked-out files and passed."""
    root = _with_submodule(tmp_path, "projects/vision", "projects/vision")
    for errors in _compiled_three_ways(root, tmp_path):
        assert errors == [f"projects/vision:1:1: {SUBMODULE}"], errors


def test_a_submodule_where_the_loader_does_not_read_is_ignored(tmp_path: Path) -> None:
    root = _with_submodule(tmp_path, "projects/vision", "docs/vendored")
    shutil.copytree(TEMPLATE / "projects" / "vision", root / "projects" / "vision")
    for errors in _compiled_three_ways(root, tmp_path):
        assert errors == []


def test_a_link_into_a_submodule_is_an_error_at_the_link() -> None:
    snapshot = RepoSnapshot(
        {
            "vendor/shared": RepoFile("vendor/shared", b"", submodule=True),
            "presets": RepoFile("presets", b"", symlink_target="vendor/shared/presets"),
            "queues/q.yaml": RepoFile("queues/q.yaml", b"", symlink_target="../vendor/shared"),
        }
    )
    files, errors = resolve_files(snapshot)
    assert files == {}
    assert [str(e) for e in errors] == [
        f"presets:1:1: symlink target 'vendor/shared' {SUBMODULE}",
        f"queues/q.yaml:1:1: symlink target 'vendor/shared' {SUBMODULE}",
    ]


def test_names_read_from_the_status_branch_never_forge_a_line() -> None:
    """Anyone who can push to the status branch writes what ``status`` prints: a record's
    operation, queue or an error of ``config.yaml`` with a newline stays on one line."""
    from reconciler.cli.status_cmd import status_to_table, warnings
    from reconciler.core.reporting.status import ConfigStatus, StatusView

    record = OperationStatus(
        operation=f"vision/x\n{FORGED}", phase=Phase.RUNNING, queue=f"q\n{FORGED}"
    )
    config = ConfigStatus(
        version="v", applied="v", valid=False, errors=(f"a.yaml:1:1: bad\n{FORGED}",)
    )
    view = StatusView({record.operation: record}, config=config)
    lines = status_to_table(view, [record], queues=False).splitlines() + warnings(view)
    assert not any(line.lstrip().startswith(FORGED) for line in lines), lines


def test_a_path_inside_a_message_is_quoted_too() -> None:
    """A message that names another file (a collision of ids or workload names) prints that
    path through ``printable_path`` as well, so it is quoted, not merely escaped."""
    from reconciler.core.compile.errors import Errors
    from reconciler.core.compile.names import Claim, check_unique

    other = f"projects/p/operations/{EVIL}"
    errors = Errors()
    check_unique(
        [
            Claim("p/x", "operation p/x", Location("projects/p/operations/x.yaml", 1, 1)),
            Claim("p/x", "child 0 of matrix p/y", Location(other, 3, 1)),
        ],
        errors,
    )
    lines = [str(e) for e in errors]
    assert len(lines) == 2 and all(line.isprintable() for line in lines), lines
    assert f"({printable_path(other)})" in lines[0], lines[0]
