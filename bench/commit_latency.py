"""Commit-to-dispatch latency on the dev cluster: p50 and p95 from a change to the first
Job created for it, for the two ways `reconciler run` notices a change.

- polling: `reconciler run --repo <bare repo> --interval I`; each round commits one new
  operation in a clone and pushes it; latency from the push's return to the Job's ADDED
  event on a watch;
- watch: `reconciler run --watch --repo <directory>` reads the files as saved (it watches
  the working tree with inotify, not a Git remote: there is no push in this mode); each round
  saves one new operation file; latency from the save to the Job's ADDED event.

- finish to next: `reconciler run --repo <bare repo>` at its defaults (`--interval 10s`,
  `--debounce 200ms`, status every 10 s) with a queue of concurrency 1 holding a chain of
  operations of `--chain-duration` each; latency from a Job's end (the first terminal
  condition, `SuccessCriteriaMet` or `Complete`, seen on a watch) to the next operation's
  Job's `ADDED` event. Also how many cycles, triggers and status commits that took (from
  the process's /metrics and the status branch).

With ``--ops N`` the polling repo also holds N operations in a paused queue (compiled and
planned every cycle, never dispatched), 1% of them through a preset ``move-<i>`` that puts
them in that queue; after the new-operation rounds, each round commits one preset change
(``move-<i>`` now names the dispatching queue): latency from the push to the first Job of
its operations (the next round is pushed once all of them have their Job and the
reconciler has settled: their phases written, below 5% of a core over a second). That is the
cost of a commit in a big repo, incremental compile included. The rounds start once the
reconciler's first status commit is on the remote (every operation's file: at 100,000 it
takes ~15 s of CPU, which the first rounds would time otherwise).

- webhook (``--only poll`` runs it after the polling rounds, ``--only webhook`` alone): the
  same rounds against `reconciler run --http ... --webhook-secret-file F --interval 60s`;
  after each push the bench POSTs a signed GitHub push event to /api/webhook, as the Git
  host would; latency from the push's return (the POST included) to the Job's ADDED event.

Prints the distributions and last the ratio of the watch p50 to the polling p50 and the
finish-to-next p50.

    PYTHONPATH=$PWD python bench/commit_latency.py [--rounds 10] [--interval 2s] [--ops 10000]
        [--chain 12] [--chain-duration 2s] [--only finish|poll|webhook]
        [--webhook-interval 60s] [--profile OUT.svg] [--no-status] [--quiet]

Also the reconciler's CPU time (user and system, from /proc) per polling round: steadier
than the latencies on a shared machine.

``--quiet``: before each push, also wait for the whole machine to settle (below a quarter
of a core over a second, ``/proc/stat``). The dev cluster shares the bench's cores: without
it, a 1% round's push lands while the control plane still creates, schedules and starts the
last round's 1,000 pods, and the reconciler's cycle shares the cores with that. A control
plane of its own (any real one) does not take the reconciler's CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import itertools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.adapters.kube import Kube, KubeError, connect
from reconciler.devcluster.cluster import DevCluster
from reconciler.devcluster.shape import NodePool

POOLS = (NodePool("bench", count=1, cpu="1000", memory="4000Gi", pods=500),)
GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
OP = (
    "kind: Operation\nname: {name}\nrun:\n  kind: job\n"
    "  container:\n    image: busybox\n    resources: {{requests: {{cpu: 10m}}}}\n"
    "  environment:\n    annotations: {{reconciler.dev/simulated-duration: 1h}}\n"
)

MOVE = "kind: Preset\nname: move-{i}\npatchStrategy: replace\nqueue: {queue}\n"


def write_held(root: Path, project: str, ops: int, presets: int) -> None:
    """``ops`` operations in the paused queue ``held``; those with ``i % 100 < presets`` get
    there through the preset ``move-<i % 100>``."""
    (root / "queues" / "held.yaml").write_text(
        "kind: Queue\nname: held\ncluster: local\npaused: true\n"
    )
    presets_dir = root / "projects" / project / "presets"
    presets_dir.mkdir(exist_ok=True)
    for i in range(presets):
        (presets_dir / f"move-{i}.yaml").write_text(MOVE.format(i=i, queue="held"))
    folder = root / "projects" / project / "operations"
    for i in range(ops):
        name = f"h{i:05d}"
        if i % 100 < presets:
            body = OP.format(name=name) + f"presets: [move-{i % 100}]\n"
        else:
            body = OP.format(name=name) + "queue: held\n"
        (folder / f"{name}.yaml").write_text(body)


def write_config(root: Path, kubeconfig: Path, project: str) -> None:
    (root / "clusters").mkdir(parents=True)
    (root / "queues").mkdir()
    (root / "projects" / project / "operations").mkdir(parents=True)
    (root / "reconciler.yaml").write_text("kind: Org\nname: bench\n")
    (root / "clusters" / "local.yaml").write_text(
        f"kind: Cluster\nname: local\nkubeconfig:\n  path: {kubeconfig}\ncontext: dev\n"
    )
    (root / "queues" / "bulk.yaml").write_text("kind: Queue\nname: bulk\ncluster: local\n")
    (root / "projects" / project / "project.yaml").write_text(
        f"kind: Project\nname: {project}\nnamespace: {project}\ndefaults:\n  queue: bulk\n"
    )
    (root / "projects" / project / "operations" / "seed.yaml").write_text(OP.format(name="seed"))


class JobSeen:
    """The first time each Job name is seen, and the first time it is seen ended (a
    terminal condition), from a watch (not polling)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.seen: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        self.cond = threading.Condition()
        self.stop = False
        self.version = kube.list_managed("Job").resource_version
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stop:
            try:
                for event in self.kube.watch_managed("Job", self.version, timeout_seconds=30):
                    meta = event.object.get("metadata") or {}
                    self.version = str(meta.get("resourceVersion") or self.version)
                    now = time.perf_counter()
                    name = str(meta.get("name"))
                    with self.cond:
                        if event.type == "ADDED":
                            self.seen.setdefault(name, now)
                        if ended(event.object):
                            self.ended.setdefault(name, now)
                        self.cond.notify_all()
            except KubeError:
                time.sleep(0.2)

    def wait(self, name: str, timeout: float = 120.0) -> float:
        with self.cond:
            if not self.cond.wait_for(lambda: name in self.seen, timeout):
                raise SystemExit(f"no Job {name} after {timeout:.0f} s")
            return self.seen[name]

    def wait_ended(self, name: str, timeout: float = 120.0) -> float:
        with self.cond:
            if not self.cond.wait_for(lambda: name in self.ended, timeout):
                raise SystemExit(f"Job {name} not ended after {timeout:.0f} s")
            return self.ended[name]


