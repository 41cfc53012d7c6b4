"""The Helm chart (charts/dispatch-reconciler) against the real control plane: lint with its
schema, server-side dry-run of everything it renders, the RBAC it grants checked with
``kubectl auth can-i`` as its ServiceAccount, and a reconcile cycle run with only that
ServiceAccount's rights."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cluster import KubeCluster
from support.helpers import wait_until

from reconciler.core.reporting.status import operation_path
from reconciler.devcluster.build import cached_binaries

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "dispatch-reconciler"
RELEASE = "rec"
SA = "rec-dispatch-reconciler"
LEASE = "rec-dispatch-reconciler"
REPO_URL = "https://git.example.com/org/ml-config.git"

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def helm() -> Run:
    binary = cached_binaries().helm
    if not binary.is_file():
        pytest.skip(f"helm is not built ({binary} missing): run `reconciler dev-cluster build`")

    def run(*args: str, check: bool = True, input: str | None = None) -> Any:
        proc = subprocess.run(
            [str(binary), *args], capture_output=True, text=True, input=input, timeout=120
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
        return proc

    return run


@pytest.fixture(scope="module")
def kubectl(kube_cluster: KubeCluster) -> Run:
    """kubectl from the dev-cluster cache (or PATH, for an external cluster)."""
    built = cached_binaries().kubectl
    binary = str(built) if built.is_file() else shutil.which("kubectl")
    if binary is None:
        pytest.skip("no kubectl: run `reconciler dev-cluster build`")

    def run(*args: str, check: bool = True, input: str | None = None) -> Any:
        proc = subprocess.run(
            [binary, f"--kubeconfig={kube_cluster.kubeconfig}", *args],
            capture_output=True,
            text=True,
            input=input,
            timeout=60,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
        return proc

    return run


def template(helm: Run, namespace: str, *sets: str, show: tuple[str, ...] = ()) -> str:
    args = ["template", RELEASE, str(CHART), "--namespace", namespace]
    args += ["--set", f"repo.url={REPO_URL}"]
    for s in sets:
        args += ["--set", s]
    for path in show:
        args += ["--show-only", path]
    return str(helm(*args).stdout)


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def container(rendered: list[dict[str, Any]]) -> dict[str, Any]:
    deploy = next(d for d in rendered if d["kind"] == "Deployment")
    return dict(deploy["spec"]["template"]["spec"]["containers"][0])


# --- lint and schema --------------------------------------------------------------------


def test_lint_passes_with_a_repo_url_and_strict(helm: Run) -> None:
    out = helm("lint", str(CHART), "--strict", "--set", f"repo.url={REPO_URL}").stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("replicaCount=two", "/replicaCount"),
        ("logFormat=xml", "/logFormat"),
        ("repo.credentials.type=password", "/repo/credentials/type"),
        ("http.port=70000", "/http/port"),
        ("clusters[0].name=Not_A_Name", "/clusters/0/name"),
        ("unknownKey=1", "unknownKey"),
    ],
)
def test_the_schema_rejects_bad_values(helm: Run, value: str, complaint: str) -> None:
    proc = helm("lint", str(CHART), "--set", f"repo.url={REPO_URL}", "--set", value, check=False)
    assert proc.returncode != 0
    assert complaint in proc.stdout + proc.stderr


def test_a_missing_repo_url_or_credential_is_a_clear_error(helm: Run) -> None:
    proc = helm("template", RELEASE, str(CHART), check=False)
    assert proc.returncode != 0 and "repo.url is required" in proc.stderr
    proc = helm(
        "template",
        RELEASE,
        str(CHART),
        "--set",
        f"repo.url={REPO_URL}",
        "--set",
        "repo.credentials.type=ssh",
        check=False,
    )
    assert proc.returncode != 0 and "repo.credentials.ssh.privateKey is required" in proc.stderr
    proc = helm(
        "template",
        RELEASE,
        str(CHART),
        "--set",
        f"repo.url={REPO_URL}",
        "--set",
        "leaderElection.enabled=false",
        check=False,
    )
    assert proc.returncode != 0 and "replicaCount > 1 needs leaderElection" in proc.stderr


# --- what it renders ----------------------------------------------------------------------


SSH_SETS = (
    "repo.url=git@git.example.com:org/ml-config.git",
    "repo.credentials.type=ssh",
    "repo.credentials.ssh.privateKey=-----BEGIN OPENSSH PRIVATE KEY-----",
    "repo.credentials.ssh.knownHosts=git.example.com ssh-ed25519 AAAAC3Nza",
    "clusters[0].name=gpu-east",
    "clusters[0].kubeconfig=apiVersion: v1",
    "clusters[1].name=gpu-west",
    "clusters[1].existingSecret=west-kubeconfig",
    "clusters[1].key=config",
)


def test_deployment_runs_two_leader_elected_replicas_with_remote_clusters(helm: Run) -> None:
    rendered = docs(template(helm, "dispatch", *SSH_SETS))
    deploy = next(d for d in rendered if d["kind"] == "Deployment")
    assert deploy["spec"]["replicas"] == 2
    c = container(rendered)
    args = c["args"]
    assert args[0] == "run"
    for expected in (
        "--repo=git@git.example.com:org/ml-config.git",
        "--status-branch=reconciler/status",
        "--http=0.0.0.0:8080",
        "--leader-elect",
        "--lease-namespace=$(POD_NAMESPACE)",
        f"--lease-name={LEASE}",
        "--identity=$(POD_NAME)",
        "--cache-dir=/var/cache/reconciler/repos",
        "--cluster-kubeconfig=gpu-east=/etc/reconciler/clusters/gpu-east/kubeconfig",
        "--cluster-kubeconfig=gpu-west=/etc/reconciler/clusters/gpu-west/kubeconfig",
    ):
        assert expected in args
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    pod = deploy["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    # every path the container is told about is mounted
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/var/cache/reconciler"]]
    ssh = env["GIT_SSH_COMMAND"]["value"]
    git_dir = volumes[mounts["/etc/reconciler/git"]]["secret"]
    for item in git_dir["items"]:
        assert f"/etc/reconciler/git/{item['path']}" in ssh
    assert git_dir["secretName"] == "rec-dispatch-reconciler-repo"
    projected = volumes[mounts["/etc/reconciler/clusters"]]["projected"]["sources"]
    assert [(s["secret"]["name"], s["secret"]["items"][0]) for s in projected] == [
        (
            "rec-dispatch-reconciler-cluster-gpu-east",
            {"key": "kubeconfig", "path": "gpu-east/kubeconfig"},
        ),
        ("west-kubeconfig", {"key": "config", "path": "gpu-west/kubeconfig"}),
    ]
    secrets = {d["metadata"]["name"] for d in rendered if d["kind"] == "Secret"}
    assert secrets == {"rec-dispatch-reconciler-repo", "rec-dispatch-reconciler-cluster-gpu-east"}
    service = next(d for d in rendered if d["kind"] == "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert not [d for d in rendered if d["kind"] == "ServiceMonitor"]  # off by default


def test_sharding_runs_the_replicas_as_shards_with_their_leases(helm: Run) -> None:
    rendered = docs(template(helm, "dispatch", *SSH_SETS, "sharding.enabled=true"))
    args = container(rendered)["args"]
    assert "--shards" in args and "--leader-elect" not in args
    assert f"--lease-name={LEASE}" in args and "--identity=$(POD_NAME)" in args
    (role,) = [
        d for d in rendered if d["kind"] == "Role" and d["metadata"]["name"] == f"{SA}-leader"
    ]
    # the partitions' Leases are named after the config: not by name, and listed by label
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["create", "get", "update", "list", "delete"],
        }
    ]
    assert [d for d in rendered if d["kind"] == "RoleBinding"]
    alone = docs(
        template(
            helm, "dispatch", *SSH_SETS, "sharding.enabled=true", "leaderElection.enabled=false"
        )
    )
    assert "--shards" in container(alone)["args"]


def test_status_repo_and_retention_values_become_the_run_flags(helm: Run) -> None:
    plain = container(docs(template(helm, "dispatch", *SSH_SETS)))["args"]
    assert not [
        a for a in plain if a.startswith(("--status-repo", "--status-keep", "--status-max"))
    ]
    sets = (
        "repo.statusRepo=git@git.example.com:org/ml-status.git",
        "repo.statusRetention.keepDays=7",
        "repo.statusRetention.maxCommits=5000",
    )
    args = container(docs(template(helm, "dispatch", *SSH_SETS, *sets)))["args"]
    for expected in (
        "--status-repo=git@git.example.com:org/ml-status.git",
        "--status-keep-days=7",
        "--status-max-commits=5000",
    ):
        assert expected in args


def test_service_monitor_when_enabled(helm: Run) -> None:
    rendered = docs(template(helm, "dispatch", "serviceMonitor.enabled=true"))
    monitor = next(d for d in rendered if d["kind"] == "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0] == {
        "port": "http",
        "path": "/metrics",
        "interval": "30s",
        "scrapeTimeout": "10s",
    }


def test_token_credentials_reach_git_through_the_credential_helper(
    helm: Run, tmp_path: Path
) -> None:
    """Run git with the container's environment: it must answer with the Secret's token."""
    rendered = docs(
        template(
            helm, "dispatch", "repo.credentials.type=token", "repo.credentials.token.token=s3cr3t"
        )
    )
    secret = next(d for d in rendered if d["kind"] == "Secret")
    env: dict[str, str] = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    for var in container(rendered)["env"]:
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            assert ref["name"] == secret["metadata"]["name"]
            env[var["name"]] = secret["stringData"][ref["key"]]
        elif "value" in var:
            env[var["name"]] = var["value"]
    assert "s3cr3t" not in " ".join(container(rendered)["args"])  # never in the URL
    proc = subprocess.run(
        ["git", "credential", "fill"],
        input="protocol=https\nhost=git.example.com\npath=org/ml-config.git\n\n",
        env={**env, "GIT_TERMINAL_PROMPT": "0"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "username=x-access-token\n" in proc.stdout
    assert "password=s3cr3t\n" in proc.stdout


def test_everything_rendered_passes_server_side_dry_run(
    helm: Run, kubectl: Run, namespace: str
) -> None:
    manifest = template(helm, namespace, *SSH_SETS, "rbac.createNamespaces=true")
    kinds = sorted(d["kind"] for d in docs(manifest))
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Role",
        "RoleBinding",
        "Secret",
        "Secret",
        "Service",
        "ServiceAccount",
    ]
    out = kubectl("apply", "--dry-run=server", "-f", "-", input=manifest).stdout
    assert f"deployment.apps/{SA} created (server dry run)" in out
    assert f"clusterrole.rbac.authorization.k8s.io/{SA}-{namespace} created (server dry run)" in out
    assert kubectl("get", "deployment", SA, "-n", namespace, check=False).returncode != 0


def test_install_upgrade_and_uninstall_a_release(
    helm: Run, kubectl: Run, kube_cluster: KubeCluster, namespace: str
) -> None:
    kube = ("--kubeconfig", str(kube_cluster.kubeconfig), "--namespace", namespace)
    helm("install", RELEASE, str(CHART), *kube, "--set", f"repo.url={REPO_URL}")
    deploy = json.loads(kubectl("get", "deployment", SA, "-n", namespace, "-o", "json").stdout)
    assert deploy["spec"]["replicas"] == 2
    assert kubectl("get", "role,rolebinding", f"{SA}-leader", "-n", namespace).returncode == 0
    helm("upgrade", RELEASE, str(CHART), *kube, "--reuse-values", "--set", "replicaCount=3")
    deploy = json.loads(kubectl("get", "deployment", SA, "-n", namespace, "-o", "json").stdout)
    assert deploy["spec"]["replicas"] == 3
    status = json.loads(helm("status", RELEASE, *kube, "-o", "json").stdout)
    assert status["version"] == 2 and status["info"]["status"] == "deployed"
    assert "kubectl -n " + namespace + " get lease " + LEASE in status["info"]["notes"]
    helm("uninstall", RELEASE, *kube, "--wait", "--timeout", "60s")
    gone = kubectl("get", "clusterrole", f"{SA}-{namespace}", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


# --- RBAC ---------------------------------------------------------------------------------


@pytest.fixture
def installed_rbac(helm: Run, kubectl: Run, namespace: str) -> Iterator[Callable[..., None]]:
    """Apply the chart's ServiceAccount and RBAC into ``namespace``; cluster-scoped objects
    are deleted afterwards."""

    def install(*sets: str) -> None:
        rbac = template(
            helm,
            namespace,
            *sets,
            show=("templates/serviceaccount.yaml", "templates/rbac.yaml"),
        )
        kubectl("apply", "-f", "-", input=rbac)

    yield install
    name = f"{SA}-{namespace}"
    kubectl("delete", "clusterrolebinding,clusterrole", name, "--ignore-not-found")


ALLOWED = [
    ("create", "jobs.batch", "team-a"),
    ("delete", "jobs.batch", "team-b"),
    ("patch", "jobs.batch", "team-a"),
    ("watch", "jobs.batch", "--all-namespaces"),
    ("list", "pods", "--all-namespaces"),
    ("list", "nodes", None),  # a fleet queue's capacity (read-only)
    ("watch", "nodes", None),
    ("get", "pods/log", "team-a"),
    ("create", "services", "team-a"),
    ("delete", "services", "team-a"),
    ("create", "events", "team-a"),
    ("create", "events.events.k8s.io", "team-b"),
    ("get", "namespaces", None),
    ("list", "namespaces", None),
    ("watch", "namespaces", None),
    ("create", "leases.coordination.k8s.io", "@release"),
    ("get", f"leases.coordination.k8s.io/{LEASE}", "@release"),
    ("update", f"leases.coordination.k8s.io/{LEASE}", "@release"),
]
DENIED = [
    ("delete", "namespaces", None),
    ("create", "namespaces", None),
    ("get", "secrets", "--all-namespaces"),
    ("get", "secrets", "@release"),
    ("list", "secrets", "team-a"),
    ("create", "pods", "team-a"),
    ("patch", "nodes", None),
    ("update", "nodes", None),
    ("delete", "nodes", None),
    ("delete", "pods", "team-a"),
    ("create", "pods/exec", "team-a"),
    ("update", "jobs.batch", "team-a"),
    ("create", "deployments.apps", "@release"),
    ("update", "leases.coordination.k8s.io/other-lease", "@release"),
    ("update", f"leases.coordination.k8s.io/{LEASE}", "default"),
    ("create", "leases.coordination.k8s.io", "default"),
    ("create", "clusterroles.rbac.authorization.k8s.io", None),
    ("create", "rolebindings.rbac.authorization.k8s.io", "@release"),
    ("update", "configmaps", "@release"),
    ("create", "tokenreviews.authentication.k8s.io", None),  # only with auth.mode kubernetes
    ("create", "subjectaccessreviews.authorization.k8s.io", None),
]


def can_i(kubectl: Run, namespace: str, verb: str, resource: str, where: str | None) -> bool:
    args = ["auth", "can-i", f"--as=system:serviceaccount:{namespace}:{SA}", verb, resource]
    if where == "--all-namespaces":
        args.append("--all-namespaces")
    elif where is not None:
        args += ["-n", namespace if where == "@release" else where]
    proc = kubectl(*args, check=False)
    answer = proc.stdout.strip()
    assert answer in ("yes", "no"), proc.stderr
    return answer == "yes"


def test_rbac_matrix_least_privilege(
    installed_rbac: Callable[..., None], kubectl: Run, namespace: str
) -> None:
    installed_rbac()
    wait_until(  # the authorizer sees new bindings through its informers
        lambda: (
            can_i(kubectl, namespace, "update", f"leases.coordination.k8s.io/{LEASE}", "@release")
            and can_i(kubectl, namespace, "create", "jobs.batch", "team-a")
        ),
        timeout=30,
        what="the chart's bindings in effect",
    )
    wrong = [
        f"{verb} {res} ({where}) should be allowed"
        for verb, res, where in ALLOWED
        if not can_i(kubectl, namespace, verb, res, where)
    ]
    wrong += [
        f"{verb} {res} ({where}) should be denied"
        for verb, res, where in DENIED
        if can_i(kubectl, namespace, verb, res, where)
    ]
    assert wrong == []


# run.distributed.backend: pytorchjob (kubectl resolves the resource through discovery:
# the CRD must be installed for it to name it)
PYTORCHJOB_ALLOWED = [
    ("create", "pytorchjobs.kubeflow.org", "team-a"),
    ("get", "pytorchjobs.kubeflow.org", "team-a"),
    ("patch", "pytorchjobs.kubeflow.org", "team-a"),
    ("delete", "pytorchjobs.kubeflow.org", "team-b"),
    ("list", "pytorchjobs.kubeflow.org", "--all-namespaces"),
    ("watch", "pytorchjobs.kubeflow.org", "--all-namespaces"),
]
PYTORCHJOB_DENIED = [
    ("update", "pytorchjobs.kubeflow.org", "team-a"),
    ("deletecollection", "pytorchjobs.kubeflow.org", "team-a"),
]


def test_rbac_pytorchjobs_where_the_crd_is_installed(
    installed_rbac: Callable[..., None],
    kubectl: Run,
    namespace: str,
    pytorchjob_crd_installed: Any,
) -> None:
    installed_rbac()
    wait_until(
        lambda: can_i(kubectl, namespace, "create", "pytorchjobs.kubeflow.org", "team-a"),
        timeout=30,
        what="the chart's bindings in effect",
    )
    wrong = [
        f"{verb} {res} ({where}) should be allowed"
        for verb, res, where in PYTORCHJOB_ALLOWED
        if not can_i(kubectl, namespace, verb, res, where)
    ]
    wrong += [
        f"{verb} {res} ({where}) should be denied"
        for verb, res, where in PYTORCHJOB_DENIED
        if can_i(kubectl, namespace, verb, res, where)
    ]
    assert wrong == []


def test_create_namespaces_value_adds_only_namespace_create(
    installed_rbac: Callable[..., None], kubectl: Run, namespace: str
) -> None:
    installed_rbac()
    wait_until(
        lambda: can_i(kubectl, namespace, "list", "namespaces", None),
        timeout=30,
        what="the chart's bindings in effect",
    )
    assert not can_i(kubectl, namespace, "create", "namespaces", None)
    installed_rbac("rbac.createNamespaces=true")
    wait_until(
        lambda: can_i(kubectl, namespace, "create", "namespaces", None),
        timeout=30,
        what="namespace create granted",
    )
    assert not can_i(kubectl, namespace, "delete", "namespaces", None)
    assert not can_i(kubectl, namespace, "update", "namespaces", None)


def test_auth_kubernetes_adds_the_flags_and_only_the_review_rights(
    helm: Run, installed_rbac: Callable[..., None], kubectl: Run, namespace: str
) -> None:
    plain = container(docs(template(helm, "dispatch", *SSH_SETS)))["args"]
    assert not [a for a in plain if a.startswith("--auth")]
    sets = ("auth.mode=kubernetes", "auth.cluster=home")
    args = container(docs(template(helm, "dispatch", *SSH_SETS, *sets)))["args"]
    assert "--auth=kubernetes" in args and "--auth-cluster=home" in args
    installed_rbac("auth.mode=kubernetes")
    wait_until(
        lambda: can_i(kubectl, namespace, "create", "tokenreviews.authentication.k8s.io", None),
        timeout=30,
        what="the review rights granted",
    )
    assert can_i(kubectl, namespace, "create", "subjectaccessreviews.authorization.k8s.io", None)
    assert not can_i(kubectl, namespace, "create", "localsubjectaccessreviews", "team-a")
    assert not can_i(kubectl, namespace, "create", "namespaces", None)


# --- a cycle with only the chart's rights -------------------------------------------------


def service_account_kubeconfig(
    kubectl: Run, kube_cluster: KubeCluster, namespace: str, dest: Path
) -> Path:
    """A kubeconfig that authenticates as the chart's ServiceAccount (a bound token)."""
    token = kubectl("create", "token", SA, "-n", namespace, "--duration=10m").stdout.strip()
    admin = yaml.safe_load(kube_cluster.kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    cluster = next(c for c in admin["clusters"] if c["name"] == context["context"]["cluster"])
    server = dict(cluster["cluster"])
    if "certificate-authority" in server:
        ca = Path(server.pop("certificate-authority")).read_bytes()
        server["certificate-authority-data"] = base64.b64encode(ca).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "home", "cluster": server}],
        "users": [{"name": "sa", "user": {"token": token}}],
        # the Cluster file names the admin's context: the override keeps that name
        "contexts": [
            {"name": admin["current-context"], "context": {"cluster": "home", "user": "sa"}}
        ],
        "current-context": admin["current-context"],
    }
    dest.write_text(yaml.safe_dump(config))
    return dest


