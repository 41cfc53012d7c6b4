"""Section 8 of issue 13: the fields Polyaxon users expect a preset to set.

``run.environment.serviceAccountName`` and ``imagePullSecrets``, ``run.volumes`` and
``volumeMounts``, ``run.initContainers`` and ``run.sidecars``, ``run.maxRetries`` and
``run.ttl``, and the org's ``defaults.presets``: each validates strictly, carries
provenance, is checked on the merged spec, and is under policy whichever layer set it.
"""

from __future__ import annotations

import json
import shutil
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.escapes import BASE, ESCAPES, OP, ORG
from support.escapes import compile as _compile
from support.escapes import reject as _reject
from support.paths import DATA, TEMPLATE
from support.snapshots import repo

from reconciler.cli.main import cli
from reconciler.core.compile import compile_operation
from reconciler.core.compile.explain import provenance_rows
from reconciler.core.types import CompiledOperation

STRATEGIES = ["replace", "isnull", "post_merge", "pre_merge"]


def _one(files: dict[str, str], org: str = ORG) -> CompiledOperation:
    compiled = _compile(files, org)
    assert compiled.errors == () and compiled.rejected == (), (compiled.errors, compiled.rejected)
    (op,) = compiled.operations
    return op


def _errors(files: dict[str, str], org: str = ORG) -> list[str]:
    compiled = _compile(files, org)
    assert not compiled.valid, "expected config errors"
    return [str(e) for e in compiled.errors]


# --- the schema ---------------------


@pytest.mark.parametrize("where", ["presets/esc.yaml", "projects/p/operations/t.yaml"])
def test_a_host_path_volume_is_refused_at_its_key_and_points_at_connections(where: str) -> None:
    head = "kind: Preset\n" if where.startswith("presets/") else "kind: Operation\n"
    files = {
        "projects/p/operations/t.yaml": "kind: Operation\npresets: [esc]\n",
        "presets/esc.yaml": "kind: Preset\n",
    }
    files[where] = head + "run:\n  volumes:\n    - name: h\n      hostPath: {path: /}\n"
    (error,) = _errors(files, ORG + "  allowHostPath: true\n")
    assert error.startswith(f"{where}:5:17: run.volumes[0].hostPath: hostPath volumes are not ")
    assert "through a 'volume' connection with hostPath (needs policy.allowHostPath)" in error


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        (
            "  volumes:\n    - name: v\n      emptyDir: {}\n      secret: {secretName: s}\n",
            4,
            "run.volumes[0]: set exactly one of persistentVolumeClaim, configMap, secret, emptyDir",
        ),
        ("  volumes:\n    - name: v\n", 4, "set exactly one of"),
        ("  volumes:\n    - name: dshm\n      emptyDir: {}\n", 4, "volume name 'dshm' is reserved"),
        ("  volumes:\n    - {name: conn-x, emptyDir: {}}\n", 4, "'conn-x' is reserved"),
        (
            "  volumes:\n    - {name: v, emptyDir: {medium: Disk}}\n",
            4,
            "run.volumes[0].emptyDir.medium: Input should be '' or 'Memory'",
        ),
        (
            "  volumes:\n    - {name: v, configMap: {name: c, items: [{key: k, path: /abs}]}}\n",
            4,
            "must be a relative path",
        ),
        ("  sidecars:\n    - {name: main, image: x}\n", 4, "'main' is reserved"),
        ("  initContainers:\n    - {name: x}\n", 4, "missing required field"),
        ("  sidecars:\n    - {name: s, image: x, hostNetwork: true}\n", 4, "unknown field"),
        (
            "  container:\n    volumeMounts: [{name: v, mountPath: rel}]\n",
            4,
            "must be an absolute path",
        ),
        ("  maxRetries: '3'\n", 3, "run.maxRetries: Input should be a valid integer"),
        ("  maxRetries: true\n", 3, "run.maxRetries: Input should be a valid integer"),
        ("  maxRetries: -1\n", 3, "greater than or equal to 0"),
        ("  ttl: -5\n", 3, "out of range"),
        ("  ttl: 99999999999h\n", 3, "out of range"),
        ("  ttl: 2 days\n", 3, "is not a duration"),
        ("  ttl: true\n", 3, "is not a duration"),
        ("  environment:\n    serviceAccountName: Not_A_Name\n", 4, "DNS-1123 subdomain"),
        ("  environment:\n    imagePullSecrets: [ok, 'bad name']\n", 4, "DNS-1123 subdomain"),
    ],
)
def test_pod_fields_are_strict(body: str, line: int, message: str) -> None:
    errors = _errors({"projects/p/operations/t.yaml": "kind: Operation\nrun:\n" + body})
    assert any(
        e.startswith(f"projects/p/operations/t.yaml:{line}:") and message in e for e in errors
    ), errors