def ended(job: Mapping[str, Any]) -> bool:
    """The Job has a terminal condition (what the reconciler counts as the end of a run)."""
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(
        c.get("status") == "True"
        and c.get("type") in ("Complete", "SuccessCriteriaMet", "Failed", "FailureTarget")
        for c in conditions
    )


def metrics(log: Path) -> dict[str, float]:
    """The process's /metrics (at the address it logged), summed by metric and label."""
    found = re.search(r" on (http://127\.0\.0\.1:\d+)", log.read_text())
    if found is None:
        return {}
    with urllib.request.urlopen(found[1] + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        key, value = line.rsplit(" ", 1)
        out[key] = float(value)
    return out


def finish_to_next(
    work: Path, kubeconfig: Path, seen: JobSeen, override: list[str], count: int, duration: str
) -> tuple[list[float], str]:
    """A chain of ``count`` ops under a queue of concurrency 1, pushed at once; the
    latencies from each Job's end to the next Job's creation, and what it cost."""
    clone, remote = work / "chain-clone", work / "chain.git"
    write_config(clone, kubeconfig, "chain")
    (clone / "queues" / "serial.yaml").write_text(
        "kind: Queue\nname: serial\ncluster: local\nconcurrency: 1\n"
    )
    ops = clone / "projects" / "chain" / "operations"
    (ops / "seed.yaml").unlink()
    (clone / "projects" / "chain" / "project.yaml").write_text(
        "kind: Project\nname: chain\nnamespace: chain\ndefaults:\n  queue: serial\n"
    )
    for i in range(count):  # the queue runs one at a time
        text = OP.format(name=f"f{i:03d}").replace("1h}", f"{duration}}}")
        (ops / f"f{i:03d}.yaml").write_text(text)
    subprocess.run([*GIT, "init", "-q", "-b", "main"], cwd=clone, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=clone, check=True)
    subprocess.run([*GIT, "commit", "-qm", "chain"], cwd=clone, check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(clone), str(remote)], check=True)
    log = work / "chain.log"
    started = time.perf_counter()
    proc = start_reconciler(
        [
            "--repo",
            str(remote),
            "--cache-dir",
            str(work / "chain-cache"),
            "--http",
            "127.0.0.1:0",
            *override,
        ],
        log,
    )
    latencies: list[float] = []
    try:
        names = [f"chain-f{i:03d}-g1" for i in range(count)]
        for name in names:
            seen.wait_ended(name, timeout=60.0 + 10 * count)
        # in the order they were created: each was created once the one before ended
        order = sorted(names, key=lambda n: seen.seen[n])
        for before, after in itertools.pairwise(order):
            latencies.append(seen.seen[after] - seen.ended[before])
        time.sleep(12)  # a status write put off by its cadence is made within 10 s
        took = time.perf_counter() - started
        m = metrics(log)
    finally:
        stop(proc)
    commits = subprocess.run(
        ["git", "-C", str(remote), "rev-list", "--count", "reconciler/status"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    cycles = m.get("reconciler_cycle_duration_seconds_count", 0.0)
    triggers = {
        k.split('"')[1]: v for k, v in m.items() if k.startswith("reconciler_cycle_triggers_total{")
    }
    cost = f"{took:.0f} s, {cycles:.0f} cycles, triggers {triggers}, {commits} status commits"
    return latencies, cost


def start_reconciler(
    args: list[str], log: Path, profile: Path | None = None
) -> subprocess.Popen[bytes]:
    """``reconciler run`` as a subprocess; with ``profile``, under ``py-spy record`` (a
    flame graph written there when it ends)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    command = [sys.executable, "-m", "reconciler", "run", *args]
    if profile is not None:
        form = ["--format", "raw"] if profile.suffix == ".txt" else []  # collapsed stacks
        command = ["py-spy", "record", "-r", "50", *form, "-o", str(profile), "--", *command]
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=out, env=env)


def cpu_seconds(proc: subprocess.Popen[bytes]) -> float:
    """CPU time so far of ``proc``'s Python process (py-spy's child when profiled): user and
    system, its reaped children (git) included, from /proc."""
    pid = python_pid(proc)
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def settle(
    proc: subprocess.Popen[bytes], idle: float = 0.05, window: float = 1.0, timeout: float = 120.0
) -> None:
    """Wait until ``proc`` uses less than ``idle`` of a core over ``window`` seconds (at
    most ``timeout``): the work a round started is done."""
    deadline = time.monotonic() + timeout
    last = cpu_seconds(proc)
    while time.monotonic() < deadline:
        time.sleep(window)
        now = cpu_seconds(proc)
        if now - last < idle * window:
            return
        last = now


def machine_busy() -> tuple[float, float]:
    """The machine's CPU time so far, busy and all, in seconds (``/proc/stat``)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - idle) / hz, sum(ticks) / hz


def settle_machine(idle: float = 0.25, window: float = 1.0, timeout: float = 120.0) -> None:
    """Wait until the whole machine uses less than ``idle`` of a core over ``window``
    seconds (at most ``timeout``): the control plane is done with the last round too."""
    deadline = time.monotonic() + timeout
    last = machine_busy()[0]
    while time.monotonic() < deadline:
        time.sleep(window)
        now = machine_busy()[0]
        if now - last < idle * window:
            return
        last = now


def python_pid(proc: subprocess.Popen[bytes]) -> int:
    """``proc``'s Python process: itself, or py-spy's child when profiled."""
    pid = proc.pid
    with contextlib.suppress(OSError, IndexError, ValueError):
        if Path(f"/proc/{pid}/comm").read_text().strip() == "py-spy":
            return int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
    return pid


def stop(proc: subprocess.Popen[bytes]) -> None:
    pid = python_pid(proc)
    if pid != proc.pid:  # py-spy writes its profile when the process it runs ends
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    else:
        proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()


class Hook:
    """The Git host's side of a webhook: a GitHub push event, signed with the secret, POSTed
    to the reconciler's /api/webhook once the push is in."""

    def __init__(self, work: Path, log: Path) -> None:
        self.secret = os.urandom(16).hex().encode()
        self.secret_file = work / "webhook-secret"
        self.secret_file.write_bytes(self.secret + b"\n")
        self.log = log
        self.url = ""

    def post(self, clone: Path) -> None:
        if not self.url:
            self.url = server_url(self.log) + "/api/webhook"
        after = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True, check=True
        ).stdout.strip()
        body = json.dumps({"ref": "refs/heads/main", "after": after}).encode()
        signature = hmac.new(self.secret, body, hashlib.sha256).hexdigest()
        request = urllib.request.Request(
            self.url,
            data=body,
            headers={
                "Content-Type": "application/json",
                "X-GitHub-Event": "push",
                "X-Hub-Signature-256": f"sha256={signature}",
            },
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            if resp.status != 202:
                raise SystemExit(f"webhook answered {resp.status}: {resp.read()!r}")


def server_url(log: Path, timeout: float = 60.0) -> str:
    """The reconciler's --http address, from its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(r" on (http://127\.0\.0\.1:\d+)", log.read_text())
        if found:
            return found[1]
        time.sleep(0.1)
    raise SystemExit(f"no HTTP address in {log}")


def first_status_write(remote: Path, timeout: float = 900.0) -> None:
    """Wait for the first cycle's status write (every operation's record: ~15 s of CPU at
    100,000 operations) to reach ``remote``, so that the rounds time commits, not it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = subprocess.run(
            ["git", "-C", str(remote), "rev-parse", "--verify", "-q", "reconciler/status"],
            capture_output=True,
        )
        if found.returncode == 0:
            return
        time.sleep(0.5)
    raise SystemExit(f"no status write reached {remote} in {timeout:.0f} s")


