"""Schema models for every kind of file in the config repo (pydantic v2).

Unknown fields are forbidden, types are strict (``"3"`` is not an int), names are
DNS-1123 labels and resource amounts are Kubernetes quantities. The models validate;
the compiler works on the plain data so that provenance can follow every leaf.

A field is written only by its camelCase YAML name: ``is_approved`` is an unknown field
(``suggest`` names ``isApproved``), never a second spelling. The compiler reads the plain
data by the YAML names, so a second spelling the model accepted would be ignored.

``null`` is allowed as the value of a key in the free-form maps a preset merges
(``ClearableMap``: ``env``, ``nodeSelector``, ``labels``, ``annotations``, ``requests``,
``limits``): it deletes that key (docs/presets.md, "Nulls"), and never reaches the result.

What must live here: the pydantic models of every kind and their JSON schemas; no cross-file
rule (``references.py``) and no merge (``merge.py``).
"""

from __future__ import annotations

import difflib
import enum
import functools
import math
import re
import types
import typing
import zoneinfo
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    GetPydanticSchema,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import core_schema

from reconciler.core.decision.schedule import EARLIEST, LATEST, parse_cron, parse_instant
from reconciler.core.quantity import DURATION, QuantityError, duration_seconds, parse_quantity
from reconciler.core.quantity import short_repr as _show
from reconciler.core.types import MergeStrategy

# Matched with ``fullmatch``: ``match`` lets ``$`` pass a final newline ('team-a\n').
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_QUANTITY_PATTERN = r"^[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d{1,3})?$"

KIND_NAMES = ("job", "notebook", "sandbox", "batch")


# The checks of names, keys and values a schema runs on the same few strings in every file
# (and on every merged spec): a string that passed is not checked again. A failure raises,
# so it is never kept, and is checked (and reported) every time.
_checked_once = functools.lru_cache(maxsize=8192)


@_checked_once
def _dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"{_show(value)} is not a valid name: use at most 63 lowercase letters, digits and "
            "'-', starting and ending with a letter or digit (DNS-1123 label)"
        )
    return value


@_checked_once
def _qualified(value: str, what: str) -> str:
    prefix, _, name = value.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        raise ValueError(f"{_show(value)} is not a valid {what}: bad prefix {prefix!r}")
    if not name or len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
        raise ValueError(f"{_show(value)} is not a valid {what}")
    return value


def _label_key(value: str) -> str:
    return _qualified(value, "label key")


# Kubernetes' resources for containers without a domain prefix; every other resource has
# one (``nvidia.com/gpu``). The API server refuses a container that requests ``CPU`` or
# ``gpu``, and a quota on either would cap nothing any operation requests.
STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")


@_checked_once
def _resource_name(value: str) -> str:
    _qualified(value, "resource name")
    if "/" in value or value in STANDARD_RESOURCES or value.startswith("hugepages-"):
        return value
    meant = {_fold(name): name for name in STANDARD_RESOURCES}.get(_fold(value))
    raise ValueError(
        f"{_show(value)} is not a resource Kubernetes knows: without a domain prefix a "
        "resource is cpu, memory, ephemeral-storage or hugepages-<size> (others have their "
        "prefix, e.g. nvidia.com/gpu)" + (f"; did you mean {meant!r}?" if meant else "")
    )


@_checked_once
def _label_value(value: str) -> str:
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        raise ValueError(f"{_show(value)} is not a valid label value (at most 63 characters)")
    return value


@_checked_once
def _env_name(value: str) -> str:
    if not _ENV_NAME.fullmatch(value):
        raise ValueError(f"{_show(value)} is not a valid environment variable name")
    if value.startswith(RESERVED_ENV_PREFIX):
        raise ValueError(
            f"environment variables named {RESERVED_ENV_PREFIX}* are set by the reconciler "
            "and cannot be set or overridden"
        )
    return value


# Labels and annotations the reconciler writes, and so owns: users may not set them. The dev
# cluster's simulated kubelet reads three annotations that the reconciler never writes.
RESERVED_KEY_PREFIX = "reconciler.dev/"
RESERVED_KEYS = frozenset({"app.kubernetes.io/managed-by"})
SIMULATION_ANNOTATIONS = frozenset(
    {
        "reconciler.dev/simulated-duration",
        "reconciler.dev/simulated-failure",
        "reconciler.dev/simulated-outputs",
    }
)
RESERVED_ENV_PREFIX = "RECONCILER_"
# Keys the controllers that run our workloads write on their pods: the Job controller
# (k8s.io/api/batch/v1: job-name, controller-uid and batch.kubernetes.io/job-name,
# controller-uid, job-completion-index, job-tracking, job-index-failure-count, ...) and
# the Kubeflow Training Operator (kubeflow/common: training.kubeflow.org/job-name,
# replica-type, replica-index, job-role, operator-name, and the unprefixed labels it
# deprecated). A user's copy would make `kubectl get pods -l job-name=...` (and our log
# lookup) find another run's pods, or be refused by the API server only at create time.
JOB_CONTROLLER_KEYS = ("batch.kubernetes.io/", frozenset({"job-name", "controller-uid"}))
TRAINING_OPERATOR_KEYS = (
    "training.kubeflow.org/",
    frozenset({"replica-index", "replica-type", "replica-name", "group-name", "job-role"}),
)


def _controller_owning(key: str, *, annotation: bool) -> str | None:
    """Which controller owns ``key`` on the pods it runs (annotations: by prefix only)."""
    for owner, (prefix, labels) in (
        ("the Job controller", JOB_CONTROLLER_KEYS),
        ("the Kubeflow Training Operator", TRAINING_OPERATOR_KEYS),
    ):
        if key.startswith(prefix) or (not annotation and key in labels):
            return owner
    return None


def _user_key(value: str, *, annotation: bool) -> str:
    if annotation and value in SIMULATION_ANNOTATIONS:
        return value
    what = "annotation" if annotation else "label"
    if value.startswith(RESERVED_KEY_PREFIX) or value in RESERVED_KEYS:
        raise ValueError(
            f"{what}s under {RESERVED_KEY_PREFIX}* and app.kubernetes.io/managed-by are the "
            "reconciler's own and cannot be set"
        )
    owner = _controller_owning(value, annotation=annotation)
    if owner is not None:
        raise ValueError(
            f"{what} {value!r} is set by {owner} on the pods it runs and cannot be set "
            "(reserved: job-name, controller-uid, batch.kubernetes.io/*, "
            "training.kubeflow.org/* and the Training Operator's unprefixed labels)"
        )
    return value


def _user_label_key(value: str) -> str:
    return _user_key(_label_key(value), annotation=False)


def _user_annotation_key(value: str) -> str:
    return _user_key(_label_key(value), annotation=True)


def _priority_class(value: str) -> str:
    _dns_subdomain(value)
    if value.startswith("system-"):
        raise ValueError(
            f"{_show(value)}: system-* priority classes are for the cluster's own pods and "
            "can never be allowed"
        )
    return value


def _image(value: str) -> str:
    if value != value.strip():
        raise ValueError(f"{_show(value)}: an image must not have leading or trailing whitespace")
    return value


def _param_name(value: str) -> str:
    if not _PARAM_NAME.fullmatch(value):
        raise ValueError(f"{_show(value)} is not a valid parameter name (letters, digits, '_')")
    return value


