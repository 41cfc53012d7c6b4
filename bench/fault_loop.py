"""R1 at length: ``reconciler run`` killed -9 at seeded random points, N times in a row
(default 50), on a dev cluster; the invariants are checked after every kill and a clean
run must converge at the end. Prints the tallies; exit 1 on any violation.

The loop is the CI test's (tests/support/fault_loop.py), with more runs.

    PYTHONPATH=$PWD python bench/fault_loop.py [-n 50] [--seed 8] [--kubeconfig FILE]

Without ``--kubeconfig`` a dev cluster is started in a temporary directory and stopped
after (the control plane must be built: ``reconciler dev-cluster build``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests")]

from support.fault_loop import FaultLoop  # noqa: E402
from support.reconciler_env import clean_workloads, make_config_repo  # noqa: E402

from reconciler.adapters.kube import Kube, connect  # noqa: E402
from reconciler.devcluster.cluster import DevCluster  # noqa: E402
from reconciler.devcluster.prerequisites import apply_prerequisites  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=50, help="runs (default 50)")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--kubeconfig", type=Path, default=None, help="an existing cluster")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fault-loop-") as tmp:
        work = Path(tmp)
        dev = None
        kubeconfig = args.kubeconfig
        if kubeconfig is None:
            dev = DevCluster(work / "cluster")
            dev.up(progress=lambda msg: print(f"[dev-cluster] {msg}", file=sys.stderr))
            kubeconfig = dev.kubeconfig
        try:
            kube = Kube(connect(kubeconfig))
            apply_prerequisites(kube.api)
            clean_workloads(kube)
            repo = make_config_repo(work / "config", kubeconfig, duration="1s")
            loop = FaultLoop(repo, kubeconfig, work, kube, seed=args.seed, schedule=True)
            loop.sampler.start()
            started = time.monotonic()
            for index in range(args.n):
                outcome = loop.run_one(index)
                verdict = "ok" if not outcome.violations else "; ".join(outcome.violations)
                print(
                    f"run {index + 1:3d}/{args.n} {outcome.fault:<18} "
                    f"exit {outcome.returncode} {outcome.seconds:5.1f}s "
                    f"jobs {outcome.jobs:3d}  {verdict}"
                )
            converge_seconds, left = loop.converge(timeout=300)
            loop.close()
            tallies = loop.tallies()
            tallies["converged"] = not left
            tallies["converge_seconds"] = round(converge_seconds, 1)
            tallies["total_seconds"] = round(time.monotonic() - started, 1)
            print(json.dumps(tallies, indent=2))
            if left:
                print("not converged:\n  " + "\n  ".join(left[:20]))
            clean_workloads(kube)
            return 0 if tallies["violations"] == 0 and not left else 1
        finally:
            if dev is not None:
                dev.down(progress=lambda _msg: None)


if __name__ == "__main__":
    sys.exit(main())
