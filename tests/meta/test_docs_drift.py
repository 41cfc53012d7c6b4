"""The docs stay true to the code: reasons, config and status fields, options, links."""

from __future__ import annotations

import enum
import json
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.paths import ROOT, TEMPLATE

from reconciler.adapters.repo import snapshot_worktree
from reconciler.cli import gendoc
from reconciler.core.compile import compile_repo
from reconciler.core.compile.model import json_schemas
from reconciler.core.observation.observe import ObservedReason
from reconciler.core.plan import PendingReason, StopReason, plan_repo
from reconciler.core.reporting.status import (
    ClusterStatus,
    ConfigStatus,
    OperationStatus,
    QueueStatus,
    StatusReason,
    Sync,
)
from reconciler.core.types import Phase, QueueStrategy, RejectReason
from reconciler.core.views.plan_render import plan_to_dict

DOCS = ROOT / "docs"
REASON_DOCS = ("dispatch.md", "status.md")
REASON_ENUMS: tuple[type[enum.StrEnum], ...] = (
    PendingReason,
    StopReason,
    ObservedReason,
    StatusReason,
    RejectReason,
    Sync,
    Phase,
    QueueStrategy,
)
# Values defined but never emitted anywhere. Each is checked to stay unused: the day code
# emits one, this test fails until it is documented.
NEVER_EMITTED = {RejectReason.INVALID_CONFIG}
# A relative Markdown link target (URLs have a ':' and are skipped), without its #anchor.
LINK = r"\]\(([^)#:\s]+)(?:#[^)]*)?\)"


def _code_spans(text: str) -> set[str]:
    """Every identifier-like token inside `backticks`."""
    tokens: set[str] = set()
    for span in re.findall(r"`([^`\n]+)`", text):
        tokens.update(re.findall(r"[A-Za-z][A-Za-z0-9]*", span))
    return tokens


def _read(*names: str) -> str:
    return "\n".join((DOCS / name).read_text(encoding="utf-8") for name in names)


def _member_reference(member: enum.StrEnum) -> str:
    return f"{type(member).__name__}.{member.name}"


def _python_sources() -> str:
    files = sorted((ROOT / "reconciler").rglob("*.py"))
    return "\n".join(p.read_text(encoding="utf-8") for p in files)


@pytest.mark.parametrize("reasons", REASON_ENUMS, ids=lambda e: e.__name__)
def test_every_reason_is_documented(reasons: type[enum.StrEnum]) -> None:
    documented = _code_spans(_read(*REASON_DOCS))
    missing = [m.value for m in reasons if m not in NEVER_EMITTED and m.value not in documented]
    assert not missing, (
        f"{reasons.__name__} values {missing} appear in none of "
        f"{', '.join('docs/' + d for d in REASON_DOCS)} (as `code`): document them"
    )


def test_undocumented_reasons_are_really_never_emitted() -> None:
    sources = _python_sources()
    for member in NEVER_EMITTED:
        uses = sources.count(_member_reference(member))
        assert uses == 0, (
            f"{_member_reference(member)} ({member.value}) is now used: document it in "
            f"docs/dispatch.md or docs/status.md and drop it from NEVER_EMITTED"
        )


def _fields(node: Any, defs: dict[str, Any], out: set[str], seen: set[str]) -> None:
    if isinstance(node, list):
        for item in node:
            _fields(item, defs, out, seen)
        return
    if not isinstance(node, dict):
        return
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name not in seen:
            seen.add(name)
            _fields(defs[name], defs, out, seen)
    for key, value in (node.get("properties") or {}).items():
        out.add(key)
        _fields(value, defs, out, seen)
    for key in ("items", "additionalProperties", "anyOf", "allOf", "oneOf"):
        if key in node:
            _fields(node[key], defs, out, seen)