def _quantity(value: Any) -> Any:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ValueError(f"{_show(value)} is not a quantity (e.g. 2, 500m, 256Gi)")
    try:
        parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None
    return value


_BUCKET_URL = re.compile(r"^(s3|gs|gcs|az|abfs)://[^\s/]+(/\S*)?$")


def _bucket_url(value: str) -> str:
    if not _BUCKET_URL.fullmatch(value):
        raise ValueError(f"{_show(value)} is not a bucket URL (s3://, gs://, az://...)")
    return value


def _abs_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{_show(value)} must be an absolute path")
    return value


def _relative_path(value: str) -> str:
    if value.startswith("/") or ".." in value.split("/"):
        raise ValueError(f"{_show(value)} must be a relative path without '..' segments")
    return value


def _host_file(value: str) -> str:
    if ".." in value.replace("\\", "/").split("/"):
        raise ValueError(f"{_show(value)}: '..' segments are not allowed in a path")
    return value


# Kubernetes' ``activeDeadlineSeconds`` is a positive int64.
MAX_TIMEOUT_SECONDS = 2**63 - 1


def _duration(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"{_show(value)} is not a duration (e.g. 90, '30m', '2h', '1h30m')")
    if isinstance(value, str) and not DURATION.fullmatch(value):
        raise ValueError(f"{_show(value)} is not a duration (e.g. 90, '30m', '2h', '1h30m')")
    seconds = duration_seconds(value)
    if seconds < 1:
        raise ValueError("timeout must be at least 1 second")
    if seconds > MAX_TIMEOUT_SECONDS:
        raise ValueError(
            f"timeout {_show(value)} is longer than Kubernetes allows "
            f"({MAX_TIMEOUT_SECONDS} seconds)"
        )
    return value


def _plain_duration(value: Any) -> Any:
    """A duration that is no timeout (``maxBorrowDuration``, a schedule's): its errors do
    not call it one."""
    try:
        return _duration(value)
    except ValueError as err:
        raise ValueError(str(err).replace("timeout ", "", 1)) from None


def _dns_subdomain(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError(
            f"{_show(value)} is not a valid name: use at most 253 lowercase letters, digits, "
            "'-' and '.' (DNS-1123 subdomain)"
        )
    return value


_RESERVED_VOLUMES = ("dshm", "conn-")


def _user_volume(value: str) -> str:
    if value == _RESERVED_VOLUMES[0] or value.startswith(_RESERVED_VOLUMES[1]):
        raise ValueError(
            f"volume name {_show(value)} is reserved: 'dshm' and 'conn-*' are the volumes the "
            "reconciler renders for shmSize and connections"
        )
    return value


def _user_container(value: str) -> str:
    if value == "main":
        raise ValueError("container name 'main' is reserved for the operation's own container")
    return value


def _ttl(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"{_show(value)} is not a duration (e.g. 0, 3600, '1h', '72h')")
    if isinstance(value, str) and not DURATION.fullmatch(value):
        raise ValueError(f"{_show(value)} is not a duration (e.g. 0, 3600, '1h', '72h')")
    seconds = duration_seconds(value)
    if not 0 <= seconds <= 2**31 - 1:
        raise ValueError(f"{_show(value)} is out of range (0 to 2147483647 seconds)")
    return value


Name = Annotated[StrictStr, AfterValidator(_dns_label)]
Quantity = Annotated[
    Any,
    AfterValidator(_quantity),
    WithJsonSchema(
        {"anyOf": [{"type": "string", "pattern": _QUANTITY_PATTERN}, {"type": "number"}]}
    ),
]
ResourceName = Annotated[StrictStr, AfterValidator(_resource_name)]
LabelKey = Annotated[StrictStr, AfterValidator(_label_key)]
UserLabelKey = Annotated[StrictStr, AfterValidator(_user_label_key)]
UserAnnotationKey = Annotated[StrictStr, AfterValidator(_user_annotation_key)]
PriorityClass = Annotated[StrictStr, Field(min_length=1), AfterValidator(_priority_class)]
UserId = Annotated[StrictInt, Field(ge=0, le=2**31 - 1)]
LabelValue = Annotated[StrictStr, AfterValidator(_label_value)]
EnvName = Annotated[StrictStr, AfterValidator(_env_name)]
ParamName = Annotated[StrictStr, AfterValidator(_param_name)]
AbsPath = Annotated[StrictStr, AfterValidator(_abs_path)]
RelPath = Annotated[StrictStr, Field(min_length=1), AfterValidator(_relative_path)]
HostFile = Annotated[StrictStr, Field(min_length=1), AfterValidator(_host_file)]
Int32 = Annotated[StrictInt, Field(ge=-(2**31), le=2**31 - 1)]
Count = Annotated[StrictInt, Field(ge=0, le=2**31 - 1)]
Duration = Annotated[
    Any,
    AfterValidator(_duration),
    WithJsonSchema(
        {"anyOf": [{"type": "string", "pattern": DURATION.pattern}, {"type": "integer"}]}
    ),
]
PlainDuration = Annotated[
    Any,
    AfterValidator(_plain_duration),
    WithJsonSchema(
        {"anyOf": [{"type": "string", "pattern": DURATION.pattern}, {"type": "integer"}]}
    ),
]
Scalar = StrictStr | StrictInt | StrictFloat | StrictBool
SubdomainName = Annotated[StrictStr, AfterValidator(_dns_subdomain)]
# Scheduler and priority class names: "" is "too short" rather than "not a name".
ObjectName = Annotated[StrictStr, Field(min_length=1), AfterValidator(_dns_subdomain)]
VolumeName = Annotated[StrictStr, AfterValidator(_dns_label), AfterValidator(_user_volume)]
ContainerName = Annotated[StrictStr, AfterValidator(_dns_label), AfterValidator(_user_container)]
Ttl = Annotated[
    Any,
    AfterValidator(_ttl),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": DURATION.pattern},
                {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
            ]
        }
    ),
]
FileMode = Annotated[StrictInt, Field(ge=0, le=0o777)]
NonEmptyStr = Annotated[StrictStr, Field(min_length=1)]
Kind = Literal["job", "notebook", "sandbox", "batch"]


def _values_of(enum_type: type[enum.StrEnum]) -> GetPydanticSchema:
    """An enum field validated as the ``Literal`` of its values: strict like every other
    field (only those strings), with the same errors and the same inline JSON schema, but
    holding the member."""
    values: Any = Literal.__getitem__(tuple(m.value for m in enum_type))
    return GetPydanticSchema(
        lambda _source, handler: core_schema.no_info_after_validator_function(
            enum_type, handler(values)
        )
    )


PatchStrategy = Annotated[MergeStrategy, _values_of(MergeStrategy)]


