"""The tests' own layout: a folder per layer, shared code in ``support``, and test modules
that never import one another."""

from __future__ import annotations

import ast
import re

from support.paths import ROOT

TESTS = ROOT / "tests"
FOLDERS = {"core", "adapters", "runtime", "cli", "devcluster", "meta", "cluster"}


def _imports(path) -> list[str]:  # type: ignore[no-untyped-def]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


def test_every_test_module_is_in_a_layer_folder() -> None:
    misplaced = [
        str(p.relative_to(TESTS))
        for p in TESTS.rglob("test_*.py")
        if p.parent.name not in FOLDERS or p.parent.parent != TESTS
    ]
    assert not misplaced, f"test modules outside {sorted(FOLDERS)}: {misplaced}"


def test_test_module_names_are_unique_across_folders() -> None:
    """The folders are not packages: pytest imports each module by its name alone, and a
    second module of the same name stops the whole collection."""
    seen: dict[str, list[str]] = {}
    for p in TESTS.rglob("test_*.py"):
        seen.setdefault(p.name, []).append(str(p.relative_to(TESTS)))
    assert not {n: ps for n, ps in seen.items() if len(ps) > 1}


def test_test_modules_import_support_never_each_other_or_conftest() -> None:
    wrong = [
        f"{p.relative_to(TESTS)}: {name}"
        for p in sorted(TESTS.rglob("*.py"))
        if "data" not in p.parts
        for name in _imports(p)
        if re.match(r"(tests\.)?(test_\w+|conftest)$", name)
    ]
    assert not wrong, "import from tests/support instead:\n" + "\n".join(wrong)


def test_the_support_package_lists_its_modules() -> None:
    doc = (TESTS / "support" / "__init__.py").read_text(encoding="utf-8")
    modules = {p.stem for p in (TESTS / "support").glob("*.py")} - {"__init__"}
    unlisted = sorted(m for m in modules if f"``{m}``" not in doc)
    assert not unlisted, f"tests/support/__init__.py does not list {unlisted}"


def test_no_support_module_shadows_an_installed_one() -> None:
    """``peak_rss.py`` and ``zygote.py`` run as scripts, with ``tests/support`` first on the
    path: a support module named like an installed one (``git``) would replace it there."""
    import importlib.util

    def installed(name: str) -> bool:
        spec = importlib.util.find_spec(name)
        places = (
            [spec.origin]
            if spec and spec.origin
            else list(spec.submodule_search_locations or [])
            if spec
            else []
        )
        return any(not str(place).startswith(str(TESTS)) for place in places)

    shadowing = sorted(
        p.stem
        for p in (TESTS / "support").glob("*.py")
        if p.stem != "__init__" and installed(p.stem)
    )
    assert not shadowing, f"rename {shadowing}: they shadow installed modules"
