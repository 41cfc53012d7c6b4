"""Kueue beside the reconciler (and the raw client), admitting the same Jobs.

Each run gets a fresh dev cluster; the Jobs are the manifests ``core/decision/render.py`` renders.

- raw: a kubernetes-client loop creates the N Jobs (W in flight);
- reconciler: ``Reconciler.run_once`` dispatches them from a config repo;
- kueue: the same client loop creates them ``suspend: true`` with the
  ``kueue.x-k8s.io/queue-name`` label; Kueue v0.17.0, built from its Go module, admits and
  unsuspends them. It runs out of cluster on the dev cluster's kubeconfig.

Measured for each: time to all admitted (Jobs existing and not suspended), to all pods
Running, CPU seconds per Job per process, apiserver requests per Job by verb and resource.
Then the binding case for the reconciler and for Kueue: M Jobs of D seconds, each asking one
GPU, under a quota of C GPUs; admissions per second against the ceiling C/D. The ratios
reconciler/Kueue and reconciler/raw come last.

Kueue is optional: it is never a dependency of the product or of CI. This script builds it
once (minutes) into the binary cache, ~/.cache/reconciler/bin/kueue-v0.17.0-<key>/. It needs
root for a private mount namespace (see ``start_kueue``).

    PYTHONPATH=$PWD python bench/kueue_side_by_side.py [-n 500] [--rounds 1] [-w 8]
        [--group-kind-concurrency 50] [-m 400 -c 100 -d 10] [--no-binding] [--pprof DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _measure as m

from reconciler.devcluster import build
from reconciler.devcluster.cluster import free_port
from reconciler.devcluster.pki import write_self_signed
from reconciler.devcluster.shape import NodePool
from reconciler.devcluster.toolchain import ensure_go, go_env

KUEUE_VERSION = "v0.17.0"
KUEUE_MODULE = Path(__file__).resolve().parent / "kueue"
QUEUE = "bench"
GPU = "nvidia.com/gpu"
POOLS = (NodePool("bench", count=4, cpu="1000", memory="4000Gi", pods=2500, gpus=32),)


def ensure_kueue(progress: Callable[[str], None] = m.say) -> Path:
    """The Kueue binary, built from the wrapper module bench/kueue into the binary cache
    the dev cluster's binaries use, if it is not there yet."""
    built = build._build_module(
        "kueue",
        KUEUE_VERSION,
        KUEUE_MODULE,
        {"kueue": "sigs.k8s.io/kueue/cmd/kueue"},
        f"-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion={KUEUE_VERSION}",
        progress,
    )
    return built["kueue"]


def kueue_source() -> Path:
    """Kueue's module directory in the Go module cache (its CRDs are there)."""
    go = ensure_go()
    out = subprocess.run(
        [str(go), "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kueue"],
        cwd=KUEUE_MODULE,
        capture_output=True,
        text=True,
        check=True,
        env=go_env(go) | {"GOFLAGS": "-mod=mod"},
    )
    return Path(out.stdout.strip())


def _config(work: Path, concurrency: int, ports: dict[str, int]) -> Path:
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['metrics']}"},
        "webhook": {"port": ports["webhook"], "host": "127.0.0.1", "certDir": str(work / "certs")},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 1000, "burst": 2000},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": concurrency,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": concurrency,
                "LocalQueue.kueue.x-k8s.io": 1,
                "Cohort.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 1,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "integrations": {"frameworks": ["batch/job"]},
    }
    path = work / "kueue-config.yaml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    return path


def _kubectl(cluster: object, *args: str, input: bytes | None = None) -> str:
    proc = cluster.kubectl(*args, input=input)  # type: ignore[attr-defined]
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.decode()[-600:]}")
    return str(proc.stdout.decode())


def _wait_active(cluster: object, kind: str, name: str, namespace: str = "") -> None:
    ns = ["-n", namespace] if namespace else []
    _kubectl(cluster, "wait", *ns, "--for=condition=Active", f"{kind}/{name}", "--timeout=120s")


def _wait_established(api: m.ApiClient, timeout: float = 120.0) -> None:
    """Until every kueue.x-k8s.io CRD is Established (a CRD just applied has no conditions
    yet, which ``kubectl wait`` takes for an error)."""
    deadline = time.monotonic() + timeout
    while True:
        crds = api.get_json("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")["items"]
        ours = [c for c in crds if c["spec"]["group"] == "kueue.x-k8s.io"]
        established = [
            c
            for c in ours
            if any(
                x["type"] == "Established" and x["status"] == "True"
                for x in (c.get("status") or {}).get("conditions") or []
            )
        ]
        if ours and len(established) == len(ours):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(ours) - len(established)} Kueue CRDs not Established")
        time.sleep(1)