def test_a_cycle_with_the_charts_rights_dispatches_and_reports_a_forbidden_namespace(
    installed_rbac: Callable[..., None],
    kubectl: Run,
    kube: Any,
    kube_cluster: KubeCluster,
    config_repo: Path,
    namespace: str,
    tmp_path: Path,
) -> None:
    from support.reconciler_env import commit_all, git

    from reconciler.runtime.service import make_runtime

    installed_rbac()
    wait_until(
        lambda: can_i(kubectl, namespace, "watch", "pods", "--all-namespaces"),
        timeout=30,
        what="the chart's bindings in effect",
    )
    missing = f"absent-{uuid.uuid4().hex[:8]}"
    project = config_repo / "projects" / "language" / "project.yaml"
    project.write_text(project.read_text().replace("namespace: team-b", f"namespace: {missing}"))
    commit_all(config_repo, "language runs in a namespace that does not exist")
    as_sa = service_account_kubeconfig(kubectl, kube_cluster, namespace, tmp_path / "sa.kubeconfig")
    runtime = make_runtime(str(config_repo), "main", {"local": as_sa}, cache_dir=tmp_path / "c")
    try:
        result = runtime.reconciler.run_once()
        runtime.on_cycle(result)
    finally:
        runtime.reconciler.close()
    # vision (team-a) is dispatched with the chart's rights alone; the cluster is not broken
    assert result.dispatched and all(op.startswith("vision/") for op in result.dispatched)
    language = {op: err for op, err in result.failed.items() if op.startswith("language/")}
    assert language and set(result.failed) == set(language)
    assert all(
        result.failure_reasons[op] == "NamespaceForbidden" and missing in err
        for op, err in language.items()
    )
    op = sorted(language)[0]
    record = yaml.safe_load(git(config_repo, "show", f"reconciler/status:{operation_path(op)}"))
    assert record["phase"] == "Queued" and record["reason"] == "NamespaceForbidden", str(record)
    assert f"namespace {missing} does not exist" in record["message"]
    assert "rbac.createNamespaces=true" in record["message"]
    assert kubectl("get", "namespace", missing, check=False).returncode != 0