@pytest.mark.parametrize("kind", sorted(json_schemas()))
def test_every_config_field_is_in_the_reference(kind: str) -> None:
    schema = json_schemas()[kind]
    fields: set[str] = set()
    _fields(schema, schema.get("$defs") or {}, fields, set())
    assert fields, f"no fields found in the {kind} schema"
    documented = _code_spans(_read("config-reference.md"))
    missing = sorted(fields - documented)
    assert not missing, f"{kind} fields {missing} are not in docs/config-reference.md"


def test_docs_index_links_every_doc() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([^)#]+\.md)\)", index))
    docs = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert docs - linked == set(), f"docs/README.md does not link {sorted(docs - linked)}"


def _layout_table() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme.split("## Layout", 1)[1].split("\n## ", 1)[0]


def test_the_readme_layout_names_every_module() -> None:
    """Each module of the package is named, in backticks, on its package's row."""
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^\| `reconciler/([\w/]*?)/?` \| (.*)$", _layout_table(), re.M)
    }
    missing: list[str] = []
    for module in sorted((ROOT / "reconciler").rglob("*.py")):
        parts = module.relative_to(ROOT / "reconciler").parts
        if module.name == "__main__.py":
            continue
        if module.name == "__init__.py":  # a package: its own row, or named on its parent's
            if "/".join(parts[:-1]) in rows or len(parts) < 3:
                continue
            parts, name = parts[:-1], parts[-2] + "/"
        else:
            name = module.stem
        # the row of its package, or of the nearest package above that has one
        package = next(
            "/".join(parts[:i]) for i in range(len(parts) - 1, 0, -1) if "/".join(parts[:i]) in rows
        )
        if f"`{name}`" not in rows[package]:
            missing.append(f"{'/'.join(parts[:-1])}: {name}")
    assert not missing, "README.md's Layout does not name:\n" + "\n".join(missing)


def test_source_paths_named_in_the_docs_exist() -> None:
    """A path such as `core/plan/planner.py` or `tests/core/test_plan.py` in a doc names a
    file that is there."""
    wrong: list[str] = []
    for doc in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        if doc.name == "benchmarks-history.md":  # a journal: it names files as they were
            continue
        text = doc.read_text(encoding="utf-8")
        for path in set(
            re.findall(r"(?<!tests/)\b((?:core|runtime|adapters|cli)/[\w/]+\.py)\b", text)
        ):
            if not (ROOT / "reconciler" / path).exists():
                wrong.append(f"{doc.relative_to(ROOT)}: {path}")
        for path in set(re.findall(r"\b(tests/[\w/]+\.py)\b", text)):
            if not (ROOT / path).exists():
                wrong.append(f"{doc.relative_to(ROOT)}: {path}")
    assert not wrong, "docs name files that are not there:\n" + "\n".join(sorted(wrong))


def test_relative_links_in_docs_resolve() -> None:
    broken: list[str] = []
    for doc in sorted(DOCS.glob("*.md")):
        for target in re.findall(LINK, doc.read_text("utf-8")):
            if not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_link_pattern_finds_relative_links_and_skips_urls() -> None:
    text = "see [a](missing.md#x), [b](https://example.com/x.md) and [c](ok.md)"
    assert re.findall(LINK, text) == ["missing.md", "ok.md"]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    text = doc.read_text("utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # no headings inside code blocks
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_anchors_in_links_exist() -> None:
    broken: list[str] = []
    for doc in sorted(DOCS.glob("*.md")):
        for target, anchor in re.findall(r"\]\(([^)#:\s]*)#([^)\s]+)\)", doc.read_text("utf-8")):
            page = doc.parent / target if target else doc
            if page.exists() and anchor not in _anchors(page):
                broken.append(f"{doc.relative_to(ROOT)} -> {target}#{anchor}")
    assert not broken, "links to missing headings:\n" + "\n".join(broken)


def test_slug_matches_github() -> None:
    assert _slug("2. Priority never preempts") == "2-priority-never-preempts"
    assert _slug("`reconciler dev-cluster up`") == "reconciler-dev-cluster-up"
    assert _slug("Pending entries: `message` and `blockedBy`") == (
        "pending-entries-message-and-blockedby"
    )


def _command_options() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for entry in gendoc.walk_commands():
        opts = {"-h", "--help"}
        for param in entry.command.params:
            opts.update(getattr(param, "opts", ()))
            opts.update(getattr(param, "secondary_opts", ()))
        out[entry.ctx.command_path] = opts
    return out


def _unknown_flags(text: str, commands: dict[str, set[str]]) -> list[str]:
    """``--flags`` written after ``reconciler <command>`` on a line that the command lacks."""
    found: list[str] = []
    for line in text.splitlines():
        for m in re.finditer(r"reconciler ((?:dev-cluster |import )?[a-z][a-z-]*)([^`]*)", line):
            path = f"reconciler {m.group(1)}"
            if path not in commands:
                continue  # prose ("the reconciler reads ...")
            rest = m.group(2).split("reconciler ")[0]
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest):
                if flag not in commands[path]:
                    found.append(f"{path} {flag}")
    return found