def test_org_policy_fields_are_strict() -> None:
    org = "kind: Org\npolicy:\n  allowedVolumeTypes: [hostPath]\n  maxRetries: '2'\n  minTtl: x\n"
    errors = _errors({"projects/p/operations/t.yaml": OP}, org)
    assert any(e.startswith("reconciler.yaml:3:") and "allowedVolumeTypes" in e for e in errors)
    assert any(e.startswith("reconciler.yaml:4:") and "maxRetries" in e for e in errors)
    assert any(e.startswith("reconciler.yaml:5:") and "minTtl" in e for e in errors)


# --- compiled, with provenance ---------------------

# every pod field a preset may set
EVERYTHING = (DATA / "presets" / "pod-fields.yaml").read_text()
PERMISSIVE = ORG + "  allowedServiceAccounts: [trainer]\n"


def test_every_pod_field_compiles_with_the_provenance_of_the_preset_that_set_it() -> None:
    op = _one(
        {
            "presets/platform.yaml": EVERYTHING,
            "projects/p/operations/t.yaml": "kind: Operation\npresets: [platform]\n",
        },
        PERMISSIVE,
    )
    run = op.spec["run"]
    assert run["environment"]["serviceAccountName"] == "trainer"
    assert [v["name"] for v in run["volumes"]] == ["scratch", "cfg"]
    assert run["maxRetries"] == 2 and run["ttl"] == "2h"
    expected = {
        "run.environment.serviceAccountName": 5,
        "run.environment.imagePullSecrets[0]": 6,
        "run.volumes[0]": 8,
        "run.volumes[1]": 10,
        "run.container.volumeMounts[0]": 14,
        "run.initContainers[0]": 16,
        "run.sidecars[0]": 21,
        "run.maxRetries": 24,
        "run.ttl": 25,
    }
    for field, line in expected.items():
        prov = op.provenance[field]
        assert (prov.file, prov.line, prov.step) == (
            "presets/platform.yaml",
            line,
            "preset platform (post_merge)",
        ), field
    # `compile --explain` shows the same rows, with the compiled values.
    rows = {r.field: r for r in provenance_rows(op)}
    assert rows["run.ttl"].value == "2h" and rows["run.ttl"].source == "presets/platform.yaml:25"
    assert '"name": "logs"' in rows["run.sidecars[0]"].value
    # The sidecar's request joins the operation's (main container asks for nothing).
    assert op.requests == {"cpu": Decimal("0.1")}


def test_list_fields_follow_the_list_rule_of_each_strategy() -> None:
    """volumes, imagePullSecrets, initContainers and sidecars are top-level lists: the
    contract's list rule, items compared by value."""
    files = {
        "presets/a.yaml": "kind: Preset\nrun:\n  environment:\n    imagePullSecrets: [a]\n"
        "  sidecars: [{name: a, image: a}]\n",
        "presets/b.yaml": "kind: Preset\npatchStrategy: {s}\nrun:\n  environment:\n"
        "    imagePullSecrets: [b]\n  sidecars: [{name: b, image: b}]\n",
    }
    expected = {
        "post_merge": (["a", "b"], ["a", "b"]),
        "pre_merge": (["b", "a"], ["b", "a"]),
        "replace": (["b"], ["b"]),
        "isnull": (["a"], ["a"]),
    }
    for strategy, (secrets, sidecars) in expected.items():
        op = _one(
            {
                "presets/a.yaml": files["presets/a.yaml"],
                "presets/b.yaml": files["presets/b.yaml"].replace("{s}", strategy),
                "projects/p/operations/t.yaml": "kind: Operation\npresets: [a, b]\n",
            }
        )
        run = op.spec["run"]
        assert run["environment"]["imagePullSecrets"] == secrets, strategy
        assert [s["name"] for s in run["sidecars"]] == sidecars, strategy


