"""The worked examples in the docs are what the compiler and merger actually produce."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from support.paths import ROOT, TEMPLATE

from reconciler.adapters.repo import snapshot_worktree
from reconciler.core.authoring.submit import apply_params, parse_param
from reconciler.core.compile import compile_repo
from reconciler.core.compile.merge import merge_leaf
from reconciler.core.types import MergeStrategy

PRESETS_MD = ROOT / "docs" / "presets.md"

# The files of the worked example in docs/presets.md ("Worked examples").
EXAMPLE = {
    "projects/vision/operations/train.yaml": """\
# projects/vision/operations/train.yaml
kind: Operation
presets: [a100, data]
run:
  container:
    image: my/train:2
    env: {LR: "0.1"}
  environment:
    nodeSelector: {zone: a}
""",
    "projects/vision/presets/base.yaml": """\
patchStrategy: isnull
kind: Preset
run:
  kind: job
  container:
    image: my/default:1
  timeout: 12h
""",
    "presets/a100.yaml": """\
patchStrategy: post_merge
kind: Preset
run:
  container:
    resources:
      limits: {nvidia.com/gpu: 1}
  environment:
    nodeSelector: {gpu: a100}
    tolerations:
      - {key: nvidia.com/gpu, operator: Exists}
""",
    "presets/data.yaml": """\
patchStrategy: pre_merge
kind: Preset
run:
  connections: [datasets]
  container:
    env: {LR: "1.0", DATA: /data}
