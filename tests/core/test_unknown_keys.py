"""Unknown and misspelled keys (issue 13, section 4): a field has one spelling, its camelCase
YAML name, in every kind of file and at every depth. Any other spelling (``is_approved``,
``is-approved``, ``IsApproved``) is an unknown field at its ``file:line:col``, with
``did you mean 'isApproved'?``; nothing is accepted under a second name and ignored."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from support.snapshots import repo
from support.strategies import CAMEL_FIELDS, Step
from support.strategies import nest as _nest
from support.strategies import walk as _walk

from reconciler.core.compile import compile_operation, compile_repo
from reconciler.core.compile.errors import Errors, add_validation_errors
from reconciler.core.compile.model import KINDS, Strict, suggest, to_snake
from reconciler.core.types import Location


def test_every_input_model_forbids_unknown_keys_and_second_spellings() -> None:
    reached = {model for top in KINDS.values() for _, model in _walk(top)}
    assert len(reached) > 30  # the walk reaches the nested models (affinity included)
    for model in reached:
        assert issubclass(model, Strict), model
        config = model.model_config
        assert config.get("extra") == "forbid", model
        assert config.get("strict") is True, model
        assert not config.get("populate_by_name"), model
        assert config.get("validate_by_name") is False, model


def test_the_walk_finds_the_fields_of_the_issue() -> None:
    found = {(kind, alias) for kind, _, alias in CAMEL_FIELDS}
    for expected in [
        ("Operation", "isApproved"),
        ("Preset", "patchStrategy"),
        ("Project", "allowedQueues"),
        ("Org", "allowedQueues"),
        ("Org", "maxFraction"),
        ("Cluster", "inCluster"),
        ("Connection", "configMap"),
        ("Connection", "hostPath"),
        ("Operation", "nodeSelectorTerms"),
        ("Operation", "topologyKey"),
    ]:
        assert expected in found, expected


@pytest.mark.parametrize(
    ("kind", "path", "alias"),
    CAMEL_FIELDS,
    ids=[f"{k}:{'.'.join([*(s for s, _ in p), a])}" for k, p, a in CAMEL_FIELDS],
)
def test_a_snake_case_spelling_is_an_unknown_field_with_the_camel_case_name(
    kind: str, path: tuple[Step, ...], alias: str
) -> None:
    model = KINDS[kind]
    snake = to_snake(alias)
    data = {"kind": kind, **_nest(path, {snake: None})}
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    errors = Errors()
    add_validation_errors(
        errors, info.value, data, model, lambda p, key=False: Location("f.yaml", 1, 1)
    )
    messages = [e.message for e in errors]
    expected = f"unknown field '{snake}' (did you mean '{alias}'?)"
    assert any(m.endswith(expected) for m in messages), messages


@pytest.mark.parametrize(
    ("written", "meant"),
    [
        ("is_approved", "isApproved"),
        ("is-approved", "isApproved"),
        ("IsApproved", "isApproved"),
        ("ISAPPROVED", "isApproved"),
        ("isapproved", "isApproved"),
        ("is approved", "isApproved"),
        ("isAproved", "isApproved"),
        ("patch_stratgy", "patchStrategy"),
    ],
)
def test_suggest_names_the_camel_case_field(written: str, meant: str) -> None:
    allowed = ["kind", "name", "patchStrategy", "isApproved", "generation", "run"]
    assert suggest(written, allowed) == meant


def test_suggest_names_nothing_for_an_unrelated_key() -> None:
    assert suggest("metadata", ["kind", "name", "run"]) is None


BASE = {
    "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
    "queues/q.yaml": "kind: Queue\ncluster: local\n",
    "projects/p/project.yaml": "kind: Project\ndefaults:\n  queue: q\n",
}
OP = "kind: Operation\nrun:\n  kind: job\n  container:\n    image: x\n"


def test_is_approved_false_in_snake_case_is_an_error_not_a_dispatch() -> None:
    # Today's bug: ``is_approved: false`` was accepted and ignored, so the operation its
    # author meant to hold was dispatched.
    snap = repo({**BASE, "projects/p/operations/held.yaml": OP + "is_approved: false\n"})
    compiled = compile_repo(snap)
    assert not compiled.valid
    assert [str(e) for e in compiled.errors] == [
        "projects/p/operations/held.yaml:6:1: unknown field 'is_approved' "
        "(did you mean 'isApproved'?)"
    ]
    assert compiled.operations == ()
    result = compile_operation(snap, "p/held")
    assert result.compiled is None and result.operations == ()
    assert [e.message for e in result.errors] == [
        "unknown field 'is_approved' (did you mean 'isApproved'?)"
    ]


def test_is_approved_false_holds_the_operation() -> None:
    snap = repo({**BASE, "projects/p/operations/held.yaml": OP + "isApproved: false\n"})
    compiled = compile_repo(snap)
    assert compiled.valid, compiled.errors
    (op,) = compiled.operations
    assert op.is_approved is False


@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        (
            "presets/p.yaml",
            "kind: Preset\npatch_strategy: replace\n",
            "presets/p.yaml:2:1: unknown field 'patch_strategy' (did you mean 'patchStrategy'?)",
        ),
        (
            "projects/p/project.yaml",
            "kind: Project\nallowed_queues: [q]\n",
            "projects/p/project.yaml:2:1: unknown field 'allowed_queues' "
            "(did you mean 'allowedQueues'?)",
        ),
        (
            "reconciler.yaml",
            "kind: Org\npolicy:\n  allow_privileged: false\n",
            "reconciler.yaml:3:3: policy: unknown field 'allow_privileged' "
            "(did you mean 'allowPrivileged'?)",
        ),
        (
            "clusters/local.yaml",
            "kind: Cluster\nkubeconfig:\n  in_cluster: true\n",
            "clusters/local.yaml:3:3: kubeconfig: unknown field 'in_cluster' "
            "(did you mean 'inCluster'?)",
        ),
        (
            "connections/c.yaml",
            "kind: Connection\nvolume:\n  claim_name: d\n  mountPath: /d\n",
            "connections/c.yaml:3:3: volume: unknown field 'claim_name' "
            "(did you mean 'claimName'?)",
        ),
        (
            "projects/p/operations/o.yaml",
            OP + "  environment:\n    affinity:\n      node_affinity: {}\n",
            "projects/p/operations/o.yaml:8:7: run.environment.affinity: unknown field "
            "'node_affinity' (did you mean 'nodeAffinity'?)",
        ),
    ],
    ids=["preset", "project", "org", "cluster", "connection", "affinity"],
)
def test_every_kind_of_file_refuses_a_second_spelling(path: str, body: str, expected: str) -> None:
    compiled = compile_repo(repo({**BASE, path: body}))
    assert expected in [str(e) for e in compiled.errors], compiled.errors