def test_a_dag_child_overrides_the_termination_fields() -> None:
    op_file = (
        "kind: Operation\nrun:\n  maxRetries: 1\n  ttl: 3h\n"
        "dag:\n  operations:\n    - name: a\n    - name: b\n      run:\n        maxRetries: 3\n"
    )
    compiled = _compile({"projects/p/operations/t.yaml": op_file})
    assert compiled.errors == () and compiled.rejected == ()
    a, b = compiled.operations
    assert (a.spec["run"]["maxRetries"], b.spec["run"]["maxRetries"]) == (1, 3)
    assert b.provenance["run.maxRetries"].step == "dag operation b"
    assert b.provenance["run.maxRetries"].line == 10
    assert b.spec["run"]["ttl"] == "3h"


# --- the org's default presets ---------------------


def _tag(name: str, strategy: str = "post_merge") -> str:
    return (
        f"kind: Preset\npatchStrategy: {strategy}\nrun:\n  container:\n    image: {name}\n"
        f"    env: {{{name.upper()}: {name}}}\n"
    )


ORG_DEFAULTS = ORG.replace("policy:", "defaults:\n  presets: [org-a, org-b]\npolicy:")


def test_org_default_presets_come_before_the_projects_and_the_operations() -> None:
    project = BASE["projects/p/project.yaml"].replace("[base]", "[base, proj]")
    op = _one(
        {
            "presets/org-a.yaml": _tag("org-a"),
            "presets/org-b.yaml": _tag("org-b"),
            "presets/mine.yaml": _tag("mine"),
            "projects/p/presets/proj.yaml": _tag("proj"),
            "projects/p/project.yaml": project,
            "projects/p/operations/t.yaml": "kind: Operation\npresets: [mine]\n",
        },
        ORG_DEFAULTS,
    )
    assert op.presets == ("org-a", "org-b", "base", "proj", "mine")
    # post_merge: the last layer wins the image; every env key is kept.
    assert op.spec["run"]["container"]["image"] == "mine"
    assert set(op.spec["run"]["container"]["env"]) == {"ORG-A", "ORG-B", "PROJ", "MINE"}
    prov = op.provenance["run.container.env.ORG-A"]
    assert (prov.file, prov.step) == ("presets/org-a.yaml", "preset org-a (post_merge)")


def test_an_org_default_preset_under_isnull_only_fills_what_is_unset() -> None:
    """Applied first, an ``isnull`` org default never overrides the operation (the start)
    and any later layer overrides it."""
    op = _one(
        {
            "presets/org-a.yaml": _tag("org-a", "isnull"),
            "presets/org-b.yaml": "kind: Preset\nrun:\n  ttl: 24h\n",
            "projects/p/operations/t.yaml": OP + "    env: {ORG-A: own}\n",
        },
        ORG_DEFAULTS,
    )
    assert op.spec["run"]["container"]["env"] == {"ORG-A": "own"}
    assert op.provenance["run.container.env.ORG-A"].step == "operation"
    # base (post_merge, a project default) comes after and sets the image
    assert op.spec["run"]["container"]["image"] == "python:3.11"
    assert op.provenance["run.container.image"].step == "preset base (post_merge)"
    assert op.spec["run"]["ttl"] == "24h"
    assert op.provenance["run.ttl"].file == "presets/org-b.yaml"


def test_an_org_default_listed_again_is_applied_once_at_its_first_position() -> None:
    op = _one(
        {
            "presets/org-a.yaml": _tag("org-a"),
            "presets/org-b.yaml": _tag("org-b"),
            "projects/p/operations/t.yaml": "kind: Operation\npresets: [org-a]\n",
        },
        ORG_DEFAULTS,
    )
    assert op.presets == ("org-a", "org-b", "base")
    assert op.spec["run"]["container"]["image"] == "python:3.11"  # base is after org-b


