"""Each module of the package imports on its own: a stage package never needs another
loaded first (an import cycle that one order hides shows in another)."""

from __future__ import annotations

import subprocess
import sys

from support.paths import ROOT

CHILD = """
import importlib, pkgutil, sys
import reconciler
names = sorted(
    m.name
    for m in pkgutil.walk_packages(reconciler.__path__, "reconciler.")
    if not m.name.endswith("__main__")  # runs the CLI
)
failed = []
for name in names:
    for loaded in [k for k in sys.modules if k == "reconciler" or k.startswith("reconciler.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print(len(names))
print("\\n".join(failed))
"""


def test_every_module_imports_first() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    count, *failed = out.stdout.splitlines()
    assert int(count) > 100
    assert not [f for f in failed if f], "\n".join(failed)