def start_kueue(
    binary: Path, concurrency: int, quota_gpus: int
) -> Callable[[object, m.ApiClient, Path], m.Extra]:
    """A ``start_extra`` for :func:`_measure.run_side`: Kueue's CRDs, Kueue itself, one
    ResourceFlavor, one ClusterQueue whose quota covers every Job (GPUs: ``quota_gpus``,
    0 for enough), one LocalQueue in the bench namespace, each waited for until Active."""

    def start(cluster: object, api: m.ApiClient, work: Path) -> m.Extra:
        crds = kueue_source() / "config" / "components" / "crd" / "bases"
        # server-side: the Workload CRD (1.4 MB) is too large for the last-applied annotation
        _kubectl(cluster, "apply", "--server-side", "-f", str(crds))
        _wait_established(api)
        for ns in ("kueue-system", "bench"):
            _kubectl(cluster, "create", "namespace", ns)
        write_self_signed(work / "certs", "kueue-bench")
        ports = {name: free_port() for name in ("health", "metrics", "webhook")}
        config = _config(work, concurrency, ports)
        # With internal cert management off, Kueue reads its metrics cert from the fixed path
        # /etc/kueue/metrics/certs and exits without one. In a private mount namespace an
        # overlay on /etc (its upper layer on a private tmpfs) gives it that file; the
        # host's /etc is not touched.
        layer = work / "etc-layer"
        layer.mkdir()
        script = (
            'set -e; mount -t tmpfs tmpfs "$LAYER"; mkdir "$LAYER/u" "$LAYER/w"; '
            'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$LAYER/u,workdir=$LAYER/w" /etc; '
            "mkdir -p /etc/kueue/metrics/certs; "
            'cp "$CERTS/tls.crt" "$CERTS/tls.key" /etc/kueue/metrics/certs/; '
            'exec "$KUEUE" --config "$CONFIG" --feature-gates=VisibilityOnDemand=false'
        )
        env = dict(
            os.environ,
            KUBECONFIG=str(cluster.kubeconfig),  # type: ignore[attr-defined]
            LAYER=str(layer),
            CERTS=str(work / "certs"),
            KUEUE=str(binary),
            CONFIG=str(config),
        )
        log = (work / "kueue.log").open("ab")
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                tail = (work / "kueue.log").read_text(errors="replace")[-1500:]
                raise RuntimeError(f"kueue exited ({proc.returncode}):\n{tail}")
            try:
                url = f"http://127.0.0.1:{ports['health']}/readyz"
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"kueue not ready after 180 s; see {work / 'kueue.log'}")
            time.sleep(1)
        big = 1_000_000
        gpus = quota_gpus or big
        objects = [
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": "default"},
            },
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": QUEUE},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", GPU],
                            "flavors": [
                                {
                                    "name": "default",
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": str(big)},
                                        {"name": "memory", "nominalQuota": f"{big}Gi"},
                                        {"name": GPU, "nominalQuota": str(gpus)},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            },
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": QUEUE, "namespace": "bench"},
                "spec": {"clusterQueue": QUEUE},
            },
        ]
        _kubectl(
            cluster,
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}).encode(),
        )
        _wait_active(cluster, "clusterqueue", QUEUE)
        _wait_active(cluster, "localqueue", QUEUE, "bench")

        def stop() -> None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

        return m.Extra("kueue", proc.pid, stop)

    return start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=1, help="kueue, raw, reconciler, ...")
    parser.add_argument("-w", "--workers", type=int, default=8, help="creates in flight")
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument(
        "--group-kind-concurrency",
        type=int,
        default=50,
        help="Kueue's groupKindConcurrency for Job.batch and Workload",
    )
    parser.add_argument("--no-binding", action="store_true")
    parser.add_argument("-m", type=int, default=400, help="Jobs in the binding case")
    parser.add_argument("-c", "--concurrency", type=int, default=100, help="GPU quota")
    parser.add_argument("-d", "--duration", type=int, default=10, help="seconds per Job")
    parser.add_argument("--timeout", type=float, default=900.0, help="per run")
    parser.add_argument("--keep", action="store_true")
    m.add_pprof_options(parser)
    args = parser.parse_args()
    if os.geteuid() != 0 or not shutil.which("unshare"):
        raise SystemExit("Kueue's metrics cert needs a private mount namespace: run as root")
    binary = ensure_kueue()
    gkc = args.group_kind_concurrency
    m.say(
        f"kueue side by side: N={args.n}, {args.rounds} round(s), {args.workers} in flight, "
        f"Kueue {KUEUE_VERSION} groupKindConcurrency Job.batch={gkc} Workload={gkc}, "
        f"{os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.1f}"
    )
    # Kueue first: a setup problem shows before the other runs have taken their time.
    runs: dict[str, list[m.RunResult]] = {"kueue": [], "raw": [], "reconciler": []}
    for r in range(args.rounds):
        for side in runs:
            spec = m.RunSpec(
                side,
                "raw" if side != "reconciler" else "reconciler",
                args.n,
                workers=args.workers,
                interval=args.interval,
                timeout=args.timeout,
                kueue_queue=QUEUE if side == "kueue" else "",
                pprof=args.pprof,
                pprof_seconds=args.pprof_seconds,
                label=f"{side}-{r + 1}",
            )
            extra = start_kueue(binary, gkc, 0) if side == "kueue" else None
            result = m.run_side(spec, POOLS, start_extra=extra, keep=args.keep)
            runs[side].append(result)
            m.say(f"[{r + 1}/{args.rounds}] {result.line()}")
    m.print_costs([x for side in runs.values() for x in side])
    binding: dict[str, m.RunResult] = {}
    if not args.no_binding:
        for side in ("reconciler", "kueue"):
            spec = m.RunSpec(
                side,
                side if side == "reconciler" else "raw",
                args.m,
                workers=args.workers,
                interval=0.5,
                duration=f"{args.duration}s",
                gpus=1,
                quota_gpus=args.concurrency if side == "reconciler" else 0,
                kueue_queue=QUEUE if side == "kueue" else "",
                until="finished",
                timeout=args.timeout,
            )
            extra = start_kueue(binary, gkc, args.concurrency) if side == "kueue" else None
            binding[side] = m.run_side(spec, POOLS, start_extra=extra, keep=args.keep)
            m.say(m.binding_line(binding[side], args.concurrency, args.duration))
    flagged = sum(x.flagged for side in runs.values() for x in side)
    m.say(
        f"runs FLAGged (other processes > {m.OTHERS_LIMIT} cores): {flagged} of "
        f"{sum(len(v) for v in runs.values())}; load average at end {os.getloadavg()[0]:.1f}"
    )

    for line in ratio_lines(runs, binding, args.concurrency, args.duration):
        m.say(line)