def test_leader_election_works_with_the_charts_rights_alone(
    installed_rbac: Callable[..., None],
    kubectl: Run,
    kube_cluster: KubeCluster,
    namespace: str,
    tmp_path: Path,
) -> None:
    from kubernetes import config

    from reconciler.adapters.kube import KubeError
    from reconciler.runtime.leader import LeaderElector

    installed_rbac()
    wait_until(
        lambda: can_i(kubectl, namespace, "create", "leases.coordination.k8s.io", "@release"),
        timeout=30,
        what="the chart's bindings in effect",
    )
    as_sa = service_account_kubeconfig(kubectl, kube_cluster, namespace, tmp_path / "sa")
    api = config.new_client_from_config(config_file=str(as_sa))
    elector = LeaderElector(api, namespace, LEASE, "rec-0", 3.0, 2.0, 0.5)
    assert elector.try_acquire_or_renew() and elector.is_leader()  # create
    assert elector.try_acquire_or_renew() and elector.is_leader()  # get + update
    elector.stop(release=True)
    holder = kubectl(
        "get", "lease", LEASE, "-n", namespace, "-o", "jsonpath={.spec.holderIdentity}"
    )
    assert holder.stdout == ""  # released with an update
    other = LeaderElector(api, namespace, "another-lease", "rec-0", 3.0, 2.0, 0.5)
    with pytest.raises(KubeError, match="forbidden"):
        other.lease.get()