def test_flags_in_docs_exist() -> None:
    commands = _command_options()
    stale: list[str] = []
    for doc in sorted(DOCS.glob("*.md")):
        if doc.name != "cli.md":  # generated from the commands themselves
            stale += [f"{doc.name}: {u}" for u in _unknown_flags(doc.read_text("utf-8"), commands)]
    readme = ROOT / "README.md"
    stale += [f"README.md: {u}" for u in _unknown_flags(readme.read_text("utf-8"), commands)]
    assert not stale, "docs name options the commands do not have:\n" + "\n".join(stale)


def test_unknown_flag_is_reported() -> None:
    commands = _command_options()
    text = (
        "run `reconciler plan --base main --no-such-flag` "
        "or `reconciler dev-cluster up --gpu-nodes 3`"
    )
    assert _unknown_flags(text, commands) == ["reconciler plan --no-such-flag"]


def test_every_status_field_is_in_status_md() -> None:
    documented = _code_spans(_read("status.md"))
    missing: list[str] = []
    for cls in (OperationStatus, QueueStatus, ConfigStatus, ClusterStatus):
        # the keys a record can write: its fields' names on the wire
        keys = {f.serialization_alias or f.alias or n for n, f in cls.model_fields.items()}
        assert len(keys) >= 3, cls
        missing += [f"{cls.__name__}.{k}" for k in sorted(keys - documented)]
    assert not missing, f"status fields missing from docs/status.md: {missing}"


def test_plan_json_example_has_the_contract_keys() -> None:
    """The `-o json` example in dispatch.md has exactly the keys ``plan_to_dict`` writes."""
    text = _read("dispatch.md")
    block = text.split("```json\n", 1)[1].split("```", 1)[0]
    example = json.loads(block)
    now = datetime(2024, 1, 1, tzinfo=UTC)
    plan = plan_repo(compile_repo(snapshot_worktree(TEMPLATE)), (), now)
    real = plan_to_dict(plan)
    assert set(example) == set(real)
    for section in ("dispatch", "pending", "queues"):
        assert real[section], section
        assert set(example[section][0]) == set(real[section][0]), section
    assert set(example["stop"][0]) == {"operation", "reason"}
    optional = {"flavor", "replicas"}  # of a queue with flavors, of a distributed run
    assert (
        set(example["pending"][0]["blockedBy"]) - optional
        == set(next(p for p in real["pending"] if p["reason"] == "QuotaExceeded")["blockedBy"])
        - optional
    )


def _between(text: str, start: str, end: str) -> str:
    assert start in text, start
    body = text.split(start, 1)[1]
    assert end in body, end
    return body.split(end, 1)[0]


