"""The pod-field escapes a preset could try, each with the field policy must name, and how a
test compiles one and reads its refusal."""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.core.compile import compile_repo
from reconciler.core.types import CompiledRepo, RejectReason
from support.snapshots import repo

ORG = """kind: Org
policy:
  maxResources:
    nvidia.com/gpu: 4
  allowRunAsRoot: false
"""


BASE = {
    "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
    "queues/gpu.yaml": "kind: Queue\ncluster: local\n",
    "connections/data.yaml": "kind: Connection\nvolume:\n  claimName: data\n  mountPath: /d\n",
    "connections/code.yaml": "kind: Connection\ngit:\n  url: https://example.com/x.git\n",
    "projects/p/presets/base.yaml": (
        "kind: Preset\nrun:\n  kind: job\n  container:\n    image: python:3.11\n"
    ),
    "projects/p/project.yaml": (
        "kind: Project\nnamespace: team-p\ndefaults:\n  queue: gpu\n  presets: [base]\n"
    ),
}


OP = "kind: Operation\nrun:\n  container:\n    command: [go]\n"


def compile(files: dict[str, str], org: str = ORG) -> CompiledRepo:
    return compile_repo(repo({**BASE, "reconciler.yaml": org, **files}))


SIDE = "run:\n  sidecars:\n    - name: s\n      image: x\n      securityContext:\n"
INIT = SIDE.replace("sidecars", "initContainers")


@dataclass(frozen=True)
class Escape:
    body: str  # YAML under the top level of a preset or an operation
    field: str
    message: str
    line: int  # line of the value that carries the blame, within ``body``
    org: str = ORG


ESCAPES = {
    "service-account-default-policy": Escape(
        "run:\n  environment:\n    serviceAccountName: cluster-admin\n",
        "run.environment.serviceAccountName",
        "service account 'cluster-admin' is not allowed: without policy.allowedServiceAccounts "
        "only the namespace's 'default' is",
        3,
    ),
    "service-account-not-listed": Escape(
        "run:\n  environment:\n    serviceAccountName: cluster-admin\n",
        "run.environment.serviceAccountName",
        "service account 'cluster-admin' is not in policy.allowedServiceAccounts [trainer]",
        3,
        ORG + "  allowedServiceAccounts: [trainer]\n",
    ),
    "image-pull-secret": Escape(
        "run:\n  environment:\n    imagePullSecrets: [registry, other-team]\n",
        "run.environment.imagePullSecrets[1]",
        "image pull secret 'other-team' is not in policy.allowedImagePullSecrets [registry]",
        3,
        ORG + "  allowedImagePullSecrets: [registry]\n",
    ),
    "volume-type": Escape(
        "run:\n  volumes:\n    - {name: v, emptyDir: {}}\n    - {name: w, persistentVolumeClaim: "
        "{claimName: other}}\n",
        "run.volumes[1]",
        "volume 'w' is a persistentVolumeClaim volume, which is not in "
        "policy.allowedVolumeTypes [configMap, emptyDir]",
        4,
        ORG + "  allowedVolumeTypes: [emptyDir, configMap]\n",
    ),
    "sidecar-privileged": Escape(
        SIDE + "        privileged: true\n",
        "run.sidecars[0].securityContext.privileged",
        "privileged containers are not allowed by policy",
        3,
    ),
    "init-capability": Escape(
        INIT + "        capabilities: {add: [SYS_ADMIN]}\n",
        "run.initContainers[0].securityContext.capabilities.add[0]",
        "capability 'SYS_ADMIN' is not in policy.allowedCapabilities "
        "(the Pod Security baseline set)",
        3,
    ),
    "sidecar-root": Escape(
        SIDE + "        runAsUser: 0\n",
        "run.sidecars[0].securityContext.runAsUser",
        "running as root (UID 0) is not allowed by policy",
        3,
    ),
    "init-run-as-non-root-false": Escape(
        INIT + "        runAsNonRoot: false\n",
        "run.initContainers[0].securityContext.runAsNonRoot",
        "runAsNonRoot: false is not allowed by policy",
        3,
    ),
    "sidecar-gpus": Escape(
        "run:\n  sidecars:\n    - {name: s, image: x, resources: {limits: {nvidia.com/gpu: 5}}}\n",
        "run.sidecars[0].resources.limits.nvidia.com/gpu",
        "nvidia.com/gpu 5 exceeds policy.maxResources 4",
        3,
    ),
    "max-retries": Escape(
        "run:\n  maxRetries: 7\n",
        "run.maxRetries",
        "maxRetries 7 exceeds policy.maxRetries 6",
        2,
    ),
    "max-retries-org": Escape(
        "run:\n  maxRetries: 1\n",
        "run.maxRetries",
        "maxRetries 1 exceeds policy.maxRetries 0",
        2,
        ORG + "  maxRetries: 0\n",
    ),
    "ttl": Escape(
        "run:\n  ttl: 30m\n",
        "run.ttl",
        "ttl 30m is shorter than policy.minTtl 1h (the reconciler must see a Job finish "
        "before Kubernetes deletes it)",
        2,
    ),
    "ttl-zero": Escape(
        "run:\n  ttl: 0\n",
        "run.ttl",
        "ttl 0s is shorter than policy.minTtl 1h30m",
        2,
        ORG + "  minTtl: 1h30m\n",
    ),
}


def reject(files: dict[str, str], org: str) -> str:
    compiled = compile({"projects/p/operations/fine.yaml": OP, **files}, org)
    assert compiled.errors == (), compiled.errors
    assert [op.id for op in compiled.operations] == ["p/fine"]
    (rejected,) = compiled.rejected
    assert rejected.operation == "p/t" and rejected.reason is RejectReason.POLICY_VIOLATION
    return rejected.message