def ratio_lines(
    runs: dict[str, list[m.RunResult]],
    binding: dict[str, m.RunResult],
    concurrency: int,
    duration: float,
) -> list[str]:
    """reconciler/Kueue and reconciler/raw: rates (the other's time over the reconciler's)
    and costs (the reconciler's over the other's), each side's median over its runs."""

    def med(side: str, value: Callable[[m.RunResult], float]) -> float:
        return statistics.median(value(x) for x in runs[side])

    def admitted(x: m.RunResult) -> float:
        return x.admitted

    def running(x: m.RunResult) -> float:
        return x.running

    def cpu(x: m.RunResult) -> float:
        return x.total_cpu()

    def requests(x: m.RunResult) -> float:
        return x.requests_per_op()

    lines = []
    for other in ("kueue", "raw"):
        parts = [
            f"rate to all admitted {med(other, admitted) / med('reconciler', admitted):.2f}",
            f"rate to all Running {med(other, running) / med('reconciler', running):.2f}",
            f"CPU per Job {med('reconciler', cpu) / med(other, cpu):.2f}",
            f"requests per Job {med('reconciler', requests) / med(other, requests):.2f}",
        ]
        if other == "kueue" and len(binding) == 2:
            ours = m.binding_fraction(binding["reconciler"], concurrency, duration)
            theirs = m.binding_fraction(binding["kueue"], concurrency, duration)
            parts.append(f"binding fraction of C/D {ours:.2f} against {theirs:.2f}")
        lines.append(f"ratio reconciler/{other}: " + ", ".join(parts))
    return lines


if __name__ == "__main__":
    main()