def commit_rounds(
    work: Path,
    kubeconfig: Path,
    seen: JobSeen,
    override: list[str],
    args: argparse.Namespace,
    mode: str,
) -> Rounds:
    """``args.rounds`` new operations, then a preset change per round (with ``--ops``),
    each pushed to a bare remote: noticed by polling (``--interval``) or told by a signed
    webhook (``--webhook-interval`` as the fallback)."""
    project = "poll" if mode == "poll" else "hook"
    clone, remote = work / f"{project}-clone", work / f"{project}.git"
    write_config(clone, kubeconfig, project)
    presets = min(args.rounds, 100) if args.ops else 0
    if args.ops:
        write_held(clone, project, args.ops, presets)
    subprocess.run([*GIT, "init", "-q", "-b", "main"], cwd=clone, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=clone, check=True)
    subprocess.run([*GIT, "commit", "-qm", "seed"], cwd=clone, check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(clone), str(remote)], check=True)
    subprocess.run(["git", "remote", "add", "bench", str(remote)], cwd=clone, check=True)
    log = work / f"{project}.log"
    hook = Hook(work, log) if mode == "webhook" else None
    extra = (
        ["--interval", args.interval]
        if hook is None
        else [
            "--interval",
            args.webhook_interval,
            "--http",
            "127.0.0.1:0",
            "--webhook-secret-file",
            str(hook.secret_file),
        ]
    )
    if args.no_status:
        extra.extend(["--status-branch", ""])
    profile = args.profile
    if profile is not None and args.only == "poll":  # both modes: one profile each
        profile = profile.with_name(f"{profile.stem}-{mode}{profile.suffix}")
    proc = start_reconciler(
        ["--repo", str(remote), "--cache-dir", str(work / f"{project}-cache"), *extra, *override],
        log,
        profile,
    )
    out = Rounds(mode)

    def pushed() -> float:
        subprocess.run(["git", "push", "-q", "bench", "main"], cwd=clone, check=True)
        at = time.perf_counter()
        if hook is not None:
            hook.post(clone)
        return at

    try:
        seen.wait(f"{project}-seed-g1", timeout=600)
        if not args.no_status:
            first_status_write(remote)
        time.sleep(5)  # the writes and events that follow the first cycle's
        start = cpu_seconds(proc)
        for i in range(args.rounds):
            name = f"c{i:03d}"
            path = clone / "projects" / project / "operations" / f"{name}.yaml"
            path.write_text(OP.format(name=name))
            subprocess.run([*GIT, "add", "-A"], cwd=clone, check=True)
            subprocess.run([*GIT, "commit", "-qm", name], cwd=clone, check=True)
            at = pushed()
            out.new.append(seen.wait(f"{project}-{name}-g1") - at)
            time.sleep(0.37 * (i % 3))  # spread the pushes over the polling phase
        after_new = cpu_seconds(proc)
        out.cpu_new = (after_new - start) / max(1, len(out.new))
        for i in range(presets):
            path = clone / "projects" / project / "presets" / f"move-{i}.yaml"
            path.write_text(MOVE.format(i=i, queue="bulk"))
            subprocess.run([*GIT, "commit", "-qam", f"move-{i}"], cwd=clone, check=True)
            at = pushed()
            out.moved.append(seen.wait(f"{project}-h{i:05d}-g1", timeout=300) - at)
            # the round's other Jobs (1% of the operations) are created in the same
            # cycle: the next push waits for them, and for what follows them (their
            # phases written on them and to the status branch), or it would time those
            for j in range(i + 100, args.ops, 100):
                seen.wait(f"{project}-h{j:05d}-g1", timeout=300)
            settle(proc)
            if args.quiet:
                settle_machine()
            time.sleep(0.37 * (i % 3))
        if out.moved:
            out.cpu_moved = (cpu_seconds(proc) - after_new) / len(out.moved)
    finally:
        stop(proc)
    return out


