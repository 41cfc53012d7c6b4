"""``reconciler import kueue``: the manifests of tests/data/import/kueue/ (written from Kueue's
API reference, v1beta1 and v1beta2) become flavors, queues, a cohort and projects, pinned by
a golden file; the result validates; what has no equivalent is reported at its line.

Regenerate the golden after an intended change with
``UPDATE_GOLDEN=1 python -m pytest tests/cli/test_import_kueue.py``.
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from support.paths import ROOT

from reconciler.cli.main import cli
from reconciler.core.authoring.importers import Source, Target
from reconciler.core.authoring.importers.kueue import import_kueue

DATA = Path("tests/data/import")
MANIFESTS = sorted((ROOT / DATA / "kueue").glob("*.yaml"))
GOLDEN = ROOT / "tests" / "data" / "golden"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _paths() -> list[str]:
    return [str(DATA / "kueue" / p.name) for p in MANIFESTS]


def _repo(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(ROOT / DATA / "kueue-repo", out)
    return out


def test_golden_each_manifest_becomes(tmp_path: Path) -> None:
    out = _repo(tmp_path)
    before = _tree(out)
    result = _run("import", "kueue", *_paths(), "--out", str(out))
    assert result.exit_code == 0, result.output
    written = {k: v for k, v in _tree(out).items() if k not in before}
    text = "".join(f"=== {path}\n{body}" for path, body in sorted(written.items()))
    text += "=== findings (stderr)\n" + result.stderr
    path = GOLDEN / "import_kueue.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_the_converted_repo_validates(tmp_path: Path) -> None:
    out = _repo(tmp_path)
    assert _run("import", "kueue", *_paths(), "--out", str(out)).exit_code == 0
    result = _run("validate", "--repo", str(out), "-o", "json")
    assert result.exit_code == 0, result.output
    assert sorted(yaml.safe_load(result.stdout)["queues"]) == ["cpu-batch", "team-a", "team-b"]


def test_queues_keep_flavor_order_limits_and_cohort(tmp_path: Path) -> None:
    out = _repo(tmp_path)
    assert (
        _run("import", "kueue", *_paths(), "--out", str(out), "--cluster", "local").exit_code == 0
    )
    team_a = yaml.safe_load((out / "queues/team-a.yaml").read_text())
    assert [f["name"] for f in team_a["flavors"]] == ["h100", "a100"]
    assert team_a["flavors"][0]["borrowingLimit"] == {"nvidia.com/gpu": 2}
    assert team_a["flavors"][1]["lendingLimit"] == {"nvidia.com/gpu": 4}
    # The second resource group's a100 quotas are merged into the a100 entry.
    assert team_a["flavors"][1]["quota"] == {"nvidia.com/gpu": 8, "cpu": 64, "memory": "512Gi"}
    assert team_a["cohort"] == "gpu-pool" and team_a["strategy"] == "StrictFIFO"
    assert team_a["fairSharing"] == {"weight": 2}
    team_b = yaml.safe_load((out / "queues/team-b.yaml").read_text())
    assert team_b["cohort"] == "gpu-pool" and team_b["paused"] is True  # v1beta2 cohortName
    cpu = yaml.safe_load((out / "queues/cpu-batch.yaml").read_text())
    assert cpu["quota"] == {"cpu": 32, "memory": "128Gi"} and "flavors" not in cpu
    cohort = (out / "cohorts/gpu-pool.yaml").read_text()
    assert "maxBorrowDuration: 2h" in cohort and "# maxBorrowDuration has no Kueue" in cohort
    project = yaml.safe_load((out / "projects/team-a/project.yaml").read_text())
    assert project["allowedQueues"] == ["team-a", "cpu-batch"]
    assert project["defaults"] == {"queue": "team-a"}


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("cluster-queues.yaml:31:3:", "preemption: no equivalent: the reconciler never preempts"),
        ("cluster-queues.yaml:37:3:", "admissionChecks"),
        ("cluster-queues.yaml:39:5:", "whenCanBorrow Borrow"),
        ("cluster-queues.yaml:8:3:", "namespaceSelector"),
        ("cluster-queues.yaml:27:17:", "in two resource groups"),
        ("cluster-queues.yaml:7:11:", "maxBorrowDuration is required here"),
        ("flavors.yaml:11:3:", "topology-aware scheduling (TAS)"),
        ("flavors.yaml:20:3:", "nodeTaints: no equivalent"),
        ("cohort.yaml:7:3:", "parentName"),
        ("cohort.yaml:8:3:", "fairSharing"),
        ("priority.yaml:5:8:", "there are no priority classes; set the `priority`"),
        ("local-queues.yaml:22:14:", "add team-b to allowedQueues in projects/lab/project.yaml"),
        ("local-queues.yaml:25:3:", "stopPolicy"),
    ],
)
def test_what_has_no_equivalent_is_reported_at_its_line(
    tmp_path: Path, line: str, words: str
) -> None:
    result = _run("import", "kueue", *_paths(), "--out", str(_repo(tmp_path)))
    found = [x for x in result.stderr.splitlines() if x.startswith(str(DATA / "kueue" / line))]
    assert found and words in found[0], result.stderr


def test_try_next_flavor_on_borrow_matches_and_is_not_reported(tmp_path: Path) -> None:
    result = _run("import", "kueue", *_paths(), "--out", str(tmp_path / "o"))
    assert "TryNextFlavor:" not in result.stderr
    assert "cluster-queues.yaml:58:" not in result.stderr  # team-b's whenCanBorrow


def test_strict_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "o"
    result = _run("import", "kueue", *_paths(), "--out", str(out), "--strict")
    assert result.exit_code == 1 and not out.exists()


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", ":1:13:", "not Kueue's"),
        (
            "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nspec: {}\n",
            ":2:1:",
            "ClusterQueue without metadata.name",
        ),
        ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: [\n", ":3:1:", "expected"),
        (
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: q}\n"
            "spec:\n  resourceGroups:\n  - coveredResources: [cpu]\n    flavors:\n"
            "    - name: a100\n      resources:\n      - {name: cpu, nominalQuota: lots}\n",
            ":10:35:",
            "nominalQuota 'lots' is not a quantity",
        ),
    ],
)
def test_bad_manifests_are_located_errors(
    tmp_path: Path, text: str, where: str, words: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    out = tmp_path / "o"
    result = _run("import", "kueue", *_paths(), str(bad), "--out", str(out))
    assert result.exit_code == 1
    found = [x for x in result.stderr.splitlines() if x.startswith(f"{bad}{where}")]
    assert found and words in found[0], result.stderr
    assert not out.exists() and "Traceback" not in result.output


def test_a_second_document_keeps_the_lines_of_the_file(tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        "# two objects\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\n"
        "metadata: {name: a}\nspec: {nodeLabels: {x: y}}\n---\n"
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: b}\n"
        "spec:\n  nodeLabels: {x: z}\n  nodeTaints: []\n"
    )
    result = _run("import", "kueue", str(manifest), "--out", str(tmp_path / "o"))
    assert result.exit_code == 0
    assert f"{manifest}:13:3: nodeTaints" in result.stderr


def _mutations(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    out: list[tuple[tuple[Any, ...], Any]] = []
    items = (
        data.items()
        if isinstance(data, dict)
        else enumerate(data)
        if isinstance(data, list)
        else ()
    )
    for key, value in items:
        for wrong in (None, 7, "x", [1], {"a": 1}):
            if type(wrong) is not type(value):
                out.append(((*path, key), wrong))
        out.extend(_mutations(value, (*path, key)))
    return out


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_a_value_of_any_wrong_type_never_crashes(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    for index, doc in enumerate(docs):
        for where, wrong in _mutations(doc):
            changed = copy.deepcopy(docs)
            cursor = changed[index]
            for part in where[:-1]:
                cursor = cursor[part]
            cursor[where[-1]] = wrong
            text = yaml.safe_dump_all(changed).encode()
            result = import_kueue([Source("m.yaml", text)], target=Target())
            for item in (*result.errors, *result.findings):
                assert str(item).startswith("m.yaml:"), item


def test_the_docs_tables_name_every_field_the_importer_knows() -> None:
    from reconciler.core.authoring.importers.kueue import FIELDS

    text = (ROOT / "docs" / "from-kueue.md").read_text()
    missing = [
        f"{kind}.{f}"
        for kind, names in FIELDS.items()
        for f in names
        if f"`{f}`" not in text and f"`spec.{f}`" not in text and f"`…resources[].{f}`" not in text
    ]
    assert not missing, f"docs/from-kueue.md does not name {missing}"


def test_a_queue_the_repo_has_is_reported_not_written(tmp_path: Path) -> None:
    out = _repo(tmp_path)
    (out / "queues").mkdir()
    (out / "queues" / "team-b.yaml").write_text("kind: Queue\ncluster: local\n")
    result = _run("import", "kueue", *_paths(), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert (
        f"{DATA / 'kueue' / 'cluster-queues.yaml'}:45:9: queues/team-b.yaml exists" in result.stderr
    )
    assert (out / "queues" / "team-b.yaml").read_text() == "kind: Queue\ncluster: local\n"


def test_kubectl_output_with_kueue_defaults_reports_only_what_differs(tmp_path: Path) -> None:
    # As `kubectl get clusterqueues,localqueues -o yaml` prints them: a List, with the
    # defaults filled in and a status.
    listing = tmp_path / "cq.yaml"
    listing.write_text(
        """apiVersion: v1
