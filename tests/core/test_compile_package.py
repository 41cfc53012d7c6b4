"""The compiler package: one concern a module, each saying what must live in it, and one
way of reporting a problem in the config (the ``Errors`` collector)."""

from __future__ import annotations

import importlib
import pkgutil

import reconciler.core as core
import reconciler.core.compile as package
from reconciler.core.compile.errors import Errors
from reconciler.core.types import ConfigError, Location


def test_every_module_says_what_must_live_in_it() -> None:
    names = [m.name for m in pkgutil.iter_modules(package.__path__)]
    assert {
        "api",
        "cache",
        "errors",
        "index",
        "operations",
        "references",
        "resolve",
        "workflows",
    } <= set(names)
    for name in names:
        module = importlib.import_module(f"{package.__name__}.{name}")
        doc = module.__doc__ or ""
        assert "What must live here" in doc, f"{module.__name__} has no header saying so"


def test_every_core_module_says_what_must_live_in_it() -> None:
    """Each stage package lists its modules; each module says what must live in it."""
    missing = []
    for info in pkgutil.walk_packages(core.__path__, prefix="reconciler.core."):
        module = importlib.import_module(info.name)
        if info.ispkg:
            members = {m.name for m in pkgutil.iter_modules(module.__path__)}
            unlisted = {m for m in members if f"``{m}``" not in (module.__doc__ or "")}
            missing += [f"{info.name}: does not list {m}" for m in sorted(unlisted)]
        elif "What must live here" not in (module.__doc__ or ""):
            missing.append(f"{info.name}: no 'What must live here'")
    assert not missing, "\n".join(missing)


def test_the_interface_is_the_package() -> None:
    assert set(package.__all__) == {
        "MAX_WORKFLOW_CHILDREN",
        "CompileCache",
        "OperationResult",
        "compile_operation",
        "compile_repo",
        "org_settings",  # reconciler.yaml alone (``reconciler usage``)
    }


def test_errors_are_reported_in_order_and_finished_sorted_once() -> None:
    errors = Errors()
    assert not errors and len(errors) == 0
    errors.add(Location("b.yaml", 2, 1), "second")
    errors.add(Location("a.yaml", 1, 1), "first")
    errors.add_once(Location("b.yaml", 2, 1), "second")
    errors.add(Location("b.yaml", 2, 1), "second")  # add never drops a repeat
    assert [e.message for e in errors] == ["second", "first", "second"]
    other = [ConfigError(Location("a.yaml", 1, 1), "first"), ConfigError(Location("c", 0, 0), "x")]
    assert [str(e) for e in errors.finish(other)] == [
        "a.yaml:1:1: first",
        "b.yaml:2:1: second",
        "c:0:0: x",
    ]
