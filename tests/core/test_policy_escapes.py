"""R7: policy escapes through presets or operations are refused, naming the field's layer.

Org policy is checked on the compiled operation, after every preset is merged: whichever
layer sets a forbidden field (an org preset, a project preset, the project's default
presets, or the operation itself, with any merge strategy), the operation is rejected and
the message says which file and line set it, and with which strategy.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pytest
from support.snapshots import repo

from reconciler.core.compile import compile_repo
from reconciler.core.types import BASELINE_CAPABILITIES, RejectReason

ORG = """kind: Org
policy:
  maxResources:
    nvidia.com/gpu: 4
  allowedSchedulerNames: [default-scheduler]
  allowRunAsRoot: false
  maxOperationPriority: 500
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
    "priority": Escape(
        "priority: 800\n", "priority", "priority 800 exceeds policy.maxOperationPriority 500", 1
    ),
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
    # Issue 13: priority classes and the Pod Security Standards on the rendered pod.
    "priority-class": Escape(
        "run:\n  environment:\n    priorityClassName: high\n",
        "run.environment.priorityClassName",
        "priority class 'high' is not in policy.allowedPriorityClasses [] "
        "(unset, the cluster's default applies)",
        3,
    ),
    "priority-class-system": Escape(
        "run:\n  environment:\n    priorityClassName: system-cluster-critical\n",
        "run.environment.priorityClassName",
        "priority class 'system-cluster-critical' is for the cluster's own pods: "
        "system-* is never allowed",
        3,
    ),
    "host-network": Escape(
        "run:\n  environment:\n    hostNetwork: true\n",
        "run.environment.hostNetwork",
        "host namespaces (hostNetwork: true) are not allowed by policy.podSecurity baseline",
        3,
    ),
    "host-pid": Escape(
        "run:\n  environment:\n    hostPID: true\n",
        "run.environment.hostPID",
        "host namespaces (hostPID: true) are not allowed by policy.podSecurity baseline",
        3,
    ),
    "host-ipc": Escape(
        "run:\n  environment:\n    hostIPC: true\n",
        "run.environment.hostIPC",
        "host namespaces (hostIPC: true) are not allowed by policy.podSecurity baseline",
        3,
    ),
    "proc-mount": Escape(
        SC + "      procMount: Unmasked\n",
        "run.container.securityContext.procMount",
        "procMount 'Unmasked' is not allowed by policy.podSecurity baseline",
        4,
    ),
    "apparmor-field": Escape(
        SC + "      appArmorProfile:\n        type: Unconfined\n",
        "run.container.securityContext.appArmorProfile.type",
        "AppArmor profile 'Unconfined' is not allowed by policy.podSecurity baseline",
        5,
    ),
    "apparmor-annotation": Escape(
        "run:\n  environment:\n    annotations:\n"
        "      container.apparmor.security.beta.kubernetes.io/main: unconfined\n",
        "run.environment.annotations.container.apparmor.security.beta.kubernetes.io/main",
        "AppArmor profile 'unconfined' is not allowed by policy.podSecurity baseline",
        4,
    ),
    "seccomp-unconfined": Escape(
        SC + "      seccompProfile: {type: Unconfined}\n",
        "run.container.securityContext.seccompProfile.type",
        "seccomp profile 'Unconfined' is not allowed by policy.podSecurity baseline",
        4,
    ),
    "seccomp-annotation": Escape(
        "run:\n  environment:\n    annotations:\n"
        "      seccomp.security.alpha.kubernetes.io/pod: unconfined\n",
        "run.environment.annotations.seccomp.security.alpha.kubernetes.io/pod",
        "seccomp profile 'unconfined' is not allowed by policy.podSecurity baseline",
        4,
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
        ("hostIPC", "run:\n  hostIPC: true\n"),
        ("seLinuxOptions", SC + "      seLinuxOptions: {type: spc_t}\n"),
        ("hostPort", "run:\n  container:\n    hostPort: 80\n"),
        ("sysctls", "run:\n  environment:\n    sysctls: [{name: kernel.msgmax, value: '1'}]\n"),
    ],
)
@pytest.mark.parametrize("where", ["presets/esc.yaml", "projects/p/operations/t.yaml"])
def test_fields_outside_the_schema_are_refused_at_their_key(
    field: str, body: str, where: str
) -> None:
    """Host namespaces outside run.environment, seLinuxOptions, host ports and sysctls are not
    expressible: the schema refuses them at the key, which is their provenance (the Pod
    Security check would refuse them on the rendered pod too, see
    test_pod_security_covers_every_baseline_rule_on_the_pod)."""
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
        "  allowedPriorityClasses: [high]\n  podSecurity: privileged\n"
    )
    body = (
        SC + "      privileged: true\n      runAsUser: 0\n      capabilities:\n"
        "        add: [SYS_ADMIN]\n      procMount: Unmasked\n"
        "      appArmorProfile: {type: Unconfined}\n"
        "  environment:\n    schedulerName: my-scheduler\n"
        "    priorityClassName: high\n    hostNetwork: true\n    hostPID: true\n"
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


def test_a_refused_workflow_does_not_shield_another_operations_workload() -> None:
    """Issue 13: ``p/sweep-1`` ran as an operation of its own; its file is deleted in the
    commit that leaves a refused matrix ``sweep`` whose child 1 has the same id. The workload
    records that it was no workflow's child, so it is stopped; the matrix's own children and
    workloads whose workflow is not recorded (dispatched before it was) are kept."""
    from datetime import UTC, datetime

    from reconciler.core.decision.render import ANNOTATION_WORKFLOW, render_operation
    from reconciler.core.observation.observe import observe_workloads
    from reconciler.core.plan import plan_repo
    from reconciler.core.types import ObservedOperation, Phase

    org = "kind: Org\nprune:\n  enabled: true\n  allowMassPrune: true\n"
    files = {
        **BASE,
        "reconciler.yaml": org,
        "projects/p/project.yaml": project(),
        "projects/p/operations/sweep.yaml": "kind: Operation\nmatrix:\n  params:\n"
        "    lr: [1, 2]\nrun:\n  container:\n    command: [go]\n",
        "projects/p/operations/sweep-1.yaml": OP,
    }
    # before: sweep-1 is an operation (its Job says so); sweep is not there yet
    before = compile_repo(repo({k: v for k, v in files.items() if not k.endswith("sweep.yaml")}))
    (alone,) = before.operations
    job = render_operation(
        alone, before.connections, config_version="c", dispatched_at=datetime(2026, 1, 1)
    ).job
    assert job["metadata"]["annotations"][ANNOTATION_WORKFLOW] == ""
    (state,) = observe_workloads("local", [{**job, "status": {}}], [])
    assert state.to_observed().workflow == ""
    # after: sweep-1.yaml deleted, sweep refused by policy
    del files["projects/p/operations/sweep-1.yaml"]
    files["projects/p/presets/base.yaml"] = (
        BASE["projects/p/presets/base.yaml"] + "    securityContext:\n      privileged: true\n"
    )
    after = compile_repo(repo(files))
    assert after.errors == () and after.rejected[0].children == ("p/sweep-0", "p/sweep-1")
    now = datetime(2026, 1, 1, tzinfo=UTC)
    observed = [
        ObservedOperation("p/sweep-0", Phase.RUNNING, queue="gpu", workflow="p/sweep"),
        ObservedOperation("p/sweep-1", Phase.RUNNING, queue="gpu", workflow=""),
    ]
    plan = plan_repo(after, observed, now)
    assert [s.operation for s in plan.stop] == ["p/sweep-1"]
    unknown = [ObservedOperation("p/sweep-1", Phase.RUNNING, queue="gpu")]
    assert plan_repo(after, unknown, now).stop == ()
    # the matrix's own child records its workflow
    good = compile_repo(
        repo({**files, "projects/p/presets/base.yaml": BASE["projects/p/presets/base.yaml"]})
    )
    child = render_operation(
        good.operations[0], {}, config_version="c", dispatched_at=datetime(2026, 1, 1)
    ).job
    assert child["metadata"]["annotations"][ANNOTATION_WORKFLOW] == "p/sweep"


# --- issue 13: the Pod Security Standards on the rendered pod -------------------------------


def _compile(org: str, op: str, **more: str) -> tuple[list[str], list[str]]:
    files = {
        **BASE,
        "connections/code.yaml": "kind: Connection\ngit:\n  url: https://example.com/r.git\n",
        "reconciler.yaml": org,
        "projects/p/project.yaml": project(),
        "projects/p/operations/t.yaml": "kind: Operation\n" + op,
        **more,
    }
    compiled = compile_repo(repo(files))
    return [str(e) for e in compiled.errors], [r.message for r in compiled.rejected]


RESTRICTED = "kind: Org\npolicy:\n  podSecurity: restricted\n"
HARDENED = SC + (
    "      runAsNonRoot: true\n      runAsUser: 1000\n      allowPrivilegeEscalation: false\n"
    "      seccompProfile: {type: RuntimeDefault}\n      capabilities: {drop: [ALL]}\n"
)


def test_restricted_needs_a_hardened_container_and_names_each_missing_field() -> None:
    errors, (message,) = _compile(RESTRICTED, "")
    assert errors == []
    profile = "policy.podSecurity restricted"
    assert message.split("; ") == [
        f"run.container.securityContext.allowPrivilegeEscalation: must be false under {profile} "
        "(it is not set)",
        f"run.container.securityContext.runAsNonRoot: must be true under {profile} (it is not set)",
        f"run.container.securityContext.seccompProfile: must be RuntimeDefault or Localhost "
        f"under {profile} (it is not set)",
        f"run.container.securityContext.capabilities.drop: must include ALL under {profile}",
    ]
    assert _compile(RESTRICTED, HARDENED) == ([], [])
    # the baseline (the default) asks none of this
    assert _compile("kind: Org\n", "") == ([], [])


def test_restricted_checks_what_connections_render_too() -> None:
    """The git clone runs in an init container: it is hardened, and runs as the main
    container's non-root UID; without one it is refused, naming the connection."""
    assert _compile(RESTRICTED, HARDENED + "  connections: [code, data]\n") == ([], [])
    no_uid = HARDENED.replace("      runAsUser: 1000\n", "") + "  connections: [code]\n"
    errors, (message,) = _compile(RESTRICTED, no_uid)
    assert errors == []
    assert message.startswith(
        "run.connections[0]: connection 'code': initContainers[0].securityContext.runAsNonRoot: "
        "must be true under policy.podSecurity restricted (it is not set); the clone runs as "
        "run.container.securityContext.runAsUser when that is a non-root UID "
        "(set by operation at projects/p/operations/t.yaml:"
    ), message
    # restricted allows only NET_BIND_SERVICE to be added, unless the org says otherwise
    chown = HARDENED.replace(
        "capabilities: {drop: [ALL]}", "capabilities: {drop: [ALL], add: [CHOWN]}"
    )
    _, (message,) = _compile(RESTRICTED, chown)
    assert "capability 'CHOWN' is not in policy.allowedCapabilities (the Pod Security " in message
    org = RESTRICTED + "  allowedCapabilities: [CHOWN]\n"
    assert _compile(org, chown) == ([], [])


def test_privileged_profile_checks_only_the_orgs_own_rules() -> None:
    org = "kind: Org\npolicy:\n  podSecurity: privileged\n  allowRunAsRoot: false\n"
    body = (
        "run:\n  environment:\n    hostNetwork: true\n"
        + SC.removeprefix("run:\n")
        + ("      runAsUser: 0\n")
    )
    _, (message,) = _compile(org, body)
    assert message.startswith(
        "run.container.securityContext.runAsUser: running as root (UID 0) is not allowed by policy"
    )
    assert "hostNetwork" not in message


def _pod(spec: dict[str, object], annotations: dict[str, str] | None = None) -> dict[str, object]:
    return {"metadata": {"annotations": annotations or {}}, "spec": spec}


@pytest.mark.parametrize(
    ("pod", "field", "message"),
    [
        (_pod({"hostNetwork": True}), "spec.hostNetwork", "host namespaces"),
        (_pod({"hostIPC": True}), "spec.hostIPC", "host namespaces"),
        (
            _pod({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}]}),
            "spec.containers[0].ports[0].hostPort",
            "hostPort 80 is not allowed",
        ),
        (
            _pod({"initContainers": [{"name": "i", "securityContext": {"privileged": True}}]}),
            "spec.initContainers[0].securityContext.privileged",
            "privileged containers are not allowed by policy",
        ),
        (
            _pod({"ephemeralContainers": [{"securityContext": {"procMount": "Unmasked"}}]}),
            "spec.ephemeralContainers[0].securityContext.procMount",
            "procMount 'Unmasked'",
        ),
        (
            _pod({"containers": [{"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]}),
            "spec.containers[0].securityContext.capabilities.add[0]",
            "capability 'SYS_ADMIN'",
        ),
        (
            _pod({"volumes": [{"name": "v", "hostPath": {"path": "/"}}]}),
            "spec.volumes[0].hostPath",
            "mounts hostPath '/'",
        ),
        (
            _pod({"securityContext": {"windowsOptions": {"hostProcess": True}}}),
            "spec.securityContext.windowsOptions.hostProcess",
            "HostProcess",
        ),
        (
            _pod({"securityContext": {"seLinuxOptions": {"type": "spc_t"}}}),
            "spec.securityContext.seLinuxOptions",
            "SELinux",
        ),
        (
            _pod({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}}),
            "spec.securityContext.sysctls[0]",
            "sysctl 'kernel.msgmax'",
        ),
        (
            _pod({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}),
            "spec.securityContext.appArmorProfile.type",
            "AppArmor profile 'Unconfined'",
        ),
        (
            _pod({}, {"container.apparmor.security.beta.kubernetes.io/side": "unconfined"}),
            "metadata.annotations.container.apparmor.security.beta.kubernetes.io/side",
            "AppArmor profile 'unconfined'",
        ),
        (
            _pod({}, {"container.seccomp.security.alpha.kubernetes.io/main": "unconfined"}),
            "metadata.annotations.container.seccomp.security.alpha.kubernetes.io/main",
            "seccomp profile 'unconfined'",
        ),
    ],
)
def test_pod_security_covers_every_baseline_rule_on_the_pod(
    pod: dict[str, object], field: str, message: str
) -> None:
    """Whatever field a future preset or connection renders, the check reads the pod: init,
    ephemeral and sidecar containers, pod-level contexts and annotations included."""
    from reconciler.core.compile.merge import dotted
    from reconciler.core.compile.policy import pod_security_findings
    from reconciler.core.types import OrgPolicy, PodSecurityLevel

    findings = [(dotted(p), m) for p, m in pod_security_findings(pod, OrgPolicy())]
    assert any(f == field and message in m for f, m in findings), findings
    privileged = OrgPolicy(pod_security=PodSecurityLevel.PRIVILEGED)
    assert pod_security_findings(pod, privileged) == []


def test_restricted_refuses_volume_types_outside_its_list() -> None:
    from reconciler.core.compile.policy import pod_security_findings
    from reconciler.core.types import OrgPolicy, PodSecurityLevel

    pod = _pod(
        {
            "volumes": [
                {"name": "n", "nfs": {"server": "x", "path": "/"}},
                {"name": "e", "emptyDir": {}},
            ]
        }
    )
    restricted = OrgPolicy(pod_security=PodSecurityLevel.RESTRICTED)
    assert pod_security_findings(pod, restricted) == [
        (
            ("spec", "volumes", 0, "nfs"),
            "nfs volumes are not allowed by policy.podSecurity restricted",
        )
    ]
    assert pod_security_findings(pod, OrgPolicy()) == []


# --- property: what compiles renders a pod the check passes ---------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_SECURITY = st.fixed_dictionaries(
    {},
    optional={
        "privileged": st.booleans(),
        "allowPrivilegeEscalation": st.booleans(),
        "runAsUser": st.sampled_from([0, 1000, 2**31, -1]),
        "runAsNonRoot": st.booleans(),
        "capabilities": st.fixed_dictionaries(
            {},
            optional={
                "add": st.lists(
                    st.sampled_from(["CHOWN", "NET_RAW", "SYS_ADMIN", "ALL"]), max_size=2
                ),
                "drop": st.sampled_from([["ALL"], []]),
            },
        ),
        "seccompProfile": st.sampled_from([{"type": "RuntimeDefault"}, {"type": "Unconfined"}]),
        "appArmorProfile": st.sampled_from([{"type": "Localhost"}, {"type": "Unconfined"}]),
        "procMount": st.sampled_from(["Default", "Unmasked"]),
    },
)
_ENVIRONMENT = st.fixed_dictionaries(
    {},
    optional={
        "hostNetwork": st.booleans(),
        "hostPID": st.booleans(),
        "hostIPC": st.booleans(),
        "priorityClassName": st.sampled_from(["high", "system-node-critical"]),
        "annotations": st.dictionaries(
            st.sampled_from(
                [
                    "container.apparmor.security.beta.kubernetes.io/main",
                    "seccomp.security.alpha.kubernetes.io/pod",
                    "reconciler.dev/phase",
                    "team",
                ]
            ),
            st.sampled_from(["unconfined", "runtime/default"]),
            max_size=2,
        ),
    },
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _SECURITY,
    _ENVIRONMENT,
    st.sampled_from(["baseline", "restricted", "privileged"]),
    st.lists(st.sampled_from(["data", "host", "code"]), max_size=2, unique=True),
    st.booleans(),
)
def test_whatever_compiles_renders_a_pod_that_meets_the_policy(
    security: dict[str, object],
    environment: dict[str, object],
    level: str,
    connections: list[str],
    in_preset: bool,
) -> None:
    import json

    from reconciler.core.compile.policy import pod_security_findings
    from reconciler.core.decision.render import render_operation

    run = {"container": {"securityContext": security}, "environment": environment}
    run["connections"] = connections
    layer = json.dumps({"run": run})
    files = {
        **BASE,
        "connections/code.yaml": "kind: Connection\ngit:\n  url: https://example.com/r.git\n",
        "reconciler.yaml": f"kind: Org\npolicy:\n  podSecurity: {level}\n",
        "projects/p/project.yaml": project(),
        "presets/esc.yaml": "kind: Preset\n" + (layer if in_preset else "{}"),
        "projects/p/operations/t.yaml": "kind: Operation\npresets: [esc]\n"
        + ("" if in_preset else layer),
    }
    compiled = compile_repo(repo(files))
    for op in compiled.operations:
        workload = render_operation(
            op, compiled.connections, config_version="c", dispatched_at=datetime(2026, 1, 1)
        )
        pod = workload.job["spec"]["template"]
        assert pod_security_findings(pod, compiled.org.policy) == [], (level, run)
        env = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
        assert len(env) == len(set(env))
        assert op.spec["run"].get("environment", {}).get("priorityClassName") is None
    for rejected in compiled.rejected:
        assert rejected.reason is RejectReason.POLICY_VIOLATION and rejected.message


def test_init_containers_and_sidecars_go_through_the_same_check() -> None:
    """The preset pod fields render into the pod's init containers: the check reads them
    there and names the field they came from."""
    body = (
        "run:\n  initContainers:\n    - name: prep\n      image: busybox\n"
        "      securityContext:\n        appArmorProfile: {type: Unconfined}\n"
        "  sidecars:\n    - name: proxy\n      image: envoy\n"
        "      securityContext:\n        procMount: Unmasked\n"
    )
    errors, (message,) = _compile("kind: Org\n", body)
    assert errors == []
    # a list item is one leaf of provenance: the container's line
    assert sorted(message.split("; ")) == [
        "run.initContainers[0].securityContext.appArmorProfile.type: AppArmor profile "
        "'Unconfined' is not allowed by policy.podSecurity baseline (set by operation at "
        "projects/p/operations/t.yaml:4)",
        "run.sidecars[0].securityContext.procMount: procMount 'Unmasked' is not allowed by "
        "policy.podSecurity baseline (set by operation at projects/p/operations/t.yaml:9)",
    ]
    _, (message,) = _compile(
        RESTRICTED, HARDENED + "  sidecars:\n    - {name: proxy, image: envoy}\n"
    )
    assert message.startswith(
        "run.sidecars[0].securityContext.allowPrivilegeEscalation: must be false under "
        "policy.podSecurity restricted (it is not set)"
    ), message


# --- every field policy governs is in one table (issue 13: the docs list each) -------------


def test_every_violation_lies_under_a_governed_field_and_every_knob_governs_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``policy.GOVERNED`` is the list of every field policy governs, which
    docs/config-reference.md and docs/operations.md must show (tests/meta/test_docs_drift.py).
    Every violation that any escape of this file and of test_preset_pod_fields.py raises
    lies under one of its fields, each of its fields is reached by some escape, and every
    knob of ``policy:`` adjusts one of them."""
    from support.escapes import ESCAPES as POD_ESCAPES
    from support.escapes import reject

    from reconciler.core.compile import resolve
    from reconciler.core.compile.model import Policy
    from reconciler.core.compile.policy import COMMIT_KNOBS, GOVERNED, governed_field

    seen: list[str] = []

    def spy(check):  # type: ignore[no-untyped-def]
        def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
            found = check(*args, **kwargs)
            seen.extend(v.field for v in found)
            return found

        return wrapped

    monkeypatch.setattr(resolve, "check_policy", spy(resolve.check_policy))
    monkeypatch.setattr(resolve, "check_pod_security", spy(resolve.check_pod_security))
    for escape in ESCAPES.values():
        _reject(
            {
                "projects/p/project.yaml": project(),
                "projects/p/operations/t.yaml": f"kind: Operation\n{escape.body}",
            }
        )
    for pod_escape in POD_ESCAPES.values():
        reject(
            {"projects/p/operations/t.yaml": "kind: Operation\n" + pod_escape.body},
            pod_escape.org,
        )
    # the rules the tables above do not reach: kinds, replicas, restricted, a connection
    _reject(
        {
            "projects/p/project.yaml": project(),
            "projects/p/operations/t.yaml": "kind: Operation\nqueue: nb\n",
        }
    )
    org = ORG + "  maxReplicas: 2\n"
    replicas = "kind: Operation\nrun:\n  replicas: 3\n"
    files = {"projects/p/project.yaml": project(), "projects/p/operations/t.yaml": replicas}
    compile_repo(repo({**BASE, "reconciler.yaml": org, **files}))
    _compile(RESTRICTED, "")
    no_uid = HARDENED.replace("      runAsUser: 1000\n", "")
    _compile(RESTRICTED, no_uid + "  connections: [code]\n")

    ungoverned = sorted({f for f in seen if governed_field(f) is None})
    assert ungoverned == [], f"violations outside policy.GOVERNED: {ungoverned}"
    assert {governed_field(f) for f in seen} == set(GOVERNED)
    knobs = {info.alias for info in Policy.model_fields.values()}
    assert knobs == {k for ks in GOVERNED.values() for k in ks} | set(COMMIT_KNOBS)