def test_a_project_preset_shadows_an_org_default_of_the_same_name() -> None:
    op = _one(
        {
            "presets/org-a.yaml": _tag("org-a"),
            "presets/org-b.yaml": _tag("org-b"),
            "projects/p/presets/org-b.yaml": "kind: Preset\nrun:\n  ttl: 2h\n",
            "projects/p/operations/t.yaml": OP,
        },
        ORG_DEFAULTS,
    )
    assert "ORG-B" not in op.spec["run"]["container"]["env"]
    assert op.provenance["run.ttl"].file == "projects/p/presets/org-b.yaml"


def test_an_unknown_org_default_preset_is_an_error_at_its_line() -> None:
    files = {"presets/org-a.yaml": _tag("org-a"), "projects/p/operations/t.yaml": OP}
    message = "reconciler.yaml:3:20: unknown preset 'org-b': no presets/org-b.yaml"
    assert _errors(files, ORG_DEFAULTS) == [message]
    # Only a project's preset of that name is not enough: the org's applies everywhere.
    files["projects/p/presets/org-b.yaml"] = "kind: Preset\n"
    assert _errors(files, ORG_DEFAULTS) == [message]
    # compile_operation (one operation, no whole-repo pass) reports it too.
    del files["projects/p/presets/org-b.yaml"]
    snap = repo({**BASE, "reconciler.yaml": ORG_DEFAULTS, **files})
    assert [str(e) for e in compile_operation(snap, "p/t").errors] == [message]


def test_the_org_default_preset_example_of_presets_md() -> None:
    platform = """kind: Preset
patchStrategy: isnull
run:
  environment:
    imagePullSecrets: [registry]
  sidecars:
    - name: logs
      image: fluent/fluent-bit:3
  maxRetries: 1
  ttl: 72h
"""
    org = ORG.replace("policy:", "defaults:\n  presets: [platform]\npolicy:")
    org += "  allowedServiceAccounts: [trainer]\n"
    files = {
        "presets/platform.yaml": platform,
        "projects/p/presets/day.yaml": "kind: Preset\nrun:\n  ttl: 24h\n",
        "projects/p/operations/t.yaml": OP + "  maxRetries: 0\n",
        "projects/p/operations/u.yaml": "kind: Operation\npresets: [day]\n",
    }
    compiled = _compile(files, org)
    assert compiled.errors == () and compiled.rejected == ()
    t, u = compiled.operations
    assert t.presets == ("platform", "base")
    assert t.spec["run"]["maxRetries"] == 0 and t.provenance["run.maxRetries"].step == "operation"
    assert t.spec["run"]["ttl"] == "72h"
    assert t.provenance["run.ttl"].step == "preset platform (isnull)"
    assert t.provenance["run.ttl"].line == 10
    assert u.spec["run"]["ttl"] == "24h" and u.spec["run"]["maxRetries"] == 1
    assert [s["name"] for s in u.spec["run"]["sidecars"]] == ["logs"]


# --- checks on the merged spec ---------------------


def test_a_mount_may_name_a_volume_another_layer_adds() -> None:
    op = _one(
        {
            "presets/vol.yaml": "kind: Preset\nrun:\n  volumes: [{name: v, emptyDir: {}}]\n",
            "projects/p/operations/t.yaml": "kind: Operation\npresets: [vol]\nrun:\n"
            "  container:\n    volumeMounts: [{name: v, mountPath: /v}]\n",
        }
    )
    assert op.spec["run"]["container"]["volumeMounts"] == [{"name": "v", "mountPath": "/v"}]


