"""R7: policy escapes through presets or operations are refused, naming the field's layer.

Org policy is checked on the compiled operation, after every preset is merged: whichever
layer sets a forbidden field (an org preset, a project preset, the project's default
presets, or the operation itself, with any merge strategy), the operation is rejected and
the message says which file and line set it, and with which strategy.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from conftest import repo

from reconciler.core.compile import compile_repo
from reconciler.core.types import BASELINE_CAPABILITIES, RejectReason

ORG = """kind: Org
policy:
  maxResources:
    nvidia.com/gpu: 4
  allowedSchedulerNames: [default-scheduler]
  allowRunAsRoot: false
"""
BASE = {
    "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
    "queues/gpu.yaml": "kind: Queue\ncluster: local\n",
    "queues/other.yaml": "kind: Queue\ncluster: local\n",
    "queues/nb.yaml": "kind: Queue\ncluster: local\nkinds: [notebook]\n",
    "connections/host.yaml": "kind: Connection\nvolume:\n  hostPath: /var/run\n  mountPath: /h\n",
    "connections/data.yaml": "kind: Connection\nvolume:\n  claimName: data\n  mountPath: /d\n",
}


BASE["projects/p/presets/base.yaml"] = (
    "kind: Preset\nrun:\n  kind: job\n  container:\n    image: python:3.11\n"
)


def project(presets: str = "[base]") -> str:
    return (
        "kind: Project\nnamespace: team-p\nallowedQueues: [gpu, nb]\n"
        f"defaults:\n  queue: gpu\n  presets: {presets}\n"
    )


@dataclass(frozen=True)
class Escape:
    body: str  # YAML under the top level of a preset or an operation
    field: str  # the dotted path in the compiled spec
    message: str
    line: int  # line of the offending value within ``body`` (1-based)


SC = "run:\n  container:\n    securityContext:\n"
ESCAPES = {
    "queue-not-allowed": Escape(
        "queue: other\n", "queue", "queue 'other' is not in project 'p' allowedQueues [gpu, nb]", 1
    ),
    "namespace": Escape(
        "namespace: kube-system\n", "namespace", "the namespace is set by project 'p'", 1
    ),
    "gpu-cap": Escape(
        "run:\n  container:\n    resources:\n      limits:\n        nvidia.com/gpu: 8\n",
        "run.container.resources.limits.nvidia.com/gpu",
        "nvidia.com/gpu 8 exceeds policy.maxResources 4",
        5,
    ),
    "gpu-cap-requests": Escape(
        "run:\n  container:\n    resources:\n      requests:\n        nvidia.com/gpu: 5\n"
        "      limits:\n        nvidia.com/gpu: 5\n",
        "run.container.resources.requests.nvidia.com/gpu",
        "nvidia.com/gpu 5 exceeds policy.maxResources 4",
        5,
    ),
    "privileged": Escape(
        SC + "      privileged: true\n",
        "run.container.securityContext.privileged",
        "privileged containers are not allowed by policy",
        4,
    ),
    "capability-sys-admin": Escape(
        SC + "      capabilities:\n        add: [SYS_ADMIN]\n",
        "run.container.securityContext.capabilities.add[0]",
        "capability 'SYS_ADMIN' is not in policy.allowedCapabilities "
        "(the Pod Security baseline set)",
        5,
    ),
    "capability-net-admin": Escape(
        SC + "      capabilities:\n        add: [CHOWN, CAP_NET_ADMIN]\n",
        "run.container.securityContext.capabilities.add[1]",
        "capability 'CAP_NET_ADMIN' is not in policy.allowedCapabilities",
        5,
    ),
    "capability-all": Escape(
        SC + "      capabilities:\n        add: [ALL]\n",
        "run.container.securityContext.capabilities.add[0]",
        "capability 'ALL' is not in policy.allowedCapabilities",
        5,
    ),
    "run-as-root": Escape(
        SC + "      runAsUser: 0\n",
        "run.container.securityContext.runAsUser",
        "running as root (UID 0) is not allowed by policy",
        4,
    ),
    "run-as-non-root-false": Escape(
        SC + "      runAsNonRoot: false\n",
        "run.container.securityContext.runAsNonRoot",
        "runAsNonRoot: false is not allowed by policy",
        4,
    ),
    "scheduler-name": Escape(
        "run:\n  environment:\n    schedulerName: my-scheduler\n",
        "run.environment.schedulerName",
        "scheduler 'my-scheduler' is not in policy.allowedSchedulerNames [default-scheduler]",
        3,
    ),
    "host-path": Escape(
        "run:\n  connections: [data, host]\n",
        "run.connections[1]",
        "connection 'host' mounts hostPath '/var/run', which policy does not allow",
        2,
    ),
}
STRATEGIES = ["replace", "isnull", "post_merge", "pre_merge"]
OP = "kind: Operation\nrun:\n  container:\n    command: [go]\n"


def _reject(files: dict[str, str], *, fine: bool = True) -> str:
    snap = repo(
        {
            **BASE,
            "reconciler.yaml": ORG,
            **({"projects/p/operations/fine.yaml": OP} if fine else {}),
            **files,
        }
    )
    compiled = compile_repo(snap)
    assert compiled.errors == (), compiled.errors
    assert [op.id for op in compiled.operations] == (["p/fine"] if fine else [])
    (rejected,) = compiled.rejected
    assert rejected.operation == "p/t" and rejected.reason is RejectReason.POLICY_VIOLATION
    return rejected.message


def _preset(strategy: str, body: str) -> tuple[str, int]:
    """A preset file and the number of lines before ``body``."""
    return f"kind: Preset\npatchStrategy: {strategy}\n{body}", 2


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escape_through_an_org_preset_is_refused_with_its_provenance(
    name: str, strategy: str
) -> None:
    escape = ESCAPES[name]
    preset, offset = _preset(strategy, escape.body)
    message = _reject(
        {
            "projects/p/project.yaml": project(),
            "presets/esc.yaml": preset,
            "projects/p/operations/t.yaml": "kind: Operation\npresets: [esc]\n",
        }
    )
    assert f"{escape.field}: {escape.message}" in message, message
    where = f"(set by preset esc ({strategy}) at presets/esc.yaml:{escape.line + offset})"
    assert where in message, message


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escape_through_a_project_default_preset_is_refused(name: str) -> None:
    escape = ESCAPES[name]
    preset, offset = _preset("pre_merge", escape.body)
    message = _reject(
        {
            "projects/p/project.yaml": project("[base, esc]"),
            "projects/p/presets/esc.yaml": preset,
            "projects/p/operations/t.yaml": "kind: Operation\n",
        },
        fine=False,  # the project's defaults apply to every operation
    )
    assert f"{escape.field}: {escape.message}" in message, message
    line = escape.line + offset
    assert f"(set by preset esc (pre_merge) at projects/p/presets/esc.yaml:{line})" in message


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escape_in_the_operation_itself_is_refused(name: str) -> None:
    escape = ESCAPES[name]
    message = _reject(
        {
            "projects/p/project.yaml": project(),
            "projects/p/operations/t.yaml": f"kind: Operation\n{escape.body}",
        }
    )
    assert f"{escape.field}: {escape.message}" in message, message
    line = escape.line + 1
    assert f"(set by operation at projects/p/operations/t.yaml:{line})" in message, message


def test_a_later_preset_cannot_launder_an_earlier_escape() -> None:
    """A harmless preset after the bad one keeps the bad field, and the blame with it."""
    message = _reject(
        {
            "projects/p/project.yaml": project(),
            "presets/esc.yaml": "kind: Preset\n" + ESCAPES["privileged"].body,
            "presets/tidy.yaml": "kind: Preset\nrun:\n  container:\n    image: tidy\n",
            "projects/p/operations/t.yaml": "kind: Operation\npresets: [esc, tidy]\n",
        }
    )
    assert "(set by preset esc (post_merge) at presets/esc.yaml:5)" in message


def test_replace_preset_wins_over_the_operation_and_takes_the_blame() -> None:
    message = _reject(
        {
            "projects/p/project.yaml": project(),
            "presets/esc.yaml": "kind: Preset\npatchStrategy: replace\n"
            + ESCAPES["scheduler-name"].body,
            "projects/p/operations/t.yaml": "kind: Operation\npresets: [esc]\n"
            "run:\n  environment:\n    schedulerName: default-scheduler\n",
        }
    )
    assert "scheduler 'my-scheduler'" in message
    assert "(set by preset esc (replace) at presets/esc.yaml:5)" in message


@pytest.mark.parametrize(
    ("field", "body"),
    [
        ("hostNetwork", "run:\n  environment:\n    hostNetwork: true\n"),
        ("hostPID", "run:\n  environment:\n    hostPID: true\n"),
        ("hostIPC", "run:\n  hostIPC: true\n"),
        ("procMount", SC + "      procMount: Unmasked\n"),
        ("seLinuxOptions", SC + "      seLinuxOptions: {type: spc_t}\n"),
    ],
)
@pytest.mark.parametrize("where", ["presets/esc.yaml", "projects/p/operations/t.yaml"])
def test_host_namespaces_and_raw_volumes_are_not_expressible(
    field: str, body: str, where: str
) -> None:
    """No op or preset field reaches hostNetwork/hostPID/hostIPC or raw volumes: the schema
    refuses them at the key, which is their provenance."""
    head = "kind: Preset\n" if where.startswith("presets/") else "kind: Operation\n"
    files = {
        **BASE,
        "reconciler.yaml": ORG,
        "projects/p/project.yaml": project(),
        "projects/p/operations/t.yaml": "kind: Operation\npresets: [esc]\n",
        "presets/esc.yaml": "kind: Preset\n",
    }
    files[where] = head + body
    compiled = compile_repo(repo(files))
    rendered = [str(e) for e in compiled.errors]
    line = body.count("\n") + 1
    assert any(
        r.startswith(f"{where}:{line}:") and f"unknown field {field!r}" in r for r in rendered
    ), rendered
    assert not compiled.valid  # the whole commit is refused


def test_org_settings_relax_each_knob() -> None:
    org = (
        "kind: Org\npolicy:\n  allowPrivileged: true\n  allowHostPath: true\n"
        "  allowRunAsRoot: true\n  allowedSchedulerNames: [my-scheduler]\n"
    )
    body = (
        SC + "      privileged: true\n      runAsUser: 0\n      capabilities:\n"
        "        add: [SYS_ADMIN]\n  environment:\n    schedulerName: my-scheduler\n"
        "  connections: [host]\n"
    )
    compiled = compile_repo(
        repo(
            {
                **BASE,
                "reconciler.yaml": org,
                "projects/p/project.yaml": project(),
                "projects/p/operations/t.yaml": "kind: Operation\n" + body,
            }
        )
    )
    assert compiled.errors == () and compiled.rejected == ()
    assert [op.id for op in compiled.operations] == ["p/t"]


def test_allowed_capabilities_is_the_baseline_unless_the_org_sets_it() -> None:
    files = {
        **BASE,
        "projects/p/project.yaml": project(),
        "projects/p/operations/t.yaml": "kind: Operation\n"
        + SC
        + "      capabilities:\n        add: [NET_RAW, cap_chown]\n",
    }
    baseline = compile_repo(repo({**files, "reconciler.yaml": "kind: Org\n"}))
    assert baseline.org.policy.allowed_capabilities == BASELINE_CAPABILITIES
    (rejected,) = baseline.rejected
    assert "add[0]: capability 'NET_RAW'" in rejected.message and "add[1]" not in rejected.message
    custom = compile_repo(
        repo({**files, "reconciler.yaml": "kind: Org\npolicy:\n  allowedCapabilities: [NET_RAW]\n"})
    )
    (rejected,) = custom.rejected
    assert "add[1]: capability 'cap_chown' is not in policy.allowedCapabilities (NET_RAW)" in (
        rejected.message
    )
    relaxed = compile_repo(
        repo(
            {
                **files,
                "reconciler.yaml": "kind: Org\npolicy:\n  allowedCapabilities: [NET_RAW, CHOWN]\n",
            }
        )
    )
    assert relaxed.rejected == () and [op.id for op in relaxed.operations] == ["p/t"]


def test_a_refused_workflow_keeps_its_running_children() -> None:
    """A preset change that makes a running matrix violate policy refuses the matrix but
    never prunes its children (found on the dev cluster by the R3 test)."""
    from datetime import UTC, datetime

    from reconciler.core.plan import plan_repo
    from reconciler.core.types import ObservedOperation, Phase

    files = {
        **BASE,
        "reconciler.yaml": "kind: Org\nprune:\n  enabled: true\n  allowMassPrune: true\n",
        "projects/p/project.yaml": project(),
        "projects/p/operations/sweep.yaml": "kind: Operation\nmatrix:\n  params:\n"
        "    lr: [1, 2]\nrun:\n  container:\n    command: [go]\n",
    }
    good = compile_repo(repo(files))
    assert [op.id for op in good.operations] == ["p/sweep-0", "p/sweep-1"]
    running = [ObservedOperation(op.id, Phase.RUNNING, queue="gpu") for op in good.operations]
    bad = compile_repo(
        repo(
            {
                **files,
                "projects/p/presets/base.yaml": BASE["projects/p/presets/base.yaml"]
                + "    securityContext:\n      privileged: true\n",
            }
        )
    )
    assert bad.errors == ()
    (rejected,) = bad.rejected
    assert rejected.operation == "p/sweep" and rejected.children == ("p/sweep-0", "p/sweep-1")
    plan = plan_repo(bad, running, datetime(2026, 1, 1, tzinfo=UTC))
    assert plan.stop == () and plan.dispatch == ()