class Strict(BaseModel):
    """Every input model: unknown keys are errors, and a field has one spelling (its alias)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
    )


# --- run ------------------------------------------------------------------------------


# A null value deletes the key when a preset merges the map (docs/presets.md, "Nulls").
ClearableQuantities = dict[ResourceName, Quantity | None]
ClearableEnv = dict[EnvName, StrictStr | None]
ClearableLabels = dict[LabelKey, LabelValue | None]
# Labels and annotations a user sets on the workload: the reconciler's own keys refused.
ClearableUserLabels = dict[UserLabelKey, LabelValue | None]
ClearableUserAnnotations = dict[UserAnnotationKey, StrictStr | None]


class Resources(Strict):
    requests: ClearableQuantities | None = None
    limits: ClearableQuantities | None = None


class Capabilities(Strict):
    add: list[StrictStr] | None = None
    drop: list[StrictStr] | None = None


class SecurityProfile(Strict):
    """A seccomp or AppArmor profile, as Kubernetes writes it."""

    type: Literal["RuntimeDefault", "Localhost", "Unconfined"]
    localhost_profile: NonEmptyStr | None = None

    @model_validator(mode="after")
    def _localhost(self) -> SecurityProfile:
        if (self.type == "Localhost") != (self.localhost_profile is not None):
            raise ValueError("localhostProfile is set with type Localhost, and only then")
        return self


class SecurityContext(Strict):
    privileged: StrictBool | None = None
    allow_privilege_escalation: StrictBool | None = None
    run_as_user: UserId | None = None
    run_as_group: UserId | None = None
    run_as_non_root: StrictBool | None = None
    read_only_root_filesystem: StrictBool | None = None
    capabilities: Capabilities | None = None
    seccomp_profile: SecurityProfile | None = None
    app_armor_profile: SecurityProfile | None = None
    proc_mount: Literal["Default", "Unmasked"] | None = None


# Kubernetes' own shapes, for the pod parts a preset may set beyond the main container
# (volumes, their mounts, init containers and sidecars): what a platform team pastes from a
# manifest validates as written. hostPath is never a volume here (a ``volume`` connection
# with ``policy.allowHostPath`` is the one way to a host directory).


class VolumeMount(Strict):
    name: Name = Field(description="A volume of run.volumes.")
    mount_path: AbsPath
    sub_path: RelPath | None = None
    read_only: StrictBool | None = None


class KeyToPath(Strict):
    key: NonEmptyStr
    path: RelPath
    mode: FileMode | None = None


class PersistentVolumeClaimVolume(Strict):
    claim_name: SubdomainName
    read_only: StrictBool | None = None


class ConfigMapVolume(Strict):
    name: SubdomainName
    items: list[KeyToPath] | None = None
    default_mode: FileMode | None = None
    optional: StrictBool | None = None


class SecretVolume(Strict):
    secret_name: SubdomainName
    items: list[KeyToPath] | None = None
    default_mode: FileMode | None = None
    optional: StrictBool | None = None


class EmptyDirVolume(Strict):
    medium: Literal["", "Memory"] | None = None
    size_limit: Quantity | None = None


def _refuse_host_path(value: Any) -> Any:
    raise ValueError(
        "hostPath volumes are not allowed in run.volumes; mount a host directory through a "
        "'volume' connection with hostPath (needs policy.allowHostPath)"
    )


VOLUME_TYPES = ("persistentVolumeClaim", "configMap", "secret", "emptyDir")
VolumeType = Literal["persistentVolumeClaim", "configMap", "secret", "emptyDir"]


class Volume(Strict):
    name: VolumeName
    persistent_volume_claim: PersistentVolumeClaimVolume | None = None
    config_map: ConfigMapVolume | None = None
    secret: SecretVolume | None = None
    empty_dir: EmptyDirVolume | None = None
    host_path: Annotated[Any, AfterValidator(_refuse_host_path), WithJsonSchema({"not": {}})] = (
        Field(default=None, description="Never allowed: use a volume connection.")
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> Volume:
        if sum(getattr(self, to_snake(t)) is not None for t in VOLUME_TYPES) != 1:
            raise ValueError(f"set exactly one of {', '.join(VOLUME_TYPES)}")
        return self

    @property
    def type(self) -> str:
        return next(t for t in VOLUME_TYPES if getattr(self, to_snake(t)) is not None)


class ExtraContainer(Strict):
    """An init container or a sidecar: a container of the pod besides ``main``."""

    name: ContainerName
    image: NonEmptyStr
    command: list[StrictStr] | None = None
    args: list[StrictStr] | None = None
    env: dict[EnvName, StrictStr] | None = None
    working_dir: AbsPath | None = None
    resources: Resources | None = None
    security_context: SecurityContext | None = None
    volume_mounts: list[VolumeMount] | None = None


class Container(Strict):
    image: Annotated[NonEmptyStr, AfterValidator(_image)] | None = None
    command: list[StrictStr] | None = None
    args: list[StrictStr] | None = None
    env: ClearableEnv | None = None
    working_dir: AbsPath | None = None
    resources: Resources | None = None
    security_context: SecurityContext | None = None
    shm_size: Quantity | None = Field(
        default=None, description="Size of a memory-backed /dev/shm (e.g. 16Gi)."
    )
    volume_mounts: list[VolumeMount] | None = Field(
        default=None, description="Mounts of run.volumes into the operation's container."
    )


class Toleration(Strict):
    key: LabelKey | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: StrictStr | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    # Kubernetes' int64 (0 and below: evict at once); a larger int is no JSON number the
    # Job's body can carry
    toleration_seconds: Annotated[StrictInt, Field(ge=-(2**63), le=2**63 - 1)] | None = None

    @model_validator(mode="after")
    def _as_kubernetes_checks(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists has no value")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration without a key needs operator: Exists")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds needs effect: NoExecute")
        return self


# --- affinity: the Kubernetes types, so that a misspelled key is an error, not dropped ----

Weight = Annotated[StrictInt, Field(ge=1, le=100)]


class NodeSelectorRequirement(Strict):
    key: NonEmptyStr
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[StrictStr] | None = None


class NodeSelectorTerm(Strict):
    match_expressions: list[NodeSelectorRequirement] | None = None
    match_fields: list[NodeSelectorRequirement] | None = None


class NodeSelector(Strict):
    node_selector_terms: list[NodeSelectorTerm] | None = Field(
        default=None, description="Kubernetes ORs the terms: any one term must match."
    )


class PreferredSchedulingTerm(Strict):
    weight: Weight
    preference: NodeSelectorTerm


class NodeAffinity(Strict):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] | None = (
        None
    )


class LabelSelectorRequirement(Strict):
    key: NonEmptyStr
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[StrictStr] | None = None


class LabelSelector(Strict):
    match_labels: dict[LabelKey, LabelValue] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = None


class PodAffinityTerm(Strict):
    label_selector: LabelSelector | None = None
    namespace_selector: LabelSelector | None = None
    namespaces: list[StrictStr] | None = None
    topology_key: NonEmptyStr
    match_label_keys: list[StrictStr] | None = None
    mismatch_label_keys: list[StrictStr] | None = None


class WeightedPodAffinityTerm(Strict):
    weight: Weight
    pod_affinity_term: PodAffinityTerm


class PodAffinity(Strict):
    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] | None = None
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] | None = (
        None
    )


class Affinity(Strict):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


class Environment(Strict):
    node_selector: ClearableLabels | None = None
    tolerations: list[Toleration] | None = None
    affinity: Affinity | None = None
    scheduler_name: ObjectName | None = None
    priority_class_name: ObjectName | None = Field(
        default=None, description="Must be in policy.allowedPriorityClasses; never system-*."
    )
    host_network: StrictBool | None = Field(default=None, alias="hostNetwork")
    host_pid: StrictBool | None = Field(default=None, alias="hostPID")
    host_ipc: StrictBool | None = Field(default=None, alias="hostIPC")
    labels: ClearableUserLabels | None = None
    annotations: ClearableUserAnnotations | None = None
    service_account_name: SubdomainName | None = Field(
        default=None, description="Checked against policy.allowedServiceAccounts."
    )
    image_pull_secrets: list[SubdomainName] | None = Field(
        default=None, description="Names of Secrets in the project's namespace."
    )


MAX_REPLICAS = 100_000  # Kubernetes' ceiling on an Indexed Job's completions and parallelism
DEFAULT_DISTRIBUTED_PORT = 29500


class Distributed(Strict):
    """How the replicas of a distributed operation find each other (docs/runtime.md)."""

    framework: Literal["torch", "jax", "none"] | None = Field(
        default=None,
        description="The rendezvous environment to set: torch (default; MASTER_ADDR, RANK...), "
        "jax (JAX_COORDINATOR_ADDRESS...), or none (only the headless Service and the index).",
    )
    port: Annotated[StrictInt, Field(ge=1, le=65535)] | None = Field(
        default=None, description="The coordinator's port on replica 0 (default 29500)."
    )
    backend: Literal["job", "pytorchjob"] | None = Field(
        default=None,
        description="job (default): an Indexed Job and a headless Service; pytorchjob: a "
        "Kubeflow PyTorchJob (the cluster must serve its CRD).",
    )


class Run(Strict):
    kind: Kind | None = None
    replicas: Annotated[StrictInt, Field(ge=1, le=MAX_REPLICAS)] | None = Field(
        default=None,
        description="Pods that run together, all or nothing (job and batch only; default 1). "
        "More than 1 renders an Indexed Job and a headless Service.",
    )
    distributed: Distributed | None = None
    container: Container | None = None
    environment: Environment | None = None
    connections: list[Name] | None = None
    outputs: Name | None = Field(
        default=None,
        description="A bucket or volume connection each run writes its outputs under: "
        "<url or mountPath>/<project>/<operation>/<workload>/, in RECONCILER_OUTPUTS.",
    )
    timeout: Duration | None = Field(
        default=None, description="Seconds (int) or a duration such as '30m' or '2h'."
    )
    max_retries: Count | None = Field(
        default=None, description="Retries after a failed pod: the Job's backoffLimit (0)."
    )
    ttl: Ttl | None = Field(
        default=None,
        description="Delete the finished Job after this long: ttlSecondsAfterFinished.",
    )
    volumes: list[Volume] | None = None
    init_containers: list[ExtraContainer] | None = Field(
        default=None, description="Run to completion, in order, before the containers start."
    )
    sidecars: list[ExtraContainer] | None = Field(
        default=None,
        description="Run beside the operation's container, stopped when it ends "
        "(Kubernetes native sidecars).",
    )


# --- workflows ------------------------------------------------------------------------

MAX_OPERATION_PRIORITY = 1000
OperationPriority = Annotated[StrictInt, Field(ge=0, le=MAX_OPERATION_PRIORITY)]


DISTRIBUTIONS = ("choice", "range", "uniform", "loguniform", "normal")
# exp() of a larger bound is past a float's range: a loguniform draw would be infinity.
MAX_LOG_BOUND = 700
# The bounds of the other distributions: a span or a normal's tail past a float's range
# would draw infinity (or fail to count a range's values), never a number.
MAX_DRAW_BOUND = 1e300
# A standard normal draw is at most sqrt(-2 ln 2**-53) (about 8.6) from 0 (Box-Muller on
# 53-bit uniforms).
_NORMAL_TAIL = 9


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class Distribution(Strict):
    """One parameter of a ``random`` matrix, as Polyaxon writes it: ``{kind, value}``."""

    kind: Literal["choice", "range", "uniform", "loguniform", "normal"]
    value: Annotated[list[Scalar], Field(min_length=1)] = Field(
        description="choice: the values; range: [start, stop, step]; uniform: [low, high]; "
        "loguniform: [low, high] of the logarithm (a draw is exp(uniform(low, high))); "
        "normal: [mean, standard deviation]."
    )

    @model_validator(mode="after")
    def _shape(self) -> Distribution:
        if self.kind == "choice":
            return self
        arity = 3 if self.kind == "range" else 2
        shape = {
            "range": "[start, stop, step]",
            "uniform": "[low, high]",
            "loguniform": "[low, high] (of the logarithm)",
            "normal": "[mean, standard deviation]",
        }[self.kind]
        if len(self.value) != arity or not all(_number(v) for v in self.value):
            raise ValueError(f"a {self.kind} distribution's value is {arity} numbers, {shape}")
        first, second = float(self.value[0]), float(self.value[1])
        reach = abs(first) + _NORMAL_TAIL * second if self.kind == "normal" else first
        if self.kind != "loguniform" and max(abs(reach), abs(second)) > MAX_DRAW_BOUND:
            bounds = "mean ± 9 deviations" if self.kind == "normal" else "its bounds"
            raise ValueError(
                f"a {self.kind} distribution's draws must be finite numbers: keep {bounds} "
                f"within ±1e300"
            )
        if self.kind == "range":
            step = float(self.value[2])
            if step == 0 or (second - first) / step <= 0:
                raise ValueError(
                    f"range {_show(self.value)} has no values: from start, step must move "
                    "towards stop (stop excluded)"
                )
            if not math.isfinite((second - first) / step):
                raise ValueError(
                    f"range {_show(self.value)} has more values than a float can count: "
                    "use a larger step"
                )
        elif self.kind == "normal":
            if second <= 0:
                raise ValueError("a normal distribution's standard deviation must be above 0")
        elif first >= second:
            raise ValueError(f"a {self.kind} distribution's low must be below its high")
        elif self.kind == "loguniform" and max(abs(first), abs(second)) > MAX_LOG_BOUND:
            raise ValueError(
                f"loguniform bounds are logarithms (a draw is exp(uniform(low, high))); "
                f"keep them within ±{MAX_LOG_BOUND}"
            )
        return self


# The tags of the union below: ``compile/errors.py`` reads through them to the data.
PARAM_VALUE_TAGS = ("param-values", "param-distribution")
ParamValues = Annotated[
    Annotated[Annotated[list[Scalar], Field(min_length=1)], Tag("param-values")]
    | Annotated[Distribution, Tag("param-distribution")],
    Discriminator(
        lambda v: "param-distribution" if isinstance(v, dict | Distribution) else "param-values"
    ),
]


class Matrix(Strict):
    """A search: ``grid`` (the product of ``params``' lists), ``mapping`` (the maps of
    ``values``, one child each) or ``random`` (``numRuns`` children, each parameter drawn
    from its distribution in ``params`` with ``seed``). See docs/config-reference.md."""

    kind: Literal["grid", "mapping", "random"] = "grid"
    concurrency: Annotated[StrictInt, Field(ge=1, le=2**31 - 1)] | None = None
    params: Annotated[dict[ParamName, ParamValues], Field(min_length=1)] | None = Field(
        default=None,
        description="grid: name -> list of values; random: name -> {kind, value} distribution.",
    )
    values: (
        Annotated[
            list[Annotated[dict[ParamName, Scalar], Field(min_length=1)]], Field(min_length=1)
        ]
        | None
    ) = Field(default=None, description="mapping: one map of parameters per child.")
    num_runs: Annotated[StrictInt, Field(ge=1, le=2**31 - 1)] | None = Field(
        default=None, description="random: how many children to draw (at most 1000)."
    )
    seed: Annotated[StrictInt, Field(ge=0, le=2**63 - 1)] | None = Field(
        default=None, description="random: required; the same seed gives the same children."
    )

    @model_validator(mode="after")
    def _fields_of_kind(self) -> Matrix:
        given = {
            name
            for name in ("params", "values", "num_runs", "seed")
            if getattr(self, name) is not None
        }
        needs = {
            "grid": {"params"},
            "mapping": {"values"},
            "random": {"params", "num_runs", "seed"},
        }[self.kind]
        yaml = {"params": "params", "values": "values", "num_runs": "numRuns", "seed": "seed"}
        missing = sorted(yaml[n] for n in needs - given)
        if missing:
            why = (
                " (the same seed gives the same children on every machine)"
                if "seed" in missing
                else ""
            )
            raise ValueError(f"a {self.kind} matrix needs {' and '.join(map(repr, missing))}{why}")
        extra = sorted(yaml[n] for n in given - needs)
        if extra:
            raise ValueError(f"a {self.kind} matrix has no {' or '.join(map(repr, extra))}")
        for name, value in (self.params or {}).items():
            if self.kind == "grid" and isinstance(value, Distribution):
                raise ValueError(
                    f"params.{name}: a grid matrix lists each parameter's values; a "
                    "distribution needs kind: random"
                )
            if self.kind == "random" and not isinstance(value, Distribution):
                raise ValueError(
                    f"params.{name}: a random matrix draws each parameter from a distribution, "
                    f"e.g. {{kind: choice, value: [...]}} ({', '.join(DISTRIBUTIONS)})"
                )
        return self


class DagOperation(Strict):
    name: Name
    dependencies: list[Name] = []
    params: dict[ParamName, Scalar] | None = None
    run: Run | None = Field(
        default=None, description="Overrides of the parent's compiled run (replace strategy)."
    )


class Dag(Strict):
    concurrency: Annotated[StrictInt, Field(ge=1, le=2**31 - 1)] | None = None
    operations: Annotated[list[DagOperation], Field(min_length=1)]


# --- notifications and commit status -----------------------------------------------


# The in-cluster names of the Kubernetes API server: a webhook there would have the
# reconciler POST its payloads to the API with whatever the URL asks.
API_SERVER_HOSTS = frozenset(
    {
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    }
)


# http(s)://host[:port][/path...]: no user info, no spaces (the host is what is checked).
_HTTP_URL = re.compile(r"^https?://(\[[0-9A-Fa-f:.]+\]|[^/:?#@\[\]\s]+)(:\d{1,5})?([/?#]\S*)?$")


def _http_url(value: str) -> str:
    found = _HTTP_URL.fullmatch(value)
    if found is None:
        raise ValueError(f"{_show(value)} is not an http:// or https:// URL")
    if found[1].rstrip(".").lower() in API_SERVER_HOSTS:
        raise ValueError(
            f"{_show(value)} points at the cluster's API server: the reconciler never "
            "sends requests there"
        )
    return value


# Names the host's zone database holds that are not IANA zones: ``localtime`` is the host's
# own zone (two replicas, or a CI runner, would count budget windows differently), the
# others aliases of its build.
_NOT_IANA = frozenset({"localtime", "posixrules", "Factory"})


def _timezone(value: str) -> str:
    try:
        if (
            not value
            or value.startswith(("/", ".", "posix/", "right/"))
            or ".." in value
            or value in _NOT_IANA
        ):
            raise ValueError
        zoneinfo.ZoneInfo(value)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        raise ValueError(
            f"{_show(value)} is not a time zone: use an IANA name such as 'UTC' or 'Europe/Berlin'"
        ) from None
    return value


def _cron(value: str) -> str:
    parse_cron(value)
    return value


def _instant(value: str) -> str:
    moment = parse_instant(value)
    if moment is None:
        raise ValueError(
            f"{_show(value)} is not an RFC 3339 time with an offset (e.g. '2026-12-01T00:00:00Z')"
        )
    if not EARLIEST <= moment < LATEST:
        raise ValueError(
            f"{_show(value)} is out of range (1970-01-01T00:00:00Z to 9000-01-01T00:00:00Z)"
        )
    return value


HttpUrl = Annotated[StrictStr, AfterValidator(_http_url)]

NotifyEvent = Literal["Dispatched", "Running", "Succeeded", "Failed", "Stopped", "PolicyViolation"]


class SecretRef(Strict):
    connection: Name = Field(description="A Connection of type secret: its Secret holds the value.")
    key: NonEmptyStr = Field(default="token", description="The key in that Secret.")


class Webhook(Strict):
    url: HttpUrl
    secret: SecretRef | None = Field(
        default=None,
        description="The HMAC-SHA256 key the body is signed with (X-Reconciler-Signature); "
        "unset: unsigned.",
    )


class Notification(Strict):
    on: Annotated[list[NotifyEvent], Field(min_length=1)] = Field(
        description="The phases (and PolicyViolation) that send it."
    )
    webhook: Webhook


Notifications = list[Notification]


class CommitStatus(Strict):
    """Where the reconciler reports each config commit it applies (GitHub or GitLab)."""

    provider: Literal["github", "gitlab"]
    url: HttpUrl = Field(
        description="The API's base URL: https://api.github.com, https://gitlab.com/api/v4, "
        "or a GitHub Enterprise or self-hosted GitLab one."
    )
    repository: NonEmptyStr = Field(
        description="GitHub: owner/name; GitLab: the project's id or its path."
    )
    token: SecretRef
    cluster: Name | None = Field(
        default=None,
        description="The Cluster whose Secret holds the token; default the only one.",
    )
    namespace: Name = Field(default="default", description="The namespace of that Secret.")
    context: NonEmptyStr = Field(
        default="reconciler", description="The status's name on the commit."
    )


def _frequency(value: Any) -> Any:
    _plain_duration(value)
    seconds = duration_seconds(value)
    if seconds < 60 or seconds % 60:
        raise ValueError(
            f"{_show(value)} is not a whole number of minutes: each tick's run is named by "
            "its minute (at least '1m', or 60)"
        )
    return value


Instant = Annotated[StrictStr, AfterValidator(_instant)]


class Schedule(Strict):
    """An operation's ``schedule`` (as Polyaxon's): each fire time makes a run named
    ``<operation>-<YYYYMMDDHHMM>`` (UTC), queued like any operation."""

    kind: Literal["cron", "interval"]
    cron: Annotated[StrictStr, AfterValidator(_cron)] | None = Field(
        default=None,
        description="kind: cron: five fields (minute hour day-of-month month day-of-week), "
        "Vixie cron's: ranges, steps, lists, names; or @hourly, @daily, @weekly, @monthly.",
    )
    frequency: Annotated[Any, AfterValidator(_frequency)] | None = Field(
        default=None,
        description="kind: interval: seconds (int) or a duration such as '6h', whole minutes; "
        "ticks at startAt (else 1970-01-01T00:00Z) plus each multiple.",
    )
    timezone: Annotated[StrictStr, AfterValidator(_timezone)] | None = Field(
        default=None, description="kind: cron: the IANA zone the fields read in (default UTC)."
    )
    start_at: Instant | None = Field(default=None, description="No tick before (RFC 3339).")
    end_at: Instant | None = Field(default=None, description="No tick after (RFC 3339).")
    max_runs: Annotated[StrictInt, Field(ge=1, le=2**31 - 1)] | None = Field(
        default=None, description="No tick once this many have run."
    )
    concurrency_policy: Literal["Forbid", "Allow", "Replace"] = Field(
        default="Forbid",
        description="While an earlier tick's run is active: Forbid (the tick waits), Allow "
        "(both run), Replace (the earlier run is stopped, StoppedInRepo).",
    )
    starting_deadline: PlainDuration | None = Field(
        default=None,
        description="A tick not dispatched this long after its time is skipped (a reconciler "
        "that was down catches up at most one tick, within it).",
    )

    @field_validator("end_at")
    @classmethod
    def _ends_after_start(cls, value: str | None, info: ValidationInfo) -> str | None:
        start = info.data.get("start_at")
        if value is not None and start is not None:
            begin, end = parse_instant(start), parse_instant(value)
            if begin is not None and end is not None and end <= begin:
                raise ValueError(f"endAt {value} is not after startAt {start}")
        return value

    @model_validator(mode="after")
    def _fields_of_kind(self) -> Schedule:
        if self.kind == "cron":
            if self.cron is None:
                raise ValueError("a cron schedule needs 'cron'")
            if self.frequency is not None:
                raise ValueError("a cron schedule has no 'frequency' (that is kind: interval)")
        else:
            if self.frequency is None:
                raise ValueError("an interval schedule needs 'frequency'")
            if self.cron is not None or self.timezone is not None:
                raise ValueError(
                    "an interval schedule has no 'cron' or 'timezone' (it counts from startAt)"
                )
        return self


# --- kinds ----------------------------------------------------------------------------


class OperationFile(Strict):
    """``projects/<p>/operations/<name>.yaml``"""

    kind: Literal["Operation"]
    name: Name | None = None
    description: StrictStr | None = None
    namespace: StrictStr | None = Field(
        default=None, description="Not allowed: the namespace is always the project's."
    )
    queue: Name | None = None
    presets: list[Name] | None = None
    generation: Annotated[StrictInt, Field(ge=1, le=2**31 - 1)] = 1
    is_approved: StrictBool = True
    priority: OperationPriority | None = Field(
        default=None,
        description="Rank inside its queue (0..1000, default 0): higher is considered first, "
        "then commit order. At most policy.maxOperationPriority. Never preempts.",
    )
    stopped: StrictBool = Field(
        default=False,
        description="Stop it (a workflow: all its children): an active run is deleted "
        "(StoppedInRepo), a pending one is not dispatched. false and a generation bump run it "
        "again.",
    )
    run: Run | None = None
    matrix: Matrix | None = None
    dag: Dag | None = None
    notifications: Notifications | None = Field(
        default=None,
        description="Webhooks told of its phase changes, besides the org's and project's.",
    )
    schedule: Schedule | None = Field(
        default=None,
        description="Run it on a schedule: each fire time makes a run of its own "
        '(docs/dispatch.md, "Schedules").',
    )

    @model_validator(mode="after")
    def _one_workflow(self) -> OperationFile:
        if self.matrix is not None and self.dag is not None:
            raise ValueError("an operation has either 'matrix' or 'dag', not both")
        return self


class PresetFile(Strict):
    """``presets/<name>.yaml`` or ``projects/<p>/presets/<name>.yaml``"""

    kind: Literal["Preset"]
    name: Name | None = None
    description: StrictStr | None = None
    patch_strategy: PatchStrategy = MergeStrategy.POST_MERGE
    namespace: StrictStr | None = Field(
        default=None, description="Not allowed: the namespace is always the project's."
    )
    queue: Name | None = None
    priority: OperationPriority | None = Field(
        default=None, description="The operations' rank inside their queue (0..1000)."
    )
    run: Run | None = None
    connections: list[Name] | None = Field(
        default=None, description="Shorthand for run.connections."
    )

    @model_validator(mode="after")
    def _one_connections(self) -> PresetFile:
        if self.connections is not None and self.run and self.run.connections is not None:
            raise ValueError("set 'connections' or 'run.connections', not both")
        return self


class ProjectDefaults(Strict):
    queue: Name | None = None
    outputs: Name | None = Field(
        default=None, description="run.outputs of operations that set none (after presets)."
    )
    priority: OperationPriority | None = Field(
        default=None, description="The priority of operations that set none (after presets)."
    )
    presets: list[Name] | None = None


class ProjectFile(Strict):
    """``projects/<p>/project.yaml``"""

    kind: Literal["Project"]
    name: Name | None = None
    description: StrictStr | None = None
    namespace: Name | None = Field(default=None, description="Defaults to the project name.")
    allowed_queues: list[Name] | None = None
    defaults: ProjectDefaults | None = None
    notifications: Notifications | None = Field(
        default=None, description="Webhooks told of its operations' phase changes."
    )


Price = Annotated[
    StrictInt | StrictFloat,
    Field(ge=0, le=10**12, description="Price of one unit-hour (memory: one GiB-hour)."),
]
PriceList = dict[ResourceName, Price]


def _budget_resource(value: str) -> str:
    if value == "cost":
        return value
    if not value.endswith("-hours") or value == "-hours":
        raise ValueError(
            f"{_show(value)} is not a budget resource: use 'cost' or '<resource>-hours' "
            "(e.g. 'nvidia.com/gpu-hours', 'cpu-hours', 'memory-hours')"
        )
    _resource_name(value.removesuffix("-hours"))
    return value


BudgetResource = Annotated[StrictStr, AfterValidator(_budget_resource)]


class Budget(Strict):
    limit: Annotated[StrictInt | StrictFloat, Field(gt=0, le=10**15)] = Field(
        description="At most this much per window: money in the org's currency, or hours."
    )
    per: Literal["day", "week", "month"] = Field(
        description="The calendar window (in the org's timezone; weeks start on Monday)."
    )
    resource: BudgetResource = Field(
        default="cost",
        description="'cost' (prices x requests x hours) or '<resource>-hours', e.g. "
        "'nvidia.com/gpu-hours' (memory in GiB-hours).",
    )


class QueueFlavorEntry(Strict):
    """One entry of a queue's ``flavors``: its quota of that flavor (the list order is the
    fallback order)."""

    name: Name = Field(description="The flavor (flavors/<name>.yaml).")
    quota: dict[ResourceName, Quantity] = Field(
        description="The queue's quota of this flavor, per resource."
    )
    borrowing_limit: dict[ResourceName, Quantity] | None = Field(
        default=None,
        description="Per resource, how much of this flavor above its quota the queue may "
        "borrow from its cohort (default: nothing).",
    )
    lending_limit: dict[ResourceName, Quantity] | None = Field(
        default=None,
        description="Per resource, at most how much of its unused quota of this flavor the "
        "queue lends to its cohort (default: all of it).",
    )
    cluster_quota: dict[Name, dict[ResourceName, Quantity]] | None = Field(
        default=None,
        description="A fleet queue's cap of this flavor per cluster: cluster -> resource -> "
        "amount.",
    )


FairWeight = Annotated[
    StrictInt | StrictFloat,
    Field(gt=0, le=10**6, description="A larger weight borrows a larger share; default 1."),
]


class FairSharing(Strict):
    weight: FairWeight = 1


class QueueFile(Strict):
    """``queues/<name>.yaml``"""

    kind: Literal["Queue"]
    name: Name | None = None
    description: StrictStr | None = None
    cluster: Name | None = Field(
        default=None, description="The cluster the queue dispatches to (or set 'clusters')."
    )
    clusters: Annotated[list[Name], Field(min_length=1)] | None = Field(
        default=None,
        description="A fleet queue: the clusters it may dispatch to, in choice order "
        "(instead of 'cluster'). Quota and concurrency are then fleet-wide.",
    )
    cluster_quota: dict[Name, dict[ResourceName, Quantity]] | None = Field(
        default=None,
        description="A fleet queue's cap per cluster: cluster -> resource -> amount.",
    )
    require_capacity: StrictBool = Field(
        default=False,
        description="A fleet queue holds an operation no cluster has the free capacity for "
        "(NoClusterHasCapacity) instead of sending it to the first cluster under quota.",
    )
    priority: Int32 = 0
    concurrency: Count | None = None
    quota: dict[ResourceName, Quantity] | None = None
    kinds: Annotated[list[Kind], Field(min_length=1)] | None = None
    strategy: Literal["BestEffortFIFO", "StrictFIFO"] = "BestEffortFIFO"
    paused: StrictBool = False
    max_pods: Count | None = Field(
        default=None,
        description="Most pods the queue's active operations may have, counting every replica.",
    )
    start_timeout: Duration | None = Field(
        default=None,
        description="A distributed operation whose pods are not all running this long after "
        "dispatch is stopped and re-queued once (GangTimeout). Seconds or e.g. '10m'.",
    )
    cohort: Name | None = Field(
        default=None,
        description="The cohort (cohorts/<name>.yaml) whose queues lend each other unused quota.",
    )
    borrowing_limit: dict[ResourceName, Quantity] | None = Field(
        default=None,
        description="Per quota resource, how much above its quota the queue may borrow from "
        "its cohort (default: nothing).",
    )
    lending_limit: dict[ResourceName, Quantity] | None = Field(
        default=None,
        description="Per quota resource, at most how much of its unused quota the queue lends "
        "to its cohort (default: all of it).",
    )
    budget: Budget | None = Field(
        default=None,
        description="Dispatch only while spent + committed + the op's reservation fits "
        "(docs/budgets.md). Every op needs a timeout, or set defaultTimeout.",
    )
    default_timeout: Duration | None = Field(
        default=None, description="run.timeout for operations of this queue that set none."
    )
    flavors: Annotated[list[QueueFlavorEntry], Field(min_length=1, max_length=64)] | None = Field(
        default=None,
        description="The quota per flavor (GPU type), instead of 'quota'; an operation gets "
        "the first flavor, in this order, that it may use and that fits.",
    )
    fair_sharing: FairSharing | None = Field(
        default=None,
        description="How this queue shares what its cohort lends: the next borrower is the "
        "queue with the lowest borrowed share divided by its weight.",
    )


class FlavorFile(Strict):
    """``flavors/<name>.yaml``"""

    kind: Literal["Flavor"]
    name: Name | None = None
    description: StrictStr | None = None
    node_labels: Annotated[dict[LabelKey, LabelValue], Field(max_length=64)] | None = Field(
        default=None,
        description="The labels of this flavor's nodes; an operation assigned the flavor "
        "gets them as its nodeSelector.",
    )
    tolerations: list[Toleration] | None = Field(
        default=None, description="Added to the pod of every operation assigned this flavor."
    )


FlavorPriceList = dict[Name, PriceList]


class CohortFile(Strict):
    """``cohorts/<name>.yaml``"""

    kind: Literal["Cohort"]
    name: Name | None = None
    description: StrictStr | None = None
    max_borrow_duration: PlainDuration = Field(
        description="Only an operation whose timeout is at most this long may borrow: a "
        "lender gets its quota back within it. Seconds (int) or a duration such as '2h'."
    )
    quota: dict[ResourceName, Quantity] | None = Field(
        default=None, description="A cap on the total use of the cohort's queues."
    )


class KubeconfigSecret(Strict):
    name: Name
    namespace: Name | None = None
    key: NonEmptyStr = "kubeconfig"


class Kubeconfig(Strict):
    path: HostFile | None = Field(
        default=None, description="A kubeconfig file on the reconciler's host ('~' expands)."
    )
    secret: KubeconfigSecret | None = None
    in_cluster: Literal[True] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Kubeconfig:
        if sum(x is not None for x in (self.path, self.secret, self.in_cluster)) != 1:
            raise ValueError("set exactly one of 'path', 'secret' or 'inCluster: true'")
        return self


class ClusterFile(Strict):
    """``clusters/<name>.yaml``"""

    kind: Literal["Cluster"]
    name: Name | None = None
    description: StrictStr | None = None
    kubeconfig: Kubeconfig
    context: NonEmptyStr | None = None
    concurrency: Count | None = None
    prices: PriceList | None = Field(
        default=None, description="Prices here, instead of reconciler.yaml's for these resources."
    )
    flavor_prices: FlavorPriceList | None = Field(
        default=None,
        description="Per flavor, prices here of an operation assigned that flavor.",
    )


class VolumeSource(Strict):
    claim_name: Name | None = None
    host_path: AbsPath | None = None
    mount_path: AbsPath
    sub_path: RelPath | None = None
    read_only: StrictBool = False

    @model_validator(mode="after")
    def _exactly_one(self) -> VolumeSource:
        if (self.claim_name is None) == (self.host_path is None):
            raise ValueError("set exactly one of 'claimName' or 'hostPath'")
        return self


class ObjectSource(Strict):
    name: Name
    mount_path: AbsPath | None = None
    env_from: StrictBool = False

    @model_validator(mode="after")
    def _injects(self) -> ObjectSource:
        if self.mount_path is None and not self.env_from:
            raise ValueError("set 'mountPath', 'envFrom: true', or both")
        return self


class BucketSource(Strict):
    url: Annotated[StrictStr, AfterValidator(_bucket_url)]
    secret: Name | None = Field(default=None, description="Credentials, injected with envFrom.")
    env: dict[EnvName, StrictStr] | None = None
    url_env: EnvName = "BUCKET_URL"


class GitSource(Strict):
    url: NonEmptyStr
    revision: NonEmptyStr = "HEAD"
    mount_path: AbsPath = "/code"
    secret: Name | None = None


CONNECTION_TYPES = ("volume", "secret", "configMap", "bucket", "git")


class ConnectionFile(Strict):
    """``connections/<name>.yaml``: exactly one source."""

    kind: Literal["Connection"]
    name: Name | None = None
    description: StrictStr | None = None
    volume: VolumeSource | None = None
    secret: ObjectSource | None = None
    config_map: ObjectSource | None = None
    bucket: BucketSource | None = None
    git: GitSource | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ConnectionFile:
        set_ = [t for t in CONNECTION_TYPES if getattr(self, to_snake(t)) is not None]
        if len(set_) != 1:
            raise ValueError(f"set exactly one of {', '.join(CONNECTION_TYPES)}")
        return self

    @property
    def type(self) -> str:
        return next(t for t in CONNECTION_TYPES if getattr(self, to_snake(t)) is not None)


class OrgDefaults(Strict):
    queue: Name | None = None
    outputs: Name | None = Field(
        default=None,
        description="run.outputs of operations that set none (after the project's default).",
    )
    presets: list[Name] | None = Field(
        default=None,
        description="Org presets applied to every operation, before the project's defaults.",
    )


class SignedCommits(Strict):
    allowed_signers: RelPath = Field(
        description="Path in the repo of an SSH allowed-signers file (ssh-keygen(1), "
        "ALLOWED SIGNERS): the keys that may sign a config commit."
    )


class Policy(Strict):
    allowed_queues: list[Name] | None = None
    max_resources: dict[ResourceName, Quantity] | None = Field(
        default=None,
        description="Largest total request per operation, per resource, counted over all its "
        "replicas (run.replicas x the pod's request).",
    )
    allowed_scheduler_names: list[NonEmptyStr] | None = None
    allowed_priority_classes: list[PriorityClass] | None = Field(
        default=None,
        description="priorityClassName values operations may use; default none (the "
        "cluster's default applies). system-* is never allowed.",
    )
    pod_security: Literal["baseline", "restricted", "privileged"] = Field(
        default="baseline",
        description="The Kubernetes Pod Security Standards profile every rendered pod must meet.",
    )
    allow_privileged: StrictBool = False
    allow_host_path: StrictBool = False
    allowed_capabilities: list[NonEmptyStr] | None = Field(
        default=None,
        description="Capabilities a container may add; default the Pod Security baseline set.",
    )
    allow_run_as_root: StrictBool = Field(
        default=True, description="false refuses runAsUser: 0 and runAsNonRoot: false."
    )
    allow_shared_namespaces: StrictBool = Field(
        default=False,
        description="Let two projects name the same namespace (workload names must still "
        "be unique).",
    )
    allowed_service_accounts: list[SubdomainName] | None = Field(
        default=None,
        description="Service accounts run.environment.serviceAccountName may name; "
        "default only the namespace's 'default'.",
    )
    allowed_image_pull_secrets: list[SubdomainName] | None = Field(
        default=None, description="Secrets imagePullSecrets may name; default any."
    )
    allowed_volume_types: list[VolumeType] | None = Field(
        default=None, description="Volume types run.volumes may use; default all four."
    )
    max_retries: Count = Field(default=6, description="Largest run.maxRetries.")
    max_operation_priority: OperationPriority = Field(
        default=MAX_OPERATION_PRIORITY, description="Largest priority an operation may have."
    )
    max_replicas: Annotated[StrictInt, Field(ge=1, le=MAX_REPLICAS)] | None = Field(
        default=None, description="Largest run.replicas; default no limit but Kubernetes'."
    )
    min_ttl: Ttl = Field(
        default=3600,
        description="Shortest run.ttl: the reconciler must see a Job finish before it is deleted.",
    )
    require_signed_commits: SignedCommits | None = Field(
        default=None,
        description="Refuse whole a config commit not signed by a key of allowedSigners, as "
        "of the last good config (docs/reliability.md).",
    )


class Prune(Strict):
    enabled: StrictBool = False
    max_fraction: Annotated[float, Field(gt=0, le=1)] = 0.5
    allow_mass_prune: StrictBool = False


class StatusRetention(Strict):
    """How much of the status branch's history the reconciler keeps (``run
    --status-keep-days``, ``--status-max-commits``): what is older is squashed."""

    keep_days: Annotated[int, Field(gt=0, strict=True)] | None = None
    max_commits: Annotated[int, Field(ge=2, strict=True)] | None = None


class Status(Strict):
    branch: NonEmptyStr = "reconciler/status"
    repo: NonEmptyStr | None = Field(
        default=None,
        description="The repo (a URL or a path) the status branch is pushed to and read "
        "from, instead of the config repo (run --status-repo).",
    )
    retention: StatusRetention | None = None


class OrgFile(Strict):
    """``reconciler.yaml`` at the repo root."""

    kind: Literal["Org"]
    name: Name | None = None
    description: StrictStr | None = None
    defaults: OrgDefaults | None = None
    policy: Policy | None = None
    prune: Prune | None = None
    status: Status | None = None
    prices: PriceList | None = Field(
        default=None,
        description="Price of one unit-hour per resource (memory per GiB-hour), for budgets.",
    )
    flavor_prices: FlavorPriceList | None = Field(
        default=None,
        description="Per flavor, the price of one unit-hour of an operation assigned that "
        "flavor (an H100-hour costs more than an A100-hour); over 'prices'.",
    )
    currency: Annotated[StrictStr, Field(min_length=1, max_length=16)] | None = Field(
        default=None, description="The label of prices and cost budgets, e.g. USD."
    )
    timezone: Annotated[StrictStr, AfterValidator(_timezone)] | None = Field(
        default=None, description="IANA zone of budget windows (default UTC)."
    )
    notifications: Notifications | None = Field(
        default=None, description="Webhooks told of every operation's phase changes."
    )
    commit_status: CommitStatus | None = Field(
        default=None, description="Report each applied config commit to GitHub or GitLab."
    )
    web_url: HttpUrl | None = Field(
        default=None,
        description="The base URL of the reconciler's pages (reconciler serve), linked from "
        "notifications and commit statuses.",
    )


@functools.lru_cache(maxsize=256)  # a handful of names, asked per operation and connection
def to_snake(camel: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", camel).lower()


KINDS: dict[str, type[Strict]] = {
    "Org": OrgFile,
    "Cluster": ClusterFile,
    "Connection": ConnectionFile,
    "Queue": QueueFile,
    "Cohort": CohortFile,
    "Flavor": FlavorFile,
    "Preset": PresetFile,
    "Project": ProjectFile,
    "Operation": OperationFile,
}


def json_schemas() -> dict[str, dict[str, Any]]:
    """JSON Schema (draft 2020-12) for every kind, keyed by kind."""
    out: dict[str, dict[str, Any]] = {}
    for kind, model in KINDS.items():
        schema = model.model_json_schema(by_alias=True)
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["title"] = kind
        out[kind] = schema
    return out


def suggest(name: str, allowed: typing.Sequence[str]) -> str | None:
    """The allowed field ``name`` most likely meant: its camelCase spelling
    (``is_approved``, ``is-approved``, ``IsApproved`` -> ``isApproved``), else the closest."""
    folded = {_fold(a): a for a in allowed}
    if _fold(name) in folded:
        return folded[_fold(name)]
    close = difflib.get_close_matches(name, allowed, n=1)
    if close:
        return close[0]
    close = difflib.get_close_matches(_fold(name), list(folded), n=1)
    return folded[close[0]] if close else None


def _fold(name: str) -> str:
    return re.sub(r"[-_\s]", "", name).lower()


def field_names(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str] | None:
    """The YAML field names allowed at ``loc`` inside ``model`` (for "did you mean")."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or not (
            isinstance(current, type) and issubclass(current, BaseModel)
        ):
            if isinstance(part, int):
                continue
            return None
        info = next((f for n, f in current.model_fields.items() if (f.alias or n) == part), None)
        if info is None:
            return None
        current = _unwrap(info.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return None


def _unwrap(annotation: Any) -> Any:
    """The model inside ``X | None``, ``list[X]`` or ``Annotated[X, ...]``, if any."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(annotation):
            inner = _unwrap(arg)
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner
        return None
    if origin is list:
        return _unwrap(typing.get_args(annotation)[0])
    return annotation