""",
}


def _section(text: str, start: str) -> str:
    """The first table after the text ``start``."""
    lines = text.split(start, 1)[1].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return "\n".join(table)


def _table_rows(section: str) -> list[list[str]]:
    rows = []
    for line in section.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows[1:]  # without the header


def _unquote(cell: str) -> str:
    return cell.split(" — ")[0].replace("`", "").strip()


def test_presets_worked_example_matches_the_compiler(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(TEMPLATE, repo)
    for path, body in EXAMPLE.items():
        (repo / path).write_text(body, encoding="utf-8")
    compiled = compile_repo(snapshot_worktree(repo))
    assert compiled.valid, compiled.errors
    op = next(o for o in compiled.operations if o.id == "vision/train")
    assert op.presets == ("base", "a100", "data")

    doc = PRESETS_MD.read_text(encoding="utf-8")
    rows = _table_rows(_section(doc, "Result and provenance:"))
    assert len(rows) >= 10, "the provenance table of the worked example was not found"
    for field, _value, source in rows:
        path = _unquote(field)
        assert path in op.provenance, f"docs/presets.md names {path}, which the op does not set"
        assert op.provenance[path].step == _unquote(source), (
            f"docs/presets.md says {path} is from {_unquote(source)!r}; "
            f"the compiler says {op.provenance[path].step!r}"
        )
    # The example's line number for the image is the operation file's.
    assert op.provenance["run.container.image"].line == 6
    assert "image: my/train:2        # line 6" in doc


def test_presets_strategy_table_matches_the_merger() -> None:
    cur_sel, new_sel = {"zone": "a"}, {"gpu": "a100"}
    spot, gpu = {"key": "spot"}, {"key": "nvidia.com/gpu", "operator": "Exists"}
    names = {repr(spot): "spot", repr(gpu): "gpu"}
    doc = PRESETS_MD.read_text(encoding="utf-8")
    rows = _table_rows(_section(doc, "The same `a100` preset with other strategies"))
    assert [_unquote(r[0]) for r in rows] == [s.value for s in MergeStrategy]
    for strategy_cell, selector_cell, tolerations_cell in rows:
        strategy = MergeStrategy(_unquote(strategy_cell))
        selector = merge_leaf(strategy, cur_sel, new_sel)
        tolerations = merge_leaf(strategy, [spot], [gpu])
        written = re.sub(r"\s+", " ", _unquote(selector_cell).split("(")[0]).strip()
        assert written == "{" + ", ".join(f"{k}: {v}" for k, v in selector.items()) + "}", strategy
        assert (
            _unquote(tolerations_cell) == "[" + ", ".join(names[repr(t)] for t in tolerations) + "]"
        ), strategy


def test_policy_violation_example_is_the_real_message(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(TEMPLATE, repo)
    for path, body in EXAMPLE.items():
        (repo / path).write_text(body, encoding="utf-8")
    (repo / "presets/bad.yaml").write_text("kind: Preset\nqueue: team-b\n", encoding="utf-8")
    op_file = repo / "projects/vision/operations/train.yaml"
    op_file.write_text(
        op_file.read_text("utf-8").replace("[a100, data]", "[a100, data, bad]"), "utf-8"
    )
    compiled = compile_repo(snapshot_worktree(repo))
    (rejected,) = [r for r in compiled.rejected if r.operation == "vision/train"]
    line = f"{rejected.location}: {rejected.reason}: {rejected.operation}: {rejected.message}"
    for name in ("presets.md", "concepts.md"):
        doc = (ROOT / "docs" / name).read_text(encoding="utf-8")
        # The docs wrap the line once; compare without line breaks.
        assert line in re.sub(r"\n(?=\S)", " ", doc), f"docs/{name} shows another message"


# --- "Lists inside maps": a preset keeps exactly one node pin (issue 13, section 7) -------

PINS = {"NVIDIA-A100-SXM4-80GB": "a100", "NVIDIA-H100-80GB-HBM3": "h100"}


def _pin_example() -> tuple[str, str]:
    """The preset and the operation of "Lists inside maps", as written in the doc."""
    doc = PRESETS_MD.read_text(encoding="utf-8").split("## Lists inside maps", 1)[1]
    blocks = re.findall(r"```yaml\n(.*?)```", doc, flags=re.S)
    preset = next(b for b in blocks if b.startswith("# presets/a100.yaml"))
    operation = next(b for b in blocks if b.startswith("# projects/vision/operations/"))
    return preset, operation


def test_presets_node_pin_example_keeps_exactly_one_pin(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from reconciler.core.decision.render import render_operation

    preset, operation = _pin_example()
    doc = PRESETS_MD.read_text(encoding="utf-8")
    rows = _table_rows(_section(doc, "The compiled `nodeSelectorTerms` for each strategy"))
    assert [_unquote(r[0]) for r in rows] == ["replace", "isnull", "post_merge", "pre_merge"]
    for strategy_cell, terms_cell, pins_cell in rows:
        strategy = _unquote(strategy_cell)
        repo = tmp_path / strategy
        shutil.copytree(TEMPLATE, repo)
        body = preset.replace("patchStrategy: post_merge", f"patchStrategy: {strategy}")
        (repo / "presets/a100.yaml").write_text(body, encoding="utf-8")
        (repo / "projects/vision/operations/pinned.yaml").write_text(operation, "utf-8")
        compiled = compile_repo(snapshot_worktree(repo))
        assert compiled.valid, compiled.errors
        op = next(o for o in compiled.operations if o.id == "vision/pinned")
        # The Job as it is sent to the cluster: exactly one term, one product.
        (job, *_) = render_operation(
            op, {}, config_version="c", dispatched_at=datetime(2026, 1, 1, tzinfo=UTC)
        ).manifests
        affinity = job["spec"]["template"]["spec"]["affinity"]
        terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        written = "[" + ", ".join(PINS[t["matchExpressions"][0]["values"][0]] for t in terms) + "]"
        assert written == _unquote(terms_cell), strategy
        assert len(terms) == 1 and len(terms[0]["matchExpressions"]) == 1
        path = (
            "run.environment.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0]"
        )
        step = op.provenance[path].step
        from_preset = "set by the preset" in pins_cell
        assert step == (f"preset a100 ({strategy})" if from_preset else "operation"), strategy
        assert f"{path}[1]" not in op.provenance
    assert "is `preset a100 (post_merge)`" in doc


# --- docs/researchers.md: every operation it shows is one the repo takes -------------------

RESEARCHERS_MD = ROOT / "docs" / "researchers.md"
# A ```yaml block that starts with its file's name: "# train-small.yaml".
OPERATION_BLOCK = re.compile(r"```yaml\n# ([a-z0-9-]+)\.yaml\n(.*?)```", re.S)


def _submitted_as(doc: str, name: str) -> tuple[str, dict[str, str]]:
    """The project and -P values the page submits the file with; a file the page does not
    submit goes into the project its operation id names."""
    m = re.search(rf"reconciler submit {name}\.yaml --project ([a-z0-9-]+)((?: -P \S+)*)", doc)
    if m is None:
        project = re.search(rf"\b([a-z0-9-]+)/{name}\b", doc)
        assert project is not None, f"docs/researchers.md never names the project of {name}"
        return project.group(1), {}
    return m.group(1), dict(parse_param(p) for p in m.group(2).split(" -P ")[1:])


def test_researchers_page_operations_compile(tmp_path: Path) -> None:
    doc = RESEARCHERS_MD.read_text(encoding="utf-8")
    blocks = OPERATION_BLOCK.findall(doc)
    assert len(blocks) >= 5, "the operation files of docs/researchers.md were not found"
    repo = tmp_path / "repo"
    shutil.copytree(TEMPLATE, repo)
    ids = []
    for name, body in blocks:
        project, params = _submitted_as(doc, name)
        path = f"projects/{project}/operations/{name}.yaml"
        (repo / path).write_text(apply_params(body, params, path), encoding="utf-8")
        ids.append(f"{project}/{name}")
    compiled = compile_repo(snapshot_worktree(repo))
    assert compiled.valid, compiled.errors
    assert not [r for r in compiled.rejected if r.operation in ids], compiled.rejected
    ops = {o.id: o for o in (*compiled.operations, *compiled.schedules)}
    for op_id in ids:
        assert op_id in ops or f"{op_id}-0" in ops, f"{op_id} compiles to no operation"
    # The children's values the page shows are the compiler's draws.
    for child, lr, wd in re.findall(
        r'"operation": "(vision/sweep-wd-\d)",\n\s+"params": \{"lr": ([\d.]+), "wd": ([\d.]+)\}',
        doc,
    ):
        assert dict(ops[child].params) == {"lr": float(lr), "wd": float(wd)}, child
