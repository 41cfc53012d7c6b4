"""One bad field in one file is reported at that file only: its dependents (the queues on
a cluster, the budgets priced by reconciler.yaml, the operations of a queue or a preset)
are not reported as broken references, such as "unknown cluster 'local' (did you mean
'local'?)" or "a cost budget needs prices" while prices are set."""

from __future__ import annotations

import re

import pytest
from support.paths import TEMPLATE
from support.snapshots import overlay, repo

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


# A repo whose operations take their queue and a preset from reconciler.yaml's defaults.
_ORG_DEFAULTS = {
    "reconciler.yaml": "kind: Org\ndefaults:\n  queue: q\n  presets: [base]\n",
    "clusters/local.yaml": "kind: Cluster\nkubeconfig: {inCluster: true}\n",
    "queues/q.yaml": "kind: Queue\ncluster: local\n",
    "presets/base.yaml": "kind: Preset\nrun:\n  kind: job\n  container: {image: busybox}\n",
    "projects/p/project.yaml": "kind: Project\n",
    "projects/p/operations/a.yaml": "kind: Operation\n",
}


@pytest.mark.parametrize("path", sorted(_ORG_DEFAULTS))
@pytest.mark.parametrize("how", sorted(BREAKS))
def test_operations_that_lean_on_reconciler_yaml_are_not_blamed_for_it(path: str, how: str) -> None:
    files = dict(_ORG_DEFAULTS)
    assert compile_repo(repo(files)).valid
    files[path] = BREAKS[how](files[path])
    compiled = compile_repo(repo(files))
    assert not compiled.valid
    elsewhere = [str(e) for e in compiled.errors if e.location.file != path]
    assert not elsewhere, elsewhere
