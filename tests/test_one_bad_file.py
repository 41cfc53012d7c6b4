"""One bad field in one file is reported at that file only: its dependents (the queues on
a cluster, the budgets priced by reconciler.yaml, the operations of a queue or a preset)
are not reported as broken references, such as "unknown cluster 'local' (did you mean
'local'?)" or "a cost budget needs prices" while prices are set."""

from __future__ import annotations

import re

import pytest
from conftest import TEMPLATE, overlay

from reconciler.adapters.repo import snapshot_worktree
from reconciler.core.compile import compile_repo

_SNAPSHOT = snapshot_worktree(TEMPLATE)
CONFIG_FILES = sorted(
    p for p in _SNAPSHOT.files if p.endswith(".yaml") and not p.startswith(("schemas/", "docs/"))
)


BREAKS = {
    "unknown-field": lambda text: text.rstrip("\n") + "\nbogusField: 1\n",
    "yaml": lambda text: text.rstrip("\n") + "\nbroken: [unclosed\n",
    "kind-a-list": lambda text: (
        text.replace("kind: ", "kind: [", 1).replace("\n", "]\n", 1)
        if text.startswith("kind: ")
        else re.sub(r"\nkind: (\w+)", r"\nkind: [\1]", text, count=1)
    ),
}


@pytest.mark.parametrize("path", CONFIG_FILES)
@pytest.mark.parametrize("how", sorted(BREAKS))
def test_one_bad_file_is_reported_at_that_file_only(path: str, how: str) -> None:
    text = _SNAPSHOT.files[path].content.decode()
    broken = BREAKS[how](text)
    assert broken != text
    compiled = compile_repo(overlay(_SNAPSHOT, {path: broken}))
    assert not compiled.valid
    elsewhere = [str(e) for e in compiled.errors if e.location.file != path]
    assert not elsewhere, elsewhere