@pytest.mark.parametrize(
    ("doc", "start", "end"),
    [
        ("config-reference.md", "\n## Policy\n", "\n### Reserved names\n"),
        ("operations.md", "**RBAC**", "\n### Many clusters\n"),
    ],
    ids=["policy", "rbac"],
)
def test_the_policy_and_rbac_docs_list_every_governed_field_and_knob(
    doc: str, start: str, end: str
) -> None:
    """Issue 13: the RBAC and policy docs list every field that policy governs
    (``policy.GOVERNED``, held to the violations by tests/core/test_policy_escapes.py) and every
    knob of ``policy:`` that adjusts one."""
    from reconciler.core.compile.model import Policy
    from reconciler.core.compile.policy import GOVERNED

    section = _between((DOCS / doc).read_text(encoding="utf-8"), start, end)
    missing = [f for f in GOVERNED if f"`{f}`" not in section]
    knobs = sorted(str(info.alias) for info in Policy.model_fields.values())
    missing += [f"policy.{k}" for k in knobs if f"`policy.{k}`" not in section]
    assert missing == [], f"docs/{doc} does not name {missing}"


# --- the README's commands, as CI runs them (issue 34) -------------------------------------

CI_RUN = ROOT / ".ci" / "run"
# how .ci/run takes the test command out of README.md, and runs it
CI_EXTRACT = re.compile(r"""^TEST_CMD=\$\((sed -n '([^']*)' README\.md)\)$""", re.M)


def _readme_command(marker: str) -> str:
    """What ``sed -n '/<!-- marker -->/{n;n;p;}'`` prints (the line after the ```bash fence
    below the marker), once the block is checked to be one fenced line."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    at = [i for i, line in enumerate(lines) if f"<!-- {marker} -->" in line]
    assert len(at) == 1, f"README.md has {len(at)} <!-- {marker} --> markers, not 1"
    i = at[0]
    assert lines[i + 1 : i + 4 : 2] == ["```bash", "```"], f"{marker}: not one fenced line"
    return lines[i + 2]


def _parts(command: str) -> list[str]:
    return [part.strip() for part in command.split("&&")]


def test_ci_runs_the_readme_test_command_as_it_is_written() -> None:
    ci = CI_RUN.read_text(encoding="utf-8")
    found = CI_EXTRACT.search(ci)
    assert found, ".ci/run no longer takes TEST_CMD from README.md with sed"
    assert found.group(2) == "/<!-- test-command -->/{n;n;p;}"
    sed = subprocess.run(
        ["bash", "-c", found.group(1)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert sed.stdout == _readme_command("test-command") + "\n"
    assert '\nbash -c "$TEST_CMD"\n' in ci


def test_ci_does_no_set_up_the_readme_test_command_lacks() -> None:
    """CI installs and builds nothing before the README's command but the linters' venv,
    with the README's own install: a set-up step of CI's own would hide a README that
    no longer passes alone."""
    lines = CI_RUN.read_text(encoding="utf-8").splitlines()
    ci = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
    for setup in ("apt-get", "scripts/bootstrap ", "proxy.golang.org", "dev-cluster build"):
        assert setup not in ci, f".ci/run does {setup!r} itself: the README's command must"
    assert not re.search(r"^\s*export (PATH|GOTOOLCHAIN|GO)", ci, flags=re.M)
    installs = re.findall(r"pip install (?:-q )?(-e \S+)", ci)
    readme_install = _parts(_readme_command("test-command"))[1]
    assert installs == [readme_install.split("pip install ", 1)[1]]


def test_the_readme_test_command_sets_up_then_runs_every_test() -> None:
    bootstrap, install, run = _parts(_readme_command("test-command"))
    assert bootstrap == "bash scripts/bootstrap" and (ROOT / "scripts/bootstrap").is_file()
    assert install == "python3 -m pip install -e '.[dev]'"
    assert run == "python3 -m pytest"  # no -m, -k or path: nothing left out


def test_the_readme_run_command_is_the_demo_the_tests_run() -> None:
    install, run = _parts(_readme_command("run-command"))
    assert install == "python3 -m pip install -e ."  # a subset of the test command's
    assert run == "reconciler demo"
    assert run in _command_options()
    demo_test = (ROOT / "tests/cluster/test_reconciler.py").read_text(encoding="utf-8")
    assert '"-m",\n            "reconciler",\n            "demo",' in demo_test
