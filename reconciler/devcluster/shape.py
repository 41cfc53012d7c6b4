"""The shape of the fake node fleet: pools of identical kwok nodes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reconciler.core.load import parse_yaml
from reconciler.core.quantity import QuantityError, parse_quantity

GPU_RESOURCE = "nvidia.com/gpu"
# The product label NVIDIA GPU feature discovery sets, so presets written for real
# clusters select the fake nodes too.
GPU_PRODUCTS = {
    "a100": "NVIDIA-A100-SXM4-80GB",
    "h100": "NVIDIA-H100-80GB-HBM3",
    "h200": "NVIDIA-H200-141GB-HBM3",
    "l4": "NVIDIA-L4",
    "t4": "Tesla-T4",
}


class ShapeError(ValueError):
    """The node shape file is invalid."""


class _Taint(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str
    value: str = ""
    effect: str = Field(pattern="^(NoSchedule|PreferNoSchedule|NoExecute)$")


class _Pool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=50)
    count: int = Field(ge=0, le=5000)
    cpu: str = "32"
    memory: str = "128Gi"
    pods: int = Field(default=110, ge=1)
    gpus: int = Field(default=0, ge=0)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[_Taint] = Field(default_factory=list)


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pools: list[_Pool]


@dataclass(frozen=True)
class NodePool:
    name: str
    count: int
    cpu: str = "32"
    memory: str = "128Gi"
    pods: int = 110
    gpus: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()

    def node_names(self) -> list[str]:
        return [f"kwok-{self.name}-{i}" for i in range(self.count)]

    def manifest(self, node_name: str) -> dict[str, Any]:
        """A Node managed by kwok. No NoSchedule taint, so the real scheduler places pods."""
        resources: dict[str, str] = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods)}
        if self.gpus:
            resources[GPU_RESOURCE] = str(self.gpus)
        labels = {
            "kubernetes.io/hostname": node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            "reconciler.dev/pool": self.name,
            **self.labels,
        }
        spec: dict[str, Any] = {}
        if self.taints:
            spec["taints"] = [dict(t) for t in self.taints]
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node_name,
                "labels": labels,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": spec,
            "status": {"capacity": resources, "allocatable": dict(resources)},
        }


DEFAULT_GPU_PRODUCTS = ("h100", "a100")


def default_shape(
    gpu_nodes: int = 2,
    gpus_per_node: int = 4,
    gpu_types: tuple[str, ...] = DEFAULT_GPU_PRODUCTS,
    cpu_nodes: int = 2,
) -> tuple[NodePool, ...]:
    """One pool of ``gpu_nodes`` GPU nodes per GPU product in ``gpu_types`` (pool and
    ``gpu.type`` label the product's short name: ``kwok-h100-0``), then the CPU pool. By
    default two products, 2 H100 and 2 A100 nodes of 4 GPUs each, so a queue can give its
    quota per flavor (GPU product) and fall back from one to the other."""
    return (
        *(gpu_pool(t, gpu_nodes, gpus_per_node, t) for t in gpu_types),
        NodePool(name="cpu", count=cpu_nodes, cpu="32", memory="128Gi"),
    )


def gpu_pool(name: str, count: int, gpus_per_node: int, gpu_type: str) -> NodePool:
    """A pool of identical GPU nodes labelled like NVIDIA feature discovery labels them."""
    return NodePool(
        name=name,
        count=count,
        cpu="64",
        memory="512Gi",
        gpus=gpus_per_node,
        labels={
            "gpu.type": gpu_type,
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": GPU_PRODUCTS.get(gpu_type, gpu_type),
            "node.kubernetes.io/instance-type": f"{gpu_type}-x{gpus_per_node}",
        },
    )


# The pool of the ``gang`` shape: its nodes are told apart from the default H100 nodes by
# their pool label (both carry the H100 product label), so a distributed run selects them
# with ``reconciler.dev/pool: gang``.
GANG_POOL = "gang"

# Named shapes for ``dev-cluster up --named-shape``. ``gang`` adds four 8-GPU H100 nodes
# (pool ``gang``, 32 GPUs) to the default fleet: a distributed run of up to 4 x 8 GPUs
# fits, one pod asking for 9 GPUs or a fifth 8-GPU pod does not, and the default pools
# stay for the presets and flavors written for them.
NAMED_SHAPES: dict[str, str] = {
    "default": "2 GPU nodes x 4 h100 and 2 x 4 a100 (pools h100, a100), 2 CPU nodes",
    "gang": "the default fleet plus 4 GPU nodes x 8 h100 (pool gang) for distributed runs",
}


def named_shape(name: str) -> tuple[NodePool, ...]:
    if name == "default":
        return default_shape()
    if name == "gang":
        return (*default_shape(), gpu_pool(GANG_POOL, 4, 8, "h100"))
    raise ShapeError(f"unknown shape {name!r}: one of {', '.join(sorted(NAMED_SHAPES))}")


def load_shape(path: Path) -> tuple[NodePool, ...]:
    """Read a shape file: ``pools: [{name, count, cpu, memory, gpus, labels, taints}]``.
    Errors are ``file:line:col: message`` (the config loader's strict YAML and locations)."""
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise ShapeError(f"{path}:0:0: cannot read: {exc.strerror or exc}") from exc
    doc, errors = parse_yaml(str(path), content)
    if doc is None:
        raise ShapeError(f"{errors[0]} (invalid YAML)")
    try:
        shape = _Shape.model_validate(doc.data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = doc.loc(tuple(first["loc"]))
        loc = ".".join(str(p) for p in first["loc"])
        raise ShapeError(f"{where}: {loc}: {first['msg']}") from exc
    seen: set[str] = set()
    for i, pool in enumerate(shape.pools):
        for field_name in ("cpu", "memory"):
            try:
                parse_quantity(getattr(pool, field_name))
            except QuantityError as exc:
                raise ShapeError(f"{doc.loc(('pools', i, field_name))}: {exc}") from exc
        if pool.name in seen:
            raise ShapeError(f"{doc.loc(('pools', i, 'name'))}: pool names must be unique")
        seen.add(pool.name)
    return tuple(
        NodePool(
            name=p.name,
            count=p.count,
            cpu=p.cpu,
            memory=p.memory,
            pods=p.pods,
            gpus=p.gpus,
            labels=dict(p.labels),
            taints=tuple(t.model_dump() for t in p.taints),
        )
        for p in shape.pools
    )
