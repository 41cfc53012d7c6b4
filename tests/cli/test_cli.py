"""reconciler validate / compile / schema."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner
from support.paths import ROOT, TEMPLATE

from reconciler.cli import gendoc
from reconciler.cli.main import cli
from reconciler.core.compile.model import json_schemas


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def test_validate_template_ok() -> None:
    code, out = run("validate", "--repo", str(TEMPLATE))
    assert code == 0 and "valid: 19 operations, 6 queues, 1 clusters" in out
    code, out = run("validate", "--repo", str(TEMPLATE), "-o", "json")
    report = json.loads(out)
    assert code == 0 and report["valid"] and report["errors"] == []
    assert "vision/sweep-lr-2" in report["operations"]


def test_validate_usage_errors_exit_2(tmp_path: Path) -> None:
    assert run("validate", "--repo", str(tmp_path / "nope"))[0] == 2
    assert run("validate", "-o", "xml", "--repo", str(TEMPLATE))[0] == 2
    assert run("compile", "not-an-id", "--repo", str(TEMPLATE))[0] == 2


def test_validate_lists_every_error(tmp_path: Path) -> None:
    root = tmp_path / "r"
    shutil.copytree(TEMPLATE, root)
    (root / "queues" / "team-a.yaml").write_text("kind: Queue\ncluster: local\npriority: x\n")
    (root / "presets" / "a100.yaml").write_text("kind: Preset\npatchStrategy: merge\n")
    code, out = run("validate", "--repo", str(root))
    assert code == 1
    assert "queues/team-a.yaml:3:11: priority: Input should be a valid integer (got 'x')" in out
    assert "presets/a100.yaml:2:16: patchStrategy:" in out


def test_compile_json_shape_and_explain() -> None:
    code, out = run(
        "compile", "vision/train-resnet", "--repo", str(TEMPLATE), "-o", "json", "--explain"
    )
    assert code == 0
    obj = json.loads(out)
    assert obj["operation"] == "vision/train-resnet"
    assert (obj["queue"], obj["cluster"], obj["namespace"], obj["kind"]) == (
        "team-a",
        "local",
        "team-a",
        "job",
    )
    assert obj["presets"] == ["base", "a100", "data"]
    assert obj["requests"] == {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "1"}
    assert obj["spec"]["run"]["container"]["image"] == "ghcr.io/example/vision:1.4.0"
    assert obj["provenance"]["run.container.image"] == {
        "file": "projects/vision/presets/base.yaml",
        "line": 9,
        "step": "preset base (isnull)",
    }
    assert obj["provenance"]["queue"]["step"] == "project default"
    code, out = run("compile", "vision/train-resnet", "--repo", str(TEMPLATE), "-o", "json")
    assert "provenance" not in json.loads(out)


def test_compile_yaml_workflow_and_child() -> None:
    code, out = run("compile", "vision/sweep-lr", "--repo", str(TEMPLATE))
    obj = yaml.safe_load(out)
    assert code == 0 and obj["workflow"]["kind"] == "matrix" and obj["workflow"]["concurrency"] == 2
    assert [c["operation"] for c in obj["workflow"]["children"]] == [
        f"vision/sweep-lr-{i}" for i in range(3)
    ]
    code, out = run("compile", "vision/sweep-lr-1", "--repo", str(TEMPLATE), "-o", "json")
    child = json.loads(out)
    assert code == 0 and child["params"] == {"lr": 0.0003}
    assert child["spec"]["run"]["container"]["args"][-1] == "0.0003"


def test_compile_table_shows_sources() -> None:
    code, out = run("compile", "vision/explore", "--repo", str(TEMPLATE), "-o", "table")
    assert code == 0
    assert "preset notebook (replace)" in out and "presets/notebook.yaml:11" in out


def test_compile_missing_and_rejected(tmp_path: Path) -> None:
    code, out = run("compile", "vision/nothing", "--repo", str(TEMPLATE))
    assert code == 1 and "no operation 'vision/nothing'" in out
    root = tmp_path / "r"
    shutil.copytree(TEMPLATE, root)
    op = root / "projects" / "vision" / "operations" / "train-vit.yaml"
    op.write_text(op.read_text() + "namespace: kube-system\n")
    code, out = run("compile", "vision/train-vit", "--repo", str(root), "-o", "json")
    assert code == 1 and "PolicyViolation" in out


def test_schema_matches_template_copies(tmp_path: Path) -> None:
    code, out = run("schema", "--out", str(tmp_path))
    assert code == 0
    for kind in json_schemas():
        name = f"{kind.lower()}.schema.json"
        generated = json.loads((tmp_path / name).read_text())
        committed = json.loads((TEMPLATE / "schemas" / name).read_text())
        assert generated == committed, f"regenerate config-repo-template/schemas/{name}"
    code, out = run("schema")
    assert set(json.loads(out)) == {
        "Org",
        "Cluster",
        "Connection",
        "Queue",
        "Cohort",
        "Flavor",
        "Preset",
        "Project",
        "Operation",
    }


def test_template_files_name_their_schema() -> None:
    for path in TEMPLATE.rglob("*.yaml"):
        first = path.read_text().splitlines()[0]
        assert first.startswith("# yaml-language-server: $schema="), path
        target = (path.parent / first.split("=", 1)[1]).resolve()
        assert target.is_file(), path


def test_preset_library_is_valid_and_documented(tmp_path: Path) -> None:
    library = sorted((ROOT / "presets").glob("*.yaml"))
    assert len(library) >= 4
    root = tmp_path / "r"
    shutil.copytree(TEMPLATE, root)
    for path in library:
        text = path.read_text()
        assert "description:" in text and text.lstrip().startswith("#"), path
        shutil.copy(path, root / "presets" / path.name)
    code, out = run("validate", "--repo", str(root))
    assert code == 0, out


def _float_options() -> list[tuple[str, click.Option]]:
    return [
        (entry.ctx.command_path, param)
        for entry in gendoc.walk_commands()
        for param in entry.command.params
        if isinstance(param, click.Option) and isinstance(param.type, click.types.FloatParamType)
    ]


def test_every_float_option_refuses_nan_and_infinity() -> None:
    """NaN passes every range check (each comparison is false): ``run
    --status-keep-days nan`` squashed the status branch's whole history, and ``status
    --watch --interval inf`` ended in an OverflowError from ``sleep``."""
    options = _float_options()
    assert {(p, o.opts[0]) for p, o in options} >= {
        ("reconciler run", "--status-keep-days"),
        ("reconciler status", "--interval"),
    }
    for path, option in options:
        for text in ("nan", "inf", "1e400", "-nan"):
            with pytest.raises(
                click.BadParameter, match=r"is not a finite number|not in the range"
            ):
                option.type.convert(text, option, None)
        assert option.type.convert("7", option, None) == 7.0, path


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_run_refuses_a_status_keep_days_that_is_no_number(value: str, tmp_path: Path) -> None:
    code, out = run("run", "--once", "--repo", str(tmp_path), "--status-keep-days", value)
    assert code == 2 and f"'{value}' is not a finite number" in out, out
