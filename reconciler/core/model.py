"""Schema models for every kind of file in the config repo (pydantic v2).

Unknown fields are forbidden, types are strict (``"3"`` is not an int), names are
DNS-1123 labels and resource amounts are Kubernetes quantities. The models validate;
the compiler works on the plain data so that provenance can follow every leaf.
"""

from __future__ import annotations

import enum
import re
import types
import typing
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetPydanticSchema,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import core_schema

from reconciler.core.quantity import QuantityError, parse_quantity
from reconciler.core.quantity import short_repr as _show
from reconciler.core.types import MergeStrategy

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_QUANTITY_PATTERN = r"^[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d{1,3})?$"
_DURATION = re.compile(r"^(?=\d)(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")

KIND_NAMES = ("job", "notebook", "sandbox", "batch")


def _dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(
            f"{_show(value)} is not a valid name: use at most 63 lowercase letters, digits and "
            "'-', starting and ending with a letter or digit (DNS-1123 label)"
        )
    return value


def _qualified(value: str, what: str) -> str:
    prefix, _, name = value.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise ValueError(f"{_show(value)} is not a valid {what}: bad prefix {prefix!r}")
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        raise ValueError(f"{_show(value)} is not a valid {what}")
    return value


def _label_key(value: str) -> str:
    return _qualified(value, "label key")


def _resource_name(value: str) -> str:
    return _qualified(value, "resource name")


def _label_value(value: str) -> str:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise ValueError(f"{_show(value)} is not a valid label value (at most 63 characters)")
    return value


def _env_name(value: str) -> str:
    if not _ENV_NAME.match(value):
        raise ValueError(f"{_show(value)} is not a valid environment variable name")
    return value


def _param_name(value: str) -> str:
    if not _PARAM_NAME.match(value):
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
    if not _BUCKET_URL.match(value):
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


def _duration(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"{_show(value)} is not a duration (e.g. 90, '30m', '2h', '1h30m')")
    if isinstance(value, int):
        if value < 1:
            raise ValueError("timeout must be at least 1 second")
        return value
    if not _DURATION.match(value):
        raise ValueError(f"{_show(value)} is not a duration (e.g. 90, '30m', '2h', '1h30m')")
    return value


def duration_seconds(value: str | int) -> int:
    """Seconds in a validated timeout (an int, or ``1h30m``-style)."""
    if isinstance(value, int):
        return value
    match = _DURATION.match(value)
    assert match is not None
    h, m, s = (int(g) if g else 0 for g in match.groups())
    return h * 3600 + m * 60 + s


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
        {"anyOf": [{"type": "string", "pattern": _DURATION.pattern}, {"type": "integer"}]}
    ),
]
Scalar = StrictStr | StrictInt | StrictFloat | StrictBool
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
    model_config = ConfigDict(
        extra="forbid", strict=True, alias_generator=to_camel, populate_by_name=True
    )


# --- run ------------------------------------------------------------------------------


class Resources(Strict):
    requests: dict[ResourceName, Quantity] | None = None
    limits: dict[ResourceName, Quantity] | None = None


class Capabilities(Strict):
    add: list[StrictStr] | None = None
    drop: list[StrictStr] | None = None


class SecurityContext(Strict):
    privileged: StrictBool | None = None
    allow_privilege_escalation: StrictBool | None = None
    run_as_user: Annotated[StrictInt, Field(ge=0)] | None = None
    run_as_group: Annotated[StrictInt, Field(ge=0)] | None = None
    run_as_non_root: StrictBool | None = None
    read_only_root_filesystem: StrictBool | None = None
    capabilities: Capabilities | None = None


class Container(Strict):
    image: NonEmptyStr | None = None
    command: list[StrictStr] | None = None
    args: list[StrictStr] | None = None
    env: dict[EnvName, StrictStr] | None = None
    working_dir: AbsPath | None = None
    resources: Resources | None = None
    security_context: SecurityContext | None = None
    shm_size: Quantity | None = Field(
        default=None, description="Size of a memory-backed /dev/shm (e.g. 16Gi)."
    )


