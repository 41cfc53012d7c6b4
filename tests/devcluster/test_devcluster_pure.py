"""Dev-cluster pieces that need no running cluster: shapes, PKI, process records."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from reconciler.devcluster.cluster import DevCluster, ProcessRecord, _start_ticks
from reconciler.devcluster.pki import generate_pki, write_self_signed
from reconciler.devcluster.shape import (
    GPU_RESOURCE,
    ShapeError,
    default_shape,
    load_shape,
    named_shape,
)


def test_default_shape_has_h100_a100_and_cpu_nodes() -> None:
    pools = default_shape()
    manifests = [pool.manifest(name) for pool in pools for name in pool.node_names()]
    gpu = [m for m in manifests if GPU_RESOURCE in m["status"]["allocatable"]]
    products = {
        m["metadata"]["name"]: m["metadata"]["labels"]["nvidia.com/gpu.product"] for m in gpu
    }
    assert products == {
        "kwok-h100-0": "NVIDIA-H100-80GB-HBM3",
        "kwok-h100-1": "NVIDIA-H100-80GB-HBM3",
        "kwok-a100-0": "NVIDIA-A100-SXM4-80GB",
        "kwok-a100-1": "NVIDIA-A100-SXM4-80GB",
    }
    for m in gpu:
        assert m["status"]["capacity"][GPU_RESOURCE] == "4"
        assert m["status"]["allocatable"][GPU_RESOURCE] == "4"
        labels = m["metadata"]["labels"]
        assert labels["gpu.type"] == labels["reconciler.dev/pool"] in {"h100", "a100"}
    assert len(manifests) == 6
    for m in manifests:
        assert m["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
        assert "taints" not in m["spec"]  # the real scheduler must be free to place pods


def test_shape_is_configurable(tmp_path: Path) -> None:
    shape = tmp_path / "shape.yaml"
    shape.write_text(
        "pools:\n"
        "- {name: h100, count: 3, gpus: 8, labels: {gpu.type: h100}}\n"
        "- {name: spot, count: 1, taints: [{key: spot, effect: NoSchedule}]}\n"
    )
    pools = load_shape(shape)
    assert [(p.name, p.count, p.gpus) for p in pools] == [("h100", 3, 8), ("spot", 1, 0)]
    node = pools[1].manifest("kwok-spot-0")
    assert node["spec"]["taints"] == [{"key": "spot", "value": "", "effect": "NoSchedule"}]
    assert default_shape(gpu_nodes=5, gpus_per_node=2)[0].node_names()[-1] == "kwok-h100-4"
    one = default_shape(gpu_nodes=1, gpu_types=("t4",), cpu_nodes=0)
    assert [(p.name, p.count) for p in one] == [("t4", 1), ("cpu", 0)]
    assert one[0].labels["nvidia.com/gpu.product"] == "Tesla-T4"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pools: [{name: a, count: 1, gpus: -1}]", "greater than or equal to 0"),
        ("pools: [{name: Bad_Name, count: 1}]", "pools.0.name"),
        ("pools: [{name: a, count: 1, memory: lots}]", "not a valid quantity"),
        ("pools: [{name: a, count: 1}, {name: a, count: 2}]", "unique"),
        ("pools: [{name: a, count: 1, colour: red}]", "Extra inputs"),
        ("pools: [{name: a, count: 1\n", "invalid YAML"),
    ],
)
def test_bad_shape_files_are_clear_errors(tmp_path: Path, text: str, expected: str) -> None:
    shape = tmp_path / "shape.yaml"
    shape.write_text(text)
    with pytest.raises(ShapeError) as err:
        load_shape(shape)
    assert str(err.value).startswith(f"{shape}:")
    assert expected in str(err.value)


def test_gang_shape_adds_four_8_gpu_nodes_to_the_default_fleet() -> None:
    pools = {p.name: p for p in named_shape("gang")}
    assert set(pools) == {"h100", "a100", "cpu", "gang"}
    gang = pools["gang"]
    assert gang.node_names() == [f"kwok-gang-{i}" for i in range(4)]
    node = gang.manifest("kwok-gang-0")
    assert node["status"]["allocatable"][GPU_RESOURCE] == "8"
    assert node["metadata"]["labels"]["gpu.type"] == "h100"
    assert node["metadata"]["labels"]["reconciler.dev/pool"] == "gang"  # what gang ops select
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert named_shape("default") == default_shape()
    with pytest.raises(ShapeError, match="unknown shape 'dgx': one of default, gang"):
        named_shape("dgx")


def test_named_shape_and_shape_file_exclude_each_other(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from reconciler.cli.main import cli

    shape = tmp_path / "s.yaml"
    shape.write_text("pools: []\n")
    result = CliRunner().invoke(
        cli, ["dev-cluster", "up", "--shape", str(shape), "--named-shape", "gang"]
    )
    assert result.exit_code == 2
    assert "--shape and --named-shape exclude each other" in result.output


def test_pki_chain_and_client_identities(tmp_path: Path) -> None:
    pki = generate_pki(tmp_path, {"admin": ("dev-admin", "system:masters")})
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    serving = x509.load_pem_x509_certificate(pki.serving_cert.read_bytes())
    admin = x509.load_pem_x509_certificate(pki.client_cert("admin").read_bytes())
    for cert in (serving, admin):
        assert cert.issuer == ca.subject
        assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey)
        cert.verify_directly_issued_by(ca)
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "127.0.0.1" in [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    org = admin.subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)
    assert [a.value for a in org] == ["system:masters"]
    assert oct(pki.sa_key.stat().st_mode & 0o777) == "0o600"
    assert pki.sa_pub.read_text().startswith("-----BEGIN PUBLIC KEY-----")


def test_self_signed_serving_cert_for_a_local_webhook(tmp_path: Path) -> None:
    write_self_signed(tmp_path / "certs", "kueue-bench")
    cert = x509.load_pem_x509_certificate((tmp_path / "certs" / "tls.crt").read_bytes())
    key = serialization.load_pem_private_key(
        (tmp_path / "certs" / "tls.key").read_bytes(), password=None
    )
    cert.verify_directly_issued_by(cert)
    assert cert.public_key() == key.public_key()
    assert cert.subject.rfc4514_string() == "CN=kueue-bench"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert oct((tmp_path / "certs" / "tls.key").stat().st_mode & 0o777) == "0o600"


def test_process_record_detects_exit_and_pid_reuse() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ticks = _start_ticks(proc.pid)
        assert ticks is not None
        assert ProcessRecord("sleeper", proc.pid, ticks).alive()
        assert not ProcessRecord("sleeper", proc.pid, ticks + 1).alive()  # a reused pid
    finally:
        proc.kill()
        proc.wait()
    assert not ProcessRecord("sleeper", proc.pid, ticks).alive()
    assert _start_ticks(os.getpid()) is not None


def test_shape_errors_point_at_the_offending_value(tmp_path: Path) -> None:
    shape = tmp_path / "shape.yaml"
    shape.write_text("pools:\n- name: a\n  count: 1\n- name: b\n  count: 2\n  memory: lots\n")
    with pytest.raises(ShapeError) as err:
        load_shape(shape)
    assert str(err.value).startswith(f"{shape}:6:11: ")
    shape.write_text("pools:\n- name: a\n  count: 1\n  gpus: -1\n")
    with pytest.raises(ShapeError) as err:
        load_shape(shape)
    assert str(err.value).startswith(f"{shape}:4:9: pools.0.gpus: ")


def test_cached_binaries_are_where_the_build_puts_them_and_are_not_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reconciler.devcluster import build

    monkeypatch.setenv("RECONCILER_CACHE_DIR", str(tmp_path))
    where = build.cached_binaries()
    assert where.helm.parent.name.startswith(f"helm-{build.HELM_VERSION}-")  # go/helm's hash
    assert where.kwok.parent.name.startswith(f"kwok-{build.KWOK_VERSION}-")  # go/kwok's hash
    assert where.kubectl.parent.name.startswith(f"kubernetes-{build.KUBERNETES_VERSION}-")
    assert set(where.all()) >= {"kubectl", "helm", "kwok", "etcd"}
    # a cached binary is returned as is: go is never run
    for path in where.all().values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    monkeypatch.setattr(
        build, "_go", lambda progress: pytest.fail("go must not run for a cached binary")
    )
    messages: list[str] = []
    assert build.ensure_binaries(progress=messages.append) == where
    assert any(m.startswith(f"helm {build.HELM_VERSION}: cached") for m in messages)
    where.helm.unlink()  # `dev-cluster up` does not need helm: never built there
    assert build.ensure_binaries(progress=messages.append, helm=False).helm == where.helm
    assert not where.helm.exists()


@pytest.mark.parametrize("profiling", [False, True])
def test_profiling_turns_on_go_pprof_in_every_control_plane_component(
    tmp_path: Path, profiling: bool
) -> None:
    """Off by default, as in production; the benches' --pprof turns it on for all four."""
    dev = DevCluster(tmp_path, profiling=profiling)
    bins = SimpleNamespace(
        etcd=Path("etcd"),
        kube_apiserver=Path("kube-apiserver"),
        kube_controller_manager=Path("kube-controller-manager"),
        kube_scheduler=Path("kube-scheduler"),
    )
    ports = {name: 1 for name in ("etcd", "etcd_peer", "apiserver", "kcm", "scheduler")}
    etcd = dev._etcd_args(bins, ports)  # type: ignore[arg-type]
    apiserver = dev._apiserver_args(bins, ports, "http://127.0.0.1:1")  # type: ignore[arg-type]
    kcm = dev._kcm_args(bins, ports)  # type: ignore[arg-type]
    dev._scheduler_args(bins, ports)  # type: ignore[arg-type]
    config = yaml.safe_load((tmp_path / "scheduler-config.yaml").read_text())

    flag = f"--profiling={str(profiling).lower()}"
    assert ("--enable-pprof" in etcd) is profiling
    assert flag in apiserver and flag in kcm
    assert config["enableProfiling"] is profiling
    assert DevCluster(tmp_path).profiling is False
