"""Cold build of the dev cluster's binaries: wall and CPU time per build step.

Runs ``ensure_binaries`` (the recipe ``reconciler dev-cluster build``/``up`` use) with an
empty Go build cache (``GOCACHE`` in a temp dir: every package compiled) and the binaries
written to a temp ``RECONCILER_CACHE_DIR``: the shared ``~/.cache/reconciler/bin`` is never
touched. The Go module cache is reused (downloads are not what is measured). The builds run
at ``nice 10``.

Prints, per step, the wall time and the CPU seconds (``go`` and the compilers and linkers
it ran, from ``wait4``), the load average before and after, and the machine's busy cores
during the build less the build's own (other processes on a shared machine). With
``--compare DIR`` it says which built binaries are byte-identical to those in DIR's
matching cache directories (the Kubernetes and etcd recipes should not change a byte).

    python bench/cold_build.py                 # etcd, the Kubernetes commands, kwok
    python bench/cold_build.py --helm          # and helm
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _measure as m

from reconciler.devcluster import build


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--helm", action="store_true", help="build helm too")
    parser.add_argument(
        "--compare",
        type=Path,
        default=build.cache_root() / "bin",
        help="a bin cache to compare the built binaries with (read only)",
    )
    parser.add_argument("--keep", type=Path, help="build here (kept) instead of a temp dir")
    args = parser.parse_args()
    os.nice(10)
    work = args.keep or Path(tempfile.mkdtemp(prefix="cold-build-"))
    os.environ["GOCACHE"] = str(work / "gocache")
    os.environ["RECONCILER_CACHE_DIR"] = str(work / "cache")
    load0 = os.getloadavg()
    busy0 = m.read_busy_seconds()
    ours0 = os.times()
    started = time.monotonic()
    timings: list[build.Built] = []
    binaries = build.ensure_binaries(m.say, helm=args.helm, timings=timings)
    wall = time.monotonic() - started
    ours1 = os.times()
    ours = (ours1.children_user + ours1.children_system) - (
        ours0.children_user + ours0.children_system
    )
    others = m.others_cores(m.read_busy_seconds() - busy0, ours, wall)
    load1 = os.getloadavg()
    print(f"\ncold build in {work} (GOCACHE empty, module cache reused, nice 10)")
    print(f"{'step':<12} {'binaries':<62} {'wall s':>8} {'CPU s':>8}")
    for t in timings:
        print(f"{t.name:<12} {', '.join(t.binaries):<62} {t.wall:>8.0f} {t.cpu:>8.0f}")
    print(f"{'all':<12} {'':<62} {wall:>8.0f} {sum(t.cpu for t in timings):>8.0f}")
    print(
        f"load average {load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f} before, "
        f"{load1[0]:.1f} {load1[1]:.1f} {load1[2]:.1f} after; "
        f"other processes used {others:.1f} cores on average"
    )
    where = build.cached_binaries()
    for name, path in binaries.all().items():
        if not path.is_file():
            continue
        theirs = args.compare / getattr(where, name.replace("-", "_")).parent.name / path.name
        same = theirs.is_file() and _sha(theirs) == _sha(path)
        verdict = "identical to" if same else "differs from" if theirs.is_file() else "no"
        print(f"{name:<24} {verdict} {theirs}")


if __name__ == "__main__":
    main()