class Toleration(Strict):
    key: StrictStr | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: StrictStr | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: StrictInt | None = None


class Environment(Strict):
    node_selector: dict[LabelKey, LabelValue] | None = None
    tolerations: list[Toleration] | None = None
    affinity: dict[Literal["nodeAffinity", "podAffinity", "podAntiAffinity"], Any] | None = None
    scheduler_name: NonEmptyStr | None = None
    priority_class_name: NonEmptyStr | None = None
    labels: dict[LabelKey, LabelValue] | None = None
    annotations: dict[LabelKey, StrictStr] | None = None


class Run(Strict):
    kind: Kind | None = None
    container: Container | None = None
    environment: Environment | None = None
    connections: list[Name] | None = None
    timeout: Duration | None = Field(
        default=None, description="Seconds (int) or a duration such as '30m' or '2h'."
    )


# --- workflows ------------------------------------------------------------------------


class Matrix(Strict):
    kind: Literal["grid"] = "grid"
    concurrency: Annotated[StrictInt, Field(ge=1, le=2**31 - 1)] | None = None
    params: Annotated[
        dict[ParamName, Annotated[list[Scalar], Field(min_length=1)]], Field(min_length=1)
    ]


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
    run: Run | None = None
    matrix: Matrix | None = None
    dag: Dag | None = None

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
    presets: list[Name] | None = None


class ProjectFile(Strict):
    """``projects/<p>/project.yaml``"""

    kind: Literal["Project"]
    name: Name | None = None
    description: StrictStr | None = None
    namespace: Name | None = Field(default=None, description="Defaults to the project name.")
    allowed_queues: list[Name] | None = None
    defaults: ProjectDefaults | None = None


class QueueFile(Strict):
    """``queues/<name>.yaml``"""

    kind: Literal["Queue"]
    name: Name | None = None
    description: StrictStr | None = None
    cluster: Name
    priority: Int32 = 0
    concurrency: Count | None = None
    quota: dict[ResourceName, Quantity] | None = None
    kinds: Annotated[list[Kind], Field(min_length=1)] | None = None
    strategy: Literal["BestEffortFIFO", "StrictFIFO"] = "BestEffortFIFO"
    paused: StrictBool = False


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


class Policy(Strict):
    allowed_queues: list[Name] | None = None
    max_resources: dict[ResourceName, Quantity] | None = Field(
        default=None, description="Largest total request per operation, per resource."
    )
    allowed_scheduler_names: list[NonEmptyStr] | None = None
    allow_privileged: StrictBool = False
    allow_host_path: StrictBool = False
    allowed_capabilities: list[NonEmptyStr] | None = Field(
        default=None,
        description="Capabilities a container may add; default the Pod Security baseline set.",
    )
    allow_run_as_root: StrictBool = Field(
        default=True, description="false refuses runAsUser: 0 and runAsNonRoot: false."
    )


class Prune(Strict):
    enabled: StrictBool = False
    max_fraction: Annotated[float, Field(gt=0, le=1, strict=False)] = 0.5
    allow_mass_prune: StrictBool = False


class Status(Strict):
    branch: NonEmptyStr = "reconciler/status"


class OrgFile(Strict):
    """``reconciler.yaml`` at the repo root."""

    kind: Literal["Org"]
    name: Name | None = None
    description: StrictStr | None = None
    defaults: OrgDefaults | None = None
    policy: Policy | None = None
    prune: Prune | None = None
    status: Status | None = None


def to_snake(camel: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", camel).lower()


KINDS: dict[str, type[Strict]] = {
    "Org": OrgFile,
    "Cluster": ClusterFile,
    "Connection": ConnectionFile,
    "Queue": QueueFile,
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
