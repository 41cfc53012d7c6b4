"""``reconciler import polyaxon``: the test polyaxonfiles of tests/data/import/polyaxon/ (one
per section of the v1.1 specification, and one with every field that has no equivalent),
pinned by a golden file; the result validates; bad input is a located error and writes
nothing; ``--out`` is written all or none.

Regenerate the golden after an intended change with
``UPDATE_GOLDEN=1 python -m pytest tests/cli/test_import_polyaxon.py``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from support.paths import ROOT

from reconciler.cli import import_cmd
from reconciler.cli.main import cli
from reconciler.core.authoring.importers import Source, Target
from reconciler.core.authoring.importers.polyaxon import import_polyaxon

DATA = Path("tests/data/import")
OWN = sorted((ROOT / DATA / "polyaxon").glob("*.yaml"))
GOLDEN = ROOT / "tests" / "data" / "golden"
CORPUS = ROOT.parent / "shared" / "polyaxon-corpus" / "files"
if not CORPUS.is_dir():
    CORPUS = Path("/work/shared/polyaxon-corpus/files")


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # sources are reported under their paths as given


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _repo(tmp_path: Path, name: str = "repo") -> Path:
    out = tmp_path / "out"
    shutil.copytree(ROOT / DATA / name, out)
    return out


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"no golden {name}: run with UPDATE_GOLDEN=1"
    assert text == path.read_text()


def _own() -> list[str]:
    return [str(DATA / "polyaxon" / p.name) for p in OWN]


def test_golden_each_polyaxonfile_becomes(tmp_path: Path) -> None:
    out = _repo(tmp_path)
    before = _tree(out)
    result = _run("import", "polyaxon", *_own(), "--project", "vision", "--out", str(out))
    assert result.exit_code == 0, result.output
    written = {k: v for k, v in _tree(out).items() if k not in before}
    text = "".join(f"=== {path}\n{body}" for path, body in sorted(written.items()))
    text += "=== findings (stderr)\n" + result.stderr
    _golden("import_polyaxon.txt", text)


def test_the_converted_repo_validates(tmp_path: Path) -> None:
    out = _repo(tmp_path)
    assert (
        _run("import", "polyaxon", *_own(), "--project", "vision", "--out", str(out)).exit_code == 0
    )
    result = _run("validate", "--repo", str(out))
    assert result.exit_code == 0, result.output


def test_a_queue_it_creates_dispatches_nothing_until_its_limits_are_set(tmp_path: Path) -> None:
    """Polyaxon keeps a queue's concurrency and quota in its UI: a queue created without
    them would dispatch every imported operation at once."""
    out = tmp_path / "template"
    shutil.copytree(ROOT / "config-repo-template", out)
    result = _run("import", "polyaxon", *_own(), "--project", "imported", "--out", str(out))
    assert result.exit_code == 0, result.output
    created = [p for p in (out / "queues").glob("*.yaml") if "import polyaxon" in p.read_text()]
    assert created
    for path in created:
        queue = yaml.safe_load(path.read_text())
        assert queue["paused"] is True and "quota" not in queue, path


def test_into_the_template_it_validates(tmp_path: Path) -> None:
    out = tmp_path / "template"
    shutil.copytree(ROOT / "config-repo-template", out)
    result = _run("import", "polyaxon", *_own(), "--project", "imported", "--out", str(out))
    assert result.exit_code == 0, result.output
    result = _run("validate", "--repo", str(out))
    assert result.exit_code == 0, result.output


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the Polyaxon corpus is not on this machine")
@pytest.mark.parametrize("base", ["config-repo-template", "minimal"])
def test_the_public_corpus_imports_and_validates(tmp_path: Path, base: str) -> None:
    out = tmp_path / "dest"
    if base == "minimal":
        (out / "clusters").mkdir(parents=True)
        (out / "clusters" / "local.yaml").write_text(
            "kind: Cluster\nkubeconfig: {inCluster: true}\n"
        )
    else:
        shutil.copytree(ROOT / base, out)
    files = sorted(str(p) for p in CORPUS.rglob("*") if p.suffix in (".yaml", ".yml"))
    result = _run("import", "polyaxon", *files, "--project", "corpus", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    result = _run("validate", "--repo", str(out))
    assert result.exit_code == 0, result.output


def test_every_unsupported_field_is_reported_at_its_line(tmp_path: Path) -> None:
    source = DATA / "polyaxon" / "unsupported.yaml"
    result = _run("import", "polyaxon", str(source), "--project", "p", "--out", str(tmp_path / "o"))
    assert result.exit_code == 0
    lines = source.read_text().splitlines()
    reported = {
        int(line.split(":")[1])
        for line in result.stderr.splitlines()
        if line.startswith(str(source))
    }
    # Every line that holds a field without an equivalent is named.
    for number, line in enumerate(lines, 1):
        key = line.strip().lstrip("- ").split(":")[0]
        if key in {
            "tags",
            "owner",
            "cache",
            "plugins",
            "build",
            "hooks",
            "events",
            "joins",
            "cost",
            "earlyStopping",
            "outputs",
            "restartPolicy",
            "dnsPolicy",
            "securityContext",
            "priority",
            "imagePullPolicy",
            "ports",
            "livenessProbe",
            "envFrom",
            "numInitialRuns",
            "maxIterations",
            "metric",
        }:
            assert number in reported, f"line {number} ({line.strip()}) is not reported"
    # a datetime schedule (one run at a time) has no equivalent: reported at its kind
    assert lines.index("  kind: datetime") + 1 in reported
    written = (tmp_path / "o" / "projects/p/operations/everything-else.yaml").read_text()
    assert "isApproved: false" in written  # the datetime schedule and the matrix hold it


def test_strict_turns_reports_into_errors_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "o"
    result = _run(
        "import",
        "polyaxon",
        str(DATA / "polyaxon" / "unsupported.yaml"),
        "--project",
        "p",
        "--out",
        str(out),
        "--strict",
    )
    assert result.exit_code == 1
    assert "nothing was written" in result.stderr
    assert not out.exists()
    clean = _run(
        "import",
        "polyaxon",
        str(DATA / "polyaxon" / "lab.yaml"),
        "--project",
        "p",
        "--out",
        str(out),
        "--strict",
    )
    assert clean.exit_code == 0, clean.output


@pytest.mark.parametrize(
    ("name", "where", "words"),
    [
        ("not-yaml.yaml", ":4:1:", "expected ',' or '}'"),
        ("v0.yaml", ":1:10:", "Polyaxon v0 polyaxonfile"),
        ("hub.yaml", ":4:9:", "cannot be resolved offline"),
    ],
)
def test_bad_input_is_a_located_error_and_nothing_is_written(
    tmp_path: Path, name: str, where: str, words: str
) -> None:
    out = _repo(tmp_path)
    before = _tree(out)
    bad = DATA / "polyaxon" / "bad" / name
    result = _run("import", "polyaxon", *_own(), str(bad), "--project", "p", "--out", str(out))
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith(f"{bad}{where}")]
    assert errors and words in errors[0], result.stderr
    assert "Traceback" not in result.output
    assert _tree(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging directory left


def test_a_missing_path_ref_is_a_located_error(tmp_path: Path) -> None:
    op = tmp_path / "op.yaml"
    op.write_text("version: 1.1\nkind: operation\npathRef: ./nowhere.yaml\n")
    result = _run("import", "polyaxon", str(op), "--project", "p", "--out", str(tmp_path / "o"))
    assert result.exit_code == 1
    assert f"{op}:3:10: pathRef './nowhere.yaml': no file" in result.stderr
    assert not (tmp_path / "o").exists()


def test_an_existing_file_is_never_overwritten(tmp_path: Path) -> None:
    out = _repo(tmp_path)
    (out / "queues").mkdir()
    (out / "queues" / "gpu-queue.yaml").write_text("kind: Queue\ncluster: local\n")
    # gpu-queue exists, so it is not written; the project queue is new.
    assert (
        _run("import", "polyaxon", *_own(), "--project", "vision", "--out", str(out)).exit_code == 0
    )
    assert (out / "queues" / "gpu-queue.yaml").read_text() == "kind: Queue\ncluster: local\n"
    before = _tree(out)
    again = _run("import", "polyaxon", *_own(), "--project", "vision", "--out", str(out))
    assert again.exit_code == 1
    assert "exists: the import writes only new files" in again.stderr
    assert _tree(out) == before


def test_a_failure_while_moving_files_in_undoes_the_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _repo(tmp_path)
    before = _tree(out)
    real = os.rename
    calls = {"n": 0}

    def flaky(src: Any, dst: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 4:
            raise OSError(28, "No space left on device", str(dst))
        real(src, dst)

    monkeypatch.setattr(import_cmd.os, "rename", flaky)
    result = _run("import", "polyaxon", *_own(), "--project", "vision", "--out", str(out))
    assert result.exit_code == 1
    assert "No space left on device" in result.stderr
    assert _tree(out) == before
    assert not (out / "projects").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_new_out_directory_appears_whole(tmp_path: Path) -> None:
    out = tmp_path / "new" / "repo"
    result = _run(
        "import",
        "polyaxon",
        str(DATA / "polyaxon" / "lab.yaml"),
        "--project",
        "p",
        "--out",
        str(out),
    )
    assert result.exit_code == 0
    assert sorted(_tree(out)) == [
        "projects/p/operations/lab.yaml",
        "projects/p/project.yaml",
        "queues/p.yaml",
    ]
    assert sorted(p.name for p in out.parent.iterdir()) == ["repo"]


def test_project_must_be_a_label(tmp_path: Path) -> None:
    result = _run(
        "import",
        "polyaxon",
        str(DATA / "polyaxon" / "lab.yaml"),
        "--project",
        "My_Proj",
        "--out",
        str(tmp_path / "o"),
    )
    assert result.exit_code == 2
    assert "'my-proj'" in result.output


def _mutations(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    out: list[tuple[tuple[Any, ...], Any]] = []
    children = (
        data.items()
        if isinstance(data, dict)
        else enumerate(data)
        if isinstance(data, list)
        else ()
    )
    for key, value in children:
        for wrong in (None, 7, "x", [1], {"a": 1}):
            if type(wrong) is not type(value):
                out.append(((*path, key), wrong))
        out.extend(_mutations(value, (*path, key)))
    return out


def _set(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    import copy

    data = copy.deepcopy(data)
    cursor = data
    for part in path[:-1]:
        cursor = cursor[part]
    cursor[path[-1]] = value
    return data


@pytest.mark.parametrize("path", OWN, ids=lambda p: p.name)
@pytest.mark.slow
def test_a_value_of_any_wrong_type_never_crashes(path: Path) -> None:
    data = yaml.safe_load(path.read_text())
    sibling = {str(DATA / "polyaxon" / p.name): p.read_bytes() for p in OWN}

    def resolve(name: str) -> Source | None:
        found = sibling.get(name)
        return Source(name, found) if found is not None else None

    for where, wrong in _mutations(data):
        text = yaml.safe_dump(_set(data, where, wrong)).encode()
        result = import_polyaxon(
            [Source(str(DATA / "polyaxon" / path.name), text)],
            project="p",
            target=Target(),
            resolve=resolve,
        )
        for item in (*result.errors, *result.findings):
            assert str(item).startswith(str(DATA / "polyaxon" / "")), item


def test_the_docs_table_names_every_field_the_importer_knows() -> None:
    from reconciler.core.authoring.importers.polyaxon import FIELDS

    text = (ROOT / "docs" / "from-polyaxon.md").read_text()
    missing = [f for names in FIELDS.values() for f in names if f"`{f}`" not in text]
    assert not missing, f"docs/from-polyaxon.md does not name {missing}"


def test_into_an_existing_project_policy_is_kept(tmp_path: Path) -> None:
    out = tmp_path / "template"
    shutil.copytree(ROOT / "config-repo-template", out)
    result = _run("import", "polyaxon", *_own(), "--project", "vision", "--out", str(out))
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    polyaxon = DATA / "polyaxon"
    assert (
        f"{polyaxon}/train-fast.yaml:6:8: project 'vision' may not use queue 'gpu-queue': "
        "written with queue 'team-a'; to keep 'gpu-queue', add it to the project's "
        "allowedQueues"
    ) in lines
    assert any(
        line.startswith(f"{polyaxon}/lab.yaml:") and "written with queue 'notebooks'" in line
        for line in lines
    )
    assert any(
        line.startswith(f"{polyaxon}/shell.yaml:") and "not written" in line for line in lines
    )
    assert not (out / "projects/vision/operations/shell.yaml").exists()
    assert (out / "projects/vision/project.yaml").read_text() == (
        ROOT / "config-repo-template/projects/vision/project.yaml"
    ).read_text()
    result = _run("validate", "--repo", str(out))
    assert result.exit_code == 0, result.output


def test_a_file_name_cannot_forge_a_line_of_the_report_or_of_a_written_file(
    tmp_path: Path,
) -> None:
    odd = tmp_path / "job\nkind: Queue.yaml"
    odd.write_text(
        "version: 1.1\nkind: component\ntags: [x]\nrun:\n  kind: job\n"
        "  container: {image: busybox:1.36}\n"
    )
    out = tmp_path / "o"
    result = _run("import", "polyaxon", str(odd), "--project", "p", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert [line for line in result.stderr.splitlines() if "tags" in line] == [
        f'"{tmp_path}/job\\nkind: Queue.yaml":3:1: tags: tags are not kept; say it in '
        "`description`, or as run.environment.labels"
    ]
    written = (out / "projects/p/operations/job-kind-queue.yaml").read_text()
    assert yaml.safe_load(written)["kind"] == "Operation"
    assert written.splitlines()[0].startswith("# Imported from Polyaxon ")
    assert written.splitlines()[1] == "kind: Operation"