def test_the_containers_command_line_runs_and_dispatches(
    helm: Run,
    installed_rbac: Callable[..., None],
    kubectl: Run,
    kube: Any,
    kube_cluster: KubeCluster,
    config_repo: Path,
    namespace: str,
    tmp_path: Path,
) -> None:
    """The Deployment's args and env, as rendered, run by the real CLI as the chart's
    ServiceAccount; only what a pod would get from the kubelet is filled in here (the
    downward API, in-cluster credentials as a kubeconfig, the mounted paths)."""
    import signal
    import socket
    import sys
    import urllib.request

    installed_rbac()
    wait_until(
        lambda: can_i(kubectl, namespace, "create", "leases.coordination.k8s.io", "@release"),
        timeout=30,
        what="the chart's bindings in effect",
    )
    as_sa = service_account_kubeconfig(kubectl, kube_cluster, namespace, tmp_path / "sa")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rendered = docs(
        template(
            helm,
            namespace,
            f"repo.url={config_repo}",
            "repo.interval=1s",
            f"http.port={port}",
            "clusters[0].name=local",
            "clusters[0].existingSecret=local-kubeconfig",
        )
    )
    c = container(rendered)
    pod = {"POD_NAME": "rec-7d9f-abcde", "POD_NAMESPACE": namespace}
    mounts = {
        "/var/cache/reconciler": str(tmp_path / "cache"),
        "/etc/reconciler/clusters/local/kubeconfig": str(as_sa),
    }
    args = []
    for arg in c["args"]:
        for var, value in pod.items():
            arg = arg.replace(f"$({var})", value)
        for path, local in mounts.items():
            arg = arg.replace(path, local)
        args.append(arg)
    assert args[-1] == f"--cluster-kubeconfig=local={as_sa}"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    env |= {e["name"]: e["value"] for e in c["env"] if "value" in e} | pod
    env["HOME"] = str(tmp_path)
    log = tmp_path / "reconciler.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "reconciler", *args, f"--lease-kubeconfig={as_sa}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )
    try:

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        wait_until(ready, timeout=90, what=f"/readyz (log: {log.read_text()[-2000:]})")
        wait_until(
            lambda: len(kube.list_managed("Job").items) >= 3,
            timeout=60,
            what="Jobs dispatched",
        )
        lease = kubectl("get", "lease", LEASE, "-n", namespace, "-o", "json").stdout
        assert json.loads(lease)["spec"]["holderIdentity"] == pod["POD_NAME"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0, log.read_text()[-2000:]
    released = kubectl("get", "lease", LEASE, "-n", namespace, "-o", "json").stdout
    assert not json.loads(released)["spec"].get("holderIdentity")  # SIGTERM released it