kind: List
items:
  - apiVersion: kueue.x-k8s.io/v1beta1
    kind: ClusterQueue
    metadata: {name: q, uid: 1b2c, resourceVersion: "42"}
    spec:
      namespaceSelector: {}
      queueingStrategy: BestEffortFIFO
      stopPolicy: None
      flavorFungibility: {whenCanBorrow: TryNextFlavor, whenCanPreempt: TryNextFlavor}
      preemption:
        borrowWithinCohort: {policy: Never}
        reclaimWithinCohort: Never
        withinClusterQueue: Never
      resourceGroups:
        - coveredResources: [cpu]
          flavors:
            - name: default-flavor
              resources: [{name: cpu, nominalQuota: "8"}]
    status: {pendingWorkloads: 0}
  - apiVersion: kueue.x-k8s.io/v1beta1
    kind: ClusterQueue
    metadata: {name: q}
    spec: {}
  - apiVersion: kueue.x-k8s.io/v1beta1
    kind: LocalQueue
    metadata: {name: q, namespace: ml}
    spec: {clusterQueue: nope}
"""
    )
    out = tmp_path / "o"
    result = _run("import", "kueue", str(listing), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[:-1] == [
        f"{listing}:24:22: ClusterQueue 'q' twice: the last one is kept",
        f"{listing}:28:22: LocalQueue name 'q' is not kept: operations name the queue itself "
        "('nope')",
        f"{listing}:29:26: clusterQueue 'nope': no ClusterQueue of that name among the "
        "imported files nor in the repo: not added",
    ]


def test_a_queue_whose_every_quota_is_dropped_is_written_paused(tmp_path: Path) -> None:
    """A ClusterQueue of 1 GPU whose ResourceFlavor is not imported must not become a
    queue without a quota, which dispatches without limit."""
    manifest = tmp_path / "cq.yaml"
    manifest.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta1\n"
        "kind: ClusterQueue\n"
        "metadata: {name: small}\n"
        "spec:\n"
        "  resourceGroups:\n"
        "  - coveredResources: [nvidia.com/gpu]\n"
        "    flavors:\n"
        "    - name: a100\n"
        "      resources: [{name: nvidia.com/gpu, nominalQuota: 1}]\n"
    )
    out = tmp_path / "out"
    result = _run("import", "kueue", str(manifest), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert f"{manifest}:5:3: no quota of ClusterQueue 'small' could be kept" in result.stderr
    queue = yaml.safe_load((out / "queues" / "small.yaml").read_text())
    assert queue["paused"] is True and "quota" not in queue and "flavors" not in queue


@pytest.mark.parametrize("importer", [["kueue"], ["polyaxon", "--project", "vision"]])
@pytest.mark.parametrize("cluster", ["local\nprices: {}", "../local", "Local", ""])
def test_a_cluster_that_is_no_name_is_refused_and_nothing_is_written(
    importer: list[str], cluster: str, tmp_path: Path
) -> None:
    """--cluster is written into every queue the import creates: a line break in it wrote
    a YAML block there, and the result did not validate."""
    out = tmp_path / "out"
    source = ROOT / DATA / ("kueue/cluster-queues.yaml" if importer[0] == "kueue" else "polyaxon")
    paths = [str(source)] if source.is_file() else [str(p) for p in sorted(source.glob("*.yaml"))]
    result = CliRunner().invoke(
        cli, ["import", *importer, *paths, "--out", str(out), "--cluster", cluster]
    )
    assert result.exit_code == 2, result.output
    assert "is not a DNS-1123 label" in result.output
    assert not out.exists()