@pytest.mark.parametrize(
    ("preset", "op", "expected"),
    [
        (
            "run:\n  volumes: [{name: v, emptyDir: {}}]\n",
            "run:\n  container:\n    volumeMounts: [{name: w, mountPath: /w}]\n",
            "projects/p/operations/t.yaml:5:20: run.container: volume mount 'w' names no "
            "volume of run.volumes (volumes: v)",
        ),
        (
            "run:\n  volumes: [{name: v, emptyDir: {}}]\n",
            "run:\n  volumes: [{name: v, configMap: {name: c}}]\n",
            "presets/x.yaml:3:20: run.volumes: two volumes are named 'v' (the other is at "
            "projects/p/operations/t.yaml:4:13)",
        ),
        (
            "run:\n  volumes: [{name: v, emptyDir: {}}]\n",
            "run:\n  connections: [data]\n  container:\n"
            "    volumeMounts: [{name: v, mountPath: /d}]\n",
            "projects/p/operations/t.yaml:6:20: run.container: '/d' is mounted twice in one "
            "container (also by a connection)",
        ),
        (
            "run:\n  sidecars: [{name: s, image: x}]\n",
            "run:\n  initContainers: [{name: s, image: y}]\n",
            "presets/x.yaml:3:14: run.sidecars[0]: two containers of the pod are named 's' "
            "(the other is at projects/p/operations/t.yaml:4:20)",
        ),
        (
            "run:\n  sidecars: [{name: git-code, image: x}]\n",
            "run:\n  connections: [code]\n",
            "presets/x.yaml:3:14: run.sidecars[0]: container name 'git-code' is taken by the "
            "checkout of git connection 'code'",
        ),
        (
            "run:\n  sidecars: [{name: s, image: x, resources: {requests: {cpu: 2}, "
            "limits: {cpu: 1}}}]\n",
            "",
            "presets/x.yaml:3:14: request for cpu (2) exceeds its limit (1)",
        ),
        (
            "run:\n  initContainers: [{name: s, image: x, resources: {limits: "
            "{nvidia.com/gpu: 0.5}}}]\n",
            "",
            "presets/x.yaml:3:20: nvidia.com/gpu must be a whole number, not 0.5",
        ),
    ],
)
def test_what_kubernetes_would_refuse_is_an_error_on_the_merged_spec(
    preset: str, op: str, expected: str
) -> None:
    errors = _errors(
        {
            "presets/x.yaml": "kind: Preset\n" + preset,
            "projects/p/operations/t.yaml": "kind: Operation\npresets: [x]\n" + op,
        }
    )
    assert expected in errors, errors


def test_init_containers_and_sidecars_count_as_the_scheduler_counts_them() -> None:
    """Sidecars add to the containers; an init container counts alone (with the sidecars
    started before it, none here: sidecars start after the init containers)."""
    body = (
        "run:\n  container:\n    resources: {requests: {cpu: 2, memory: 1Gi}}\n"
        "  initContainers:\n    - {name: i, image: x, resources: {requests: {cpu: 8}}}\n"
        "  sidecars:\n    - {name: s, image: x, resources: {requests: {cpu: 1, memory: 1Gi}}}\n"
    )
    op = _one({"projects/p/operations/t.yaml": "kind: Operation\n" + body})
    assert op.requests == {"cpu": Decimal(8), "memory": Decimal(2 * 2**30)}


# --- policy: every governed field is refused whichever layer sets it ---------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_a_pod_field_from_an_org_preset_is_refused_with_its_provenance(
    name: str, strategy: str
) -> None:
    escape = ESCAPES[name]
    message = _reject(
        {
            "presets/esc.yaml": f"kind: Preset\npatchStrategy: {strategy}\n{escape.body}",
            "projects/p/operations/t.yaml": "kind: Operation\npresets: [esc]\n",
        },
        escape.org,
    )
    assert f"{escape.field}: {escape.message}" in message, message
    line = escape.line + 2
    assert f"(set by preset esc ({strategy}) at presets/esc.yaml:{line})" in message, message


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_a_pod_field_from_an_org_default_preset_is_refused(name: str) -> None:
    escape = ESCAPES[name]
    org = escape.org.replace("policy:", "defaults:\n  presets: [esc]\npolicy:")
    compiled = _compile(
        {
            "presets/esc.yaml": "kind: Preset\npatchStrategy: pre_merge\n" + escape.body,
            "projects/p/operations/t.yaml": "kind: Operation\n",
        },
        org,
    )
    assert compiled.errors == () and compiled.operations == (), compiled.errors
    (rejected,) = compiled.rejected
    assert f"{escape.field}: {escape.message}" in rejected.message
    where = f"(set by preset esc (pre_merge) at presets/esc.yaml:{escape.line + 2})"
    assert where in rejected.message, rejected.message


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_a_pod_field_in_the_operation_itself_is_refused(name: str) -> None:
    escape = ESCAPES[name]
    message = _reject(
        {"projects/p/operations/t.yaml": "kind: Operation\n" + escape.body}, escape.org
    )
    assert f"{escape.field}: {escape.message}" in message, message
    line = escape.line + 1
    assert f"(set by operation at projects/p/operations/t.yaml:{line})" in message, message