@dataclass
class Rounds:
    """One mode's latencies (seconds) and the reconciler's CPU per round."""

    mode: str
    new: list[float] = field(default_factory=list)
    moved: list[float] = field(default_factory=list)
    cpu_new: float = 0.0
    cpu_moved: float = 0.0

    def label(self, interval: str, fallback: str) -> str:
        if self.mode == "poll":
            return f"polling (--interval {interval})"
        return f"webhook (--interval {fallback})"


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered), p95


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--interval", default="2s", help="the polling run's --interval")
    parser.add_argument("--chain", type=int, default=12, help="ops in the finish-to-next run")
    parser.add_argument("--chain-duration", default="2s", help="how long each of them runs")
    parser.add_argument(
        "--only",
        choices=("all", "finish", "poll", "webhook"),
        default="all",
        help="finish: that run only; poll: the polling rounds then the webhook rounds "
        "(--ops included), side by side; webhook: the webhook rounds only",
    )
    parser.add_argument(
        "--webhook-interval",
        default="60s",
        help="the webhook run's --interval (its fallback: every fetch comes from a webhook)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="py-spy the commit rounds' reconciler here (OUT-poll.svg and OUT-webhook.svg "
        "with --only poll)",
    )
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="leave the dev cluster running")
    parser.add_argument("--ops", type=int, default=0, help="operations held in the repo")
    parser.add_argument(
        "--no-status",
        action="store_true",
        help="the commit rounds' reconciler writes no status branch (--status-branch ''): "
        "what the status writes cost the latency",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="before each 1%% round's push, wait for the whole machine to settle too (the "
        "dev cluster's control plane shares the cores)",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="commit-latency-"))
    cluster = DevCluster(args.state_dir or work / "cluster")
    cluster.up(POOLS, progress=lambda m: print(f"[dev-cluster] {m}", flush=True))
    kubeconfig = cluster.kubeconfig
    override = ["--cluster-kubeconfig", f"local={kubeconfig}"]
    try:
        seen = JobSeen(Kube(connect(kubeconfig)))

        rounds: dict[str, Rounds] = {}
        watching: list[float] = []
        if args.only in ("all", "poll", "webhook"):
            modes = {"all": ("poll",), "poll": ("poll", "webhook"), "webhook": ("webhook",)}
            for mode in modes[args.only]:
                rounds[mode] = commit_rounds(work, kubeconfig, seen, override, args, mode)
        if args.only == "all":
            # --watch: files saved in a plain directory
            tree = work / "tree"
            write_config(tree, kubeconfig, "watch")
            proc = start_reconciler(
                ["--repo", str(tree), "--watch", "--interval", "60s", *override], work / "watch.log"
            )
            try:
                seen.wait("watch-seed-g1")
                for i in range(args.rounds):
                    name = f"w{i:03d}"
                    path = tree / "projects" / "watch" / "operations" / f"{name}.yaml"
                    tmp = path.with_suffix(".tmp")
                    tmp.write_text(OP.format(name=name))
                    tmp.rename(path)  # one atomic save, as editors do
                    saved = time.perf_counter()
                    watching.append(seen.wait(f"watch-{name}-g1") - saved)
                    time.sleep(0.5)
            finally:
                stop(proc)
        chain: list[float] = []
        cost = ""
        if args.only in ("all", "finish"):
            chain, cost = finish_to_next(
                work, kubeconfig, seen, override, args.chain, args.chain_duration
            )
        seen.stop = True

        print(f"load average: {os.getloadavg()[0]:.1f}")
        polling = rounds["poll"].new if "poll" in rounds else []
        if polling and watching:
            p50, p95 = percentiles(polling)
            w50, w95 = percentiles(watching)
            print(
                f"polling (--interval {args.interval}), push to first Job, {len(polling)} "
                f"rounds: p50 {p50:.2f} s, p95 {p95:.2f} s "
                f"(min {min(polling):.2f}, max {max(polling):.2f})"
            )
            print(
                f"--watch (saved files, inotify), save to first Job, {len(watching)} rounds: "
                f"p50 {w50:.2f} s, p95 {w95:.2f} s "
                f"(min {min(watching):.2f}, max {max(watching):.2f})"
            )
        if args.only in ("poll", "webhook"):
            for what, pick, cpu in (
                ("a new operation, push to its Job", "new", "cpu_new"),
                (
                    "a preset used by 1% changed, push to the first Job of its operations",
                    "moved",
                    "cpu_moved",
                ),
            ):
                for r in rounds.values():
                    samples: list[float] = getattr(r, pick)
                    if not samples:
                        continue
                    m50, m95 = percentiles(samples)
                    print(
                        f"{r.label(args.interval, args.webhook_interval)}, {args.ops} "
                        f"operations held, {what}, {len(samples)} rounds: p50 {m50:.2f} s, "
                        f"p95 {m95:.2f} s (min {min(samples):.2f}, max {max(samples):.2f}); "
                        f"reconciler CPU {getattr(r, cpu):.2f} s per round (user+sys, git "
                        f"children included)"
                        + ("; the machine quiet before each push" if args.quiet else "")
                    )
        if chain:
            f50, f95 = percentiles(chain)
            print(
                f"finish to next (interval 10s, debounce 200ms), a Job's end to the next Job, "
                f"{len(chain)} rounds: p50 {f50:.2f} s, p95 {f95:.2f} s "
                f"(min {min(chain):.2f}, max {max(chain):.2f}); {cost}"
            )
        if polling and watching:
            print(f"ratio watch p50 / polling p50: {w50 / p50:.2f}")
        if "poll" in rounds and "webhook" in rounds and rounds["webhook"].new:
            ratio = percentiles(rounds["webhook"].new)[0] / percentiles(polling)[0]
            print(f"ratio webhook p50 / polling p50, new operation: {ratio:.2f}")
        if chain:
            print(f"finish to next p50: {f50:.2f} s (goal <= 0.5 s)")
    finally:
        if not args.keep:
            cluster.down(progress=lambda _m: None)


if __name__ == "__main__":
    main()
