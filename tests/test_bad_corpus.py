"""Every file under tests/data/bad/ breaks the template repo in one way.

Each starts with ``# path: <where it goes in the repo>`` and ``# expect: <message>``; the
message must appear (as ``file:line:col: ...``) in ``reconciler validate``'s output, which
must exit 1 without a traceback.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import TEMPLATE

from reconciler.cli.main import cli

BAD = Path(__file__).parent / "data" / "bad"
CASES = sorted(BAD.glob("*.yaml"))
_LOCATED = re.compile(r"^\S+:\d+:\d+: \S")


def _header(data: bytes) -> tuple[str, str]:
    lines = data.split(b"\n", 2)
    path = lines[0].decode().removeprefix("# path: ")
    expect = lines[1].decode().removeprefix("# expect: ")
    return path, expect


def test_corpus_is_large() -> None:
    assert len(CASES) >= 100


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
    result = CliRunner().invoke(cli, ["validate", "--repo", str(root)])
    output = result.output
    assert result.exit_code == 1, output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in output
    assert expect in output, f"{case.name}: expected\n  {expect}\ngot\n{output}"


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