def test_what_policy_allows_by_default_and_when_relaxed() -> None:
    body = (
        "run:\n  environment:\n    serviceAccountName: default\n    imagePullSecrets: [any]\n"
        "  volumes:\n    - {name: c, persistentVolumeClaim: {claimName: c}}\n"
        "    - {name: s, secret: {secretName: s, defaultMode: 0o400}}\n"
        "  maxRetries: 6\n  ttl: 1h\n"
        "  sidecars:\n    - name: s\n      image: x\n      securityContext:\n"
        "        capabilities: {add: [NET_BIND_SERVICE]}\n        runAsUser: 1000\n"
    )
    op = _one({"projects/p/operations/t.yaml": "kind: Operation\n" + body.replace("0o400", "256")})
    assert op.spec["run"]["volumes"][1]["secret"]["defaultMode"] == 256
    relaxed = (
        "kind: Org\npolicy:\n  allowPrivileged: true\n  allowRunAsRoot: true\n"
        "  allowedServiceAccounts: [trainer]\n  maxRetries: 100\n  minTtl: 0\n"
    )
    body = (
        "run:\n  environment:\n    serviceAccountName: trainer\n  maxRetries: 100\n  ttl: 0\n"
        "  sidecars:\n    - name: s\n      image: x\n      securityContext:\n"
        "        privileged: true\n        runAsUser: 0\n"
    )
    _one({"projects/p/operations/t.yaml": "kind: Operation\n" + body}, relaxed)


# --- `reconciler compile --explain` ---------------------


def test_compile_explain_shows_where_each_pod_field_came_from(tmp_path: Path) -> None:
    """The template with an org default preset setting every new field: ``--explain``
    names the org preset's file and line for each, after the project's own layers."""
    root = tmp_path / "repo"
    shutil.copytree(TEMPLATE, root)
    org = (root / "reconciler.yaml").read_text()
    org = org.replace("  queue: batch", "  presets: [platform]\n  queue: batch", 1)
    org = org.replace("policy:\n", "policy:\n  allowedServiceAccounts: [trainer]\n", 1)
    (root / "reconciler.yaml").write_text(org)
    (root / "presets" / "platform.yaml").write_text(EVERYTHING.replace("platform", "x"))
    result = CliRunner().invoke(
        cli,
        ["compile", "vision/train-resnet", "--repo", str(root), "-o", "json", "--explain"],
    )
    assert result.exit_code == 0, result.output
    obj = json.loads(result.output)
    assert obj["presets"] == ["platform", "base", "a100", "data"]
    for field in (
        "run.environment.serviceAccountName",
        "run.environment.imagePullSecrets[0]",
        "run.volumes[0]",
        "run.container.volumeMounts[0]",
        "run.initContainers[0]",
        "run.sidecars[0]",
        "run.maxRetries",
        "run.ttl",
    ):
        where = obj["provenance"][field]
        assert (where["file"], where["step"]) == (
            "presets/platform.yaml",
            "preset platform (post_merge)",
        ), field
    assert obj["provenance"]["run.ttl"]["line"] == 25
    # The table form lists the same rows.
    table = CliRunner().invoke(
        cli, ["compile", "vision/train-resnet", "--repo", str(root), "-o", "table", "--explain"]
    )
    assert table.exit_code == 0, table.output
    assert "run.sidecars[0]" in table.output and "presets/platform.yaml:21" in table.output
