"""Measuring helpers shared by bench/e2e_dispatch.py and bench/kueue_side_by_side.py.

One *run* is one side (the raw client, the reconciler, or Kueue) dispatching N Jobs on a
fresh dev cluster of its own. Around the run's window (from "go" to every pod Running) it
records:

- the wall time to all Jobs admitted (existing and not suspended) and to all pods Running,
  seen by an independent watcher (one watch on Jobs, one on Pods; the same on each side);
- the CPU seconds of each process of the run, from ``/proc/<pid>/stat``: etcd, the
  apiserver, the controller-manager, the scheduler, kwok, the dispatching client (or the
  reconciler), and Kueue when it runs;
- the machine's busy time from ``/proc/stat``, less that of the run's own processes and of
  this bench process: the CPU *other* processes used. A run during which they used more
  than ``OTHERS_LIMIT`` cores is flagged;
- the apiserver's ``apiserver_request_total`` before and after, by verb and resource.

The parsing and the arithmetic (``parse_*``, ``median``, ``ratio_summary``...) are pure and
unit-tested (tests/meta/test_bench_measure.py); the rest does the I/O.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

OTHERS_LIMIT = 0.2  # cores other processes may use during a run before it is flagged
BENCH_DIR = Path(__file__).resolve().parent
DISPATCHER = BENCH_DIR / "_dispatcher.py"

# The order processes are printed in; "client" is the raw loop or the reconciler.
PROCESS_ORDER = (
    "kube-apiserver",
    "etcd",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "kueue",
    "client",
)

# The dispatching process's threads, by the prefix of their names (``threading``'s), in the
# order printed: the cycles, the watch caches, the creates, the status writer...
THREAD_GROUPS = (
    ("MainThread", "main"),
    ("reconcile-loop", "main"),  # `reconciler run`'s loop (--events): the cycles
    ("informer-", "watches"),
    ("create", "creates"),
    ("status-writer", "status writer"),
    ("annotate", "annotations"),
    ("events", "events"),
)

# --- pure parsing and arithmetic --------------------------------------------------------


def thread_group(name: str) -> str:
    """The group a thread's CPU is reported under (``THREAD_GROUPS``; "other" for the rest:
    the bench's own stdin reader, the raw client's pool)."""
    for prefix, group in THREAD_GROUPS:
        if name.startswith(prefix):
            return group
    return "other"


def group_thread_seconds(
    before: Mapping[str, float], after: Mapping[str, float], names: Mapping[str, str]
) -> dict[str, float]:
    """CPU seconds per thread group between two snapshots of ``{tid: seconds}``; ``names``
    gives each tid's thread name. A thread started in between counts from zero; one ended
    in between is not in ``after``, and its CPU is lost (the pools' threads live on)."""
    out: dict[str, float] = {}
    for tid, seconds in after.items():
        group = thread_group(names.get(tid, ""))
        out[group] = out.get(group, 0.0) + seconds - before.get(tid, 0.0)
    return {g: out[g] for g in sorted(out, key=_group_rank)}


def _group_rank(group: str) -> int:
    order = [g for _, g in THREAD_GROUPS]
    return order.index(group) if group in order else len(order)


def parse_cpu_line(stat_text: str) -> tuple[int, int]:
    """``(busy, total)`` jiffies of the aggregate ``cpu`` line of /proc/stat. Busy is all
    but idle and iowait; guest time is already counted in user and nice."""
    for line in stat_text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            break
    else:
        raise ValueError("/proc/stat has no aggregate 'cpu ' line")
    # user nice system idle iowait irq softirq steal [guest guest_nice]
    values = (values + [0] * 8)[:8]
    total = sum(values)
    idle = values[3] + values[4]
    return total - idle, total


def parse_pid_ticks(pid_stat_text: str) -> int:
    """utime + stime (clock ticks) of one /proc/<pid>/stat line. The command name may hold
    spaces and parentheses, so the fields are counted from the last ')'."""
    rest = pid_stat_text[pid_stat_text.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state); utime and stime are fields 14 and 15
    return int(rest[11]) + int(rest[12])


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_request_totals(metrics_text: str) -> dict[str, float]:
    """``apiserver_request_total`` summed by ``"VERB resource[/subresource]"`` from the
    apiserver's Prometheus text (codes, scopes and versions added together)."""
    totals: dict[str, float] = {}
    for line in metrics_text.splitlines():
        if not line.startswith("apiserver_request_total"):
            continue
        match = _SAMPLE.match(line)
        if not match or match["name"] != "apiserver_request_total":
            continue
        labels = dict(_LABEL.findall(match["labels"] or ""))
        resource = labels.get("resource", "")
        if not resource:  # a non-resource URL: its path is in "subresource"
            resource = labels.get("subresource", "") or "(none)"
        elif labels.get("subresource"):
            resource += "/" + labels["subresource"]
        key = f"{labels.get('verb', '?')} {resource}"
        totals[key] = totals.get(key, 0.0) + float(match["value"])
    return totals


def diff_counts(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """``after - before`` per key, without the keys that did not move."""
    out = {}
    for key in sorted(set(before) | set(after)):
        delta = after.get(key, 0.0) - before.get(key, 0.0)
        if delta:
            out[key] = delta
    return out


def others_cores(busy_seconds: float, ours_seconds: float, wall: float) -> float:
    """Cores the other processes of the machine used on average over ``wall`` seconds."""
    return max(0.0, busy_seconds - ours_seconds) / wall if wall > 0 else 0.0


@dataclass(frozen=True, slots=True)
class RatioSummary:
    median: float
    low: float
    high: float
    count: int

    def text(self) -> str:
        return f"median {self.median:.2f} (spread {self.low:.2f}-{self.high:.2f}, {self.count})"


def ratio_summary(ratios: Iterable[float]) -> RatioSummary:
    """Median and range of per-pair ratios."""
    values = sorted(ratios)
    if not values:
        raise ValueError("no ratios")
    return RatioSummary(statistics.median(values), values[0], values[-1], len(values))


def pair_ratios(numerators: list[float], denominators: list[float]) -> list[float]:
    """``numerators[i] / denominators[i]`` for each pair where both are measured."""
    return [a / b for a, b in zip(numerators, denominators, strict=True) if a and b]


def rate_vs_ceiling(count: int, last_admission: float, concurrency: int, duration: float) -> float:
    """Admissions per second (``count`` by the last admission's time) as a fraction of the
    ceiling C/D a queue of ``concurrency`` slots and ``duration``-second operations allows."""
    if last_admission <= 0:
        return 0.0
    return (count / last_admission) / (concurrency / duration)


# --- one run's figures ------------------------------------------------------------------


@dataclass
class RunResult:
    side: str
    n: int
    admitted: float = 0.0  # seconds from go to every Job admitted (exists, not suspended)
    running: float = 0.0  # seconds from go to every pod Running (0: not reached)
    dispatched: float = 0.0  # seconds the client took to issue its creates (its own view)
    cpu: dict[str, float] = field(default_factory=dict)  # process -> CPU seconds in window
    requests: dict[str, float] = field(default_factory=dict)  # "VERB resource" -> count
    wall: float = 0.0  # the window: go to the end of the observation
    others: float = 0.0  # cores used by other processes during the window
    load: float = 0.0  # 1-minute load average at the end
    admissions: list[float] = field(default_factory=list)  # per Job, seconds from go
    note: str = ""
    threads: dict[str, float] = field(default_factory=dict)  # the client's, by group, in window
    full_gcs: tuple[int, float] = (0, 0.0)  # the client's full collections in window, seconds

    @property
    def flagged(self) -> bool:
        return self.others > OTHERS_LIMIT

    def per_op_ms(self) -> dict[str, float]:
        return {name: 1000 * s / self.n for name, s in self.cpu.items()}

    def total_cpu(self) -> float:
        return sum(self.cpu.values())

    def requests_per_op(self) -> float:
        return sum(self.requests.values()) / self.n

    def line(self) -> str:
        flag = f"  FLAG: others used {self.others:.2f} cores" if self.flagged else ""
        running = f"{self.running:.1f} s" if self.running else "not reached"
        text = (
            f"{self.side:<11} N={self.n}: all admitted {self.admitted:.1f} s, all Running "
            f"{running}, CPU/op {1000 * self.total_cpu() / self.n:.1f} ms, requests/op "
            f"{self.requests_per_op():.2f}; others {self.others:.2f} cores, load "
            f"{self.load:.1f}{flag}"
        )
        return text + (f"\n{'':<12}{self.client_line()}" if self.threads else "")

    def client_line(self) -> str:
        """The dispatching process in the window: its CPU per operation, per thread group,
        and its full collections (the cyclic GC's oldest generation)."""
        client = 1000 * self.cpu.get("client", 0.0) / self.n
        threads = ", ".join(f"{g} {1000 * s / self.n:.2f}" for g, s in self.threads.items())
        count, seconds = self.full_gcs
        return (
            f"client {client:.2f} ms/op in {self.wall:.0f} s; threads ms/op: {threads}; "
            f"full GCs {count} ({1000 * seconds / self.n:.2f} ms/op)"
        )


def print_costs(results: list[RunResult], out: IO[str] = sys.stdout) -> None:
    """CPU ms per op per process and requests per op by verb and resource, each side's
    median over its runs."""
    sides: dict[str, list[RunResult]] = {}
    for r in results:
        sides.setdefault(r.side, []).append(r)
    names = [p for p in PROCESS_ORDER if any(p in r.cpu for r in results)]
    header = f"{'CPU ms per op (median)':<26}" + "".join(f"{s:>12}" for s in sides)
    print(header, file=out)
    for name in [*names, "total"]:
        cells = []
        for runs in sides.values():
            values = [
                1000 * (r.total_cpu() if name == "total" else r.cpu.get(name, 0.0)) / r.n
                for r in runs
            ]
            cells.append(f"{statistics.median(values):>12.2f}")
        print(f"  {name:<24}" + "".join(cells), file=out)
    keys = sorted({k for r in results for k in r.requests})
    print(f"{'requests per op (median)':<26}" + "".join(f"{s:>12}" for s in sides), file=out)
    for key in keys:
        cells = []
        for runs in sides.values():
            per_op = statistics.median(r.requests.get(key, 0.0) / r.n for r in runs)
            cells.append(f"{per_op:>12.3f}")
        if any(float(c) >= 0.0005 for c in cells):
            print(f"  {key:<24}" + "".join(cells), file=out)
    cells = [
        f"{statistics.median(r.requests_per_op() for r in runs):>12.2f}" for runs in sides.values()
    ]
    print(f"  {'total':<24}" + "".join(cells), file=out)


# --- I/O: /proc, /metrics, the watcher --------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK")


def read_busy_seconds() -> float:
    return parse_cpu_line(Path("/proc/stat").read_text())[0] / TICK


def read_pid_seconds(pid: int) -> float | None:
    try:
        return parse_pid_ticks(Path(f"/proc/{pid}/stat").read_text()) / TICK
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return None


def read_tree_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and its live descendants (a wrapper exec-ing a binary, or a
    process with helpers)."""
    total = read_pid_seconds(pid) or 0.0
    for child in _children(pid):
        total += read_tree_seconds(child)
    return total


def read_own_threads() -> dict[str, float]:
    """CPU seconds of each live thread of this process, ``{tid: seconds}``."""
    out: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            out[task.name] = parse_pid_ticks((task / "stat").read_text()) / TICK
        except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
            continue
    return out


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            text = (task / "children").read_text()
            out += [int(c) for c in text.split()]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


@dataclass(frozen=True)
class Snapshot:
    at: float
    busy: float
    per_process: dict[str, float]
    requests: dict[str, float]


class Sampler:
    """Snapshots the CPU of named processes (and their children), the machine's busy time
    and the apiserver's request counters."""

    def __init__(self, api: ApiClient, pids: Mapping[str, int]) -> None:
        self.api = api
        self.pids = dict(pids)

    def snap(self) -> Snapshot:
        requests = parse_request_totals(self.api.get("/metrics"))
        per = {name: read_tree_seconds(pid) for name, pid in self.pids.items()}
        per["bench"] = read_pid_seconds(os.getpid()) or 0.0
        return Snapshot(time.monotonic(), read_busy_seconds(), per, requests)


def fill_window(result: RunResult, before: Snapshot, after: Snapshot) -> None:
    wall = after.at - before.at
    cpu = {
        name: after.per_process.get(name, 0.0) - before.per_process.get(name, 0.0)
        for name in before.per_process
    }
    ours = sum(cpu.values())
    cpu.pop("bench", None)  # the watcher and this script: counted as ours, not reported
    result.cpu = cpu
    result.wall = wall
    result.others = others_cores(after.busy - before.busy, ours, wall)
    result.requests = diff_counts(before.requests, after.requests)
    result.load = os.getloadavg()[0]


class ApiClient:
    """Plain HTTPS to the dev cluster's apiserver with its admin client cert."""

    def __init__(self, cluster: Any) -> None:
        url = cluster.api_url()
        if url is None:
            raise RuntimeError("the dev cluster is not up")
        self.host, port = url.removeprefix("https://").split(":")
        self.port = int(port)
        self.ctx = ssl.create_default_context(cafile=str(cluster.pki.ca_cert))
        self.ctx.load_cert_chain(cluster.pki.client_cert("admin"), cluster.pki.client_key("admin"))

    def connection(self, timeout: float | None = 30.0) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)

    def request(self, method: str, path: str, body: Any = None, ctype: str = "") -> bytes:
        conn = self.connection()
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": ctype or "application/json"} if data else {}
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
            if resp.status >= 300:
                raise RuntimeError(f"{method} {path}: {resp.status} {payload[:300]!r}")
            return payload
        finally:
            conn.close()

    def get(self, path: str) -> str:
        return self.request("GET", path).decode()

    def get_json(self, path: str) -> Any:
        return json.loads(self.request("GET", path))


class Watcher:
    """An independent observer: one watch on the namespace's Jobs, one on its Pods. Records
    when each Job was first seen admitted (existing with ``spec.suspend`` not true) and when
    each Pod was first seen Running, in ``time.monotonic()`` seconds."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.admitted: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.finished: dict[str, float] = {}  # Jobs seen Complete or Failed
        self.active_peak = 0  # the most Jobs admitted and not finished at once
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._watch, args=(path, fn), daemon=True)
            for path, fn in (
                (f"/apis/batch/v1/namespaces/{namespace}/jobs", self._on_job),
                (f"/api/v1/namespaces/{namespace}/pods", self._on_pod),
            )
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self, path: str, on_object: Callable[[dict[str, Any], float], None]) -> None:
        version = self.api.get_json(path + "?limit=1")["metadata"]["resourceVersion"]
        while not self._stop.is_set():
            conn = self.api.connection(timeout=None)
            try:
                conn.request(
                    "GET",
                    f"{path}?watch=1&allowWatchBookmarks=true&resourceVersion={version}"
                    "&timeoutSeconds=600",
                )
                resp = conn.getresponse()
                while not self._stop.is_set():
                    line = resp.readline()
                    if not line:
                        break
                    event = json.loads(line)
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        raise RuntimeError(f"watch {path}: {obj}")
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        on_object(obj, time.monotonic())
            finally:
                conn.close()

    def _on_job(self, job: dict[str, Any], now: float) -> None:
        name = job["metadata"]["name"]
        with self._lock:
            if name not in self.admitted and not job["spec"].get("suspend"):
                self.admitted[name] = now
            conditions = job.get("status", {}).get("conditions") or []
            if name not in self.finished and any(
                c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conditions
            ):
                self.finished[name] = now
            self.active_peak = max(self.active_peak, len(self.admitted) - len(self.finished))
            self._lock.notify_all()

    def _on_pod(self, pod: dict[str, Any], now: float) -> None:
        name = pod["metadata"]["name"]
        with self._lock:
            if name not in self.running and pod.get("status", {}).get("phase") in (
                "Running",
                "Succeeded",
            ):
                self.running[name] = now
                self._lock.notify_all()

    def wait(self, what: str, count: int, timeout: float) -> float | None:
        """The time the ``count``-th Job was admitted / pod Running / Job finished, or
        None after ``timeout`` seconds."""
        seen = {"admitted": self.admitted, "running": self.running, "finished": self.finished}[what]
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(seen) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._lock.wait(min(left, 1.0))
            return sorted(seen.values())[count - 1]


# --- the dispatching client, in a process of its own -----------------------------------


class Dispatcher:
    """``bench/_dispatcher.py`` in a child process: it prepares (renders the manifests, or
    writes the config repo), says ``ready``, dispatches on ``go``, says ``dispatched``, and
    keeps running (the reconciler keeps cycling) until ``stop``; asked ``snap``, it says
    the CPU of each of its threads and its full collections since ``go``. Its CPU is read
    from /proc like the cluster's processes, so the interpreter's start-up is not counted.
    ``code``: a directory whose ``reconciler`` package it runs instead of this checkout's
    (to compare two versions with the same bench)."""

    def __init__(self, args: list[str], log: Path, code: str = "") -> None:
        env = dict(os.environ)
        paths = [code] if code else []
        paths += [str(BENCH_DIR.parent), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        self._log = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(DISPATCHER), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
        )
        self.dispatched_at: float | None = None
        self._snaps: list[dict[str, Any]] = []
        self._said = threading.Condition()
        self._reader: threading.Thread | None = None

    def _read(self) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def _expect(self, what: str) -> dict[str, Any]:
        message = self._read()
        if message is None:
            raise RuntimeError(f"the dispatcher exited before {what!r}; see {self._log.name}")
        if message.get("event") == "error":
            raise RuntimeError(f"the dispatcher failed: {message.get('error')}")
        if message.get("event") != what:
            raise RuntimeError(f"the dispatcher said {message}, expected {what!r}")
        return message

    def wait_ready(self) -> None:
        self._expect("ready")

    def _send(self, word: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()

    def go(self) -> None:
        self._send("go")

        def read() -> None:
            while (message := self._read()) is not None:
                event = message.get("event")
                if event == "dispatched":
                    self.dispatched_at = float(message["at"])
                elif event == "snap":
                    with self._said:
                        self._snaps.append(message)
                        self._said.notify_all()
                elif event == "error":
                    print(f"  the dispatcher failed: {message.get('error')}", flush=True)

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()

    def snap(self, timeout: float = 30.0) -> dict[str, Any] | None:
        """Its threads' CPU seconds by group and its full collections since ``go``."""
        with self._said:
            count = len(self._snaps)
            self._send("snap")
            self._said.wait_for(lambda: len(self._snaps) > count, timeout)
            return self._snaps[-1] if len(self._snaps) > count else None

    def stop(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            self._send("stop")
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


class Profiler:
    """``py-spy record --gil -r 50`` attached to a process, raw (collapsed) stacks to
    ``out``, until ``stop``."""

    def __init__(self, pid: int, out: Path) -> None:
        self.proc = subprocess.Popen(
            ["py-spy", "record", "--gil", "-r", "50", "-p", str(pid), "-f", "raw", "-o", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# The control plane's components that serve Go's /debug/pprof when the dev cluster runs
# with profiling on: their port's name in the cluster's state, and their scheme.
PPROF_PORTS = (
    ("kube-apiserver", "apiserver", "https"),
    ("etcd", "etcd", "http"),
    ("kube-controller-manager", "kcm", "https"),
    ("kube-scheduler", "scheduler", "https"),
)


def add_pprof_options(parser: Any) -> None:
    """``--pprof DIR [--pprof-seconds S]``, read into ``RunSpec.pprof``/``pprof_seconds``."""
    parser.add_argument(
        "--pprof", default="", help="a directory for the control plane's Go CPU profiles"
    )
    parser.add_argument("--pprof-seconds", type=float, default=20.0, help="from go")


class GoProfiles:
    """A CPU profile of each control-plane component over the first ``seconds`` of the
    window (``/debug/pprof/profile``), written to ``out_dir/<label>-<component>.pprof``.
    Read them with ``go tool pprof -top <file>``."""

    def __init__(self, cluster: Any, out_dir: Path, label: str, seconds: float) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        ports = cluster._read_state()["ports"]
        ctx = ssl.create_default_context()
        ctx.check_hostname = False  # self-signed serving certs of the controllers
        ctx.verify_mode = ssl.CERT_NONE
        ctx.load_cert_chain(cluster.pki.client_cert("admin"), cluster.pki.client_key("admin"))
        self.files: list[Path] = []
        self.errors: list[str] = []
        self.threads: list[threading.Thread] = []
        for name, port, scheme in PPROF_PORTS:
            out = out_dir / f"{label}-{name}.pprof"
            url = f"{scheme}://127.0.0.1:{ports[port]}/debug/pprof/profile?seconds={seconds:.0f}"
            thread = threading.Thread(target=self._fetch, args=(url, out, ctx), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _fetch(self, url: str, out: Path, ctx: ssl.SSLContext) -> None:
        import urllib.request

        try:
            with urllib.request.urlopen(url, context=ctx, timeout=600) as resp:
                out.write_bytes(resp.read())
            self.files.append(out)
        except OSError as exc:
            self.errors.append(f"{url}: {exc}")

    def join(self) -> None:
        for thread in self.threads:
            thread.join()
        for error in self.errors:
            say(f"  pprof: {error}")
        for path in sorted(self.files):
            say(f"  pprof: {path}")


def temp_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


def say(message: str) -> None:
    print(message, flush=True)


# --- one run, on a fresh dev cluster ----------------------------------------------------


@dataclass
class Extra:
    """A process started beside the cluster for one side (Kueue): its pid and a stop."""

    name: str
    pid: int
    stop: Callable[[], None]


@dataclass
class RunSpec:
    side: str  # the label printed: raw, reconciler, kueue
    dispatcher: str  # raw | reconciler
    n: int
    workers: int = 8
    interval: float = 2.0
    duration: str = "1h"  # kwok's simulated run time of each pod
    gpus: int = 0  # per Job
    quota_gpus: int = 0  # the reconciler queue's quota (binding case)
    kueue_queue: str = ""  # create suspended, labelled for this LocalQueue
    until: str = "running"  # running | finished (the binding case)
    events: bool = False  # the reconciler runs `reconciler run`'s loop (cycles on events)
    timeout: float = 600.0
    namespace: str = "bench"
    code: str = ""  # the reconciler package's directory (default: this checkout's)
    profile: str = ""  # a file for py-spy's raw stacks of the dispatching process
    pprof: str = ""  # a directory for the control plane's Go CPU profiles (GoProfiles)
    pprof_seconds: float = 20.0
    label: str = ""  # the profiles' file prefix (default: the side)
    client: str = ""  # the reconciler's HTTP client: http1 (default) or urllib3


def run_side(
    spec: RunSpec,
    pools: tuple[Any, ...],
    *,
    start_extra: Callable[[Any, ApiClient, Path], Extra] | None = None,
    keep: bool = False,
) -> RunResult:
    """One side on a fresh dev cluster of its own, torn down afterwards."""
    from reconciler.devcluster.cluster import DevCluster

    work = temp_dir(f"bench-{spec.side}-")
    cluster = DevCluster(work / "cluster", profiling=bool(spec.pprof))
    cluster.up(pools, progress=lambda _m: None)
    go_profiles: GoProfiles | None = None
    extra: Extra | None = None
    dispatcher: Dispatcher | None = None
    watcher: Watcher | None = None
    profiler: Profiler | None = None
    result = RunResult(spec.side, spec.n)
    try:
        api = ApiClient(cluster)
        pids = {p.name: p.pid for p in cluster.processes()}
        if start_extra is not None:
            extra = start_extra(cluster, api, work)
            pids[extra.name] = extra.pid
        argv = [
            spec.dispatcher,
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--namespace",
            spec.namespace,
            "-n",
            str(spec.n),
            "-w",
            str(spec.workers),
            "--interval",
            str(spec.interval),
            "--duration",
            spec.duration,
            "--gpus",
            str(spec.gpus),
            "--quota-gpus",
            str(spec.quota_gpus),
        ]
        if spec.kueue_queue:
            argv += ["--kueue-queue", spec.kueue_queue]
        if spec.events:
            argv.append("--events")
        if spec.client:
            argv += ["--client", spec.client]
        dispatcher = Dispatcher(argv, work / "dispatcher.log", code=spec.code)
        dispatcher.wait_ready()
        watcher = Watcher(api, spec.namespace)
        watcher.start()
        time.sleep(1.0)  # the watches are open before the first create
        pids["client"] = dispatcher.proc.pid
        sampler = Sampler(api, pids)
        if spec.profile:
            profiler = Profiler(dispatcher.proc.pid, Path(spec.profile))
        before = sampler.snap()
        go = before.at
        if spec.pprof:
            label = spec.label or spec.side
            go_profiles = GoProfiles(cluster, Path(spec.pprof), label, spec.pprof_seconds)
        dispatcher.go()
        admitted = watcher.wait("admitted", spec.n, spec.timeout)
        result.admitted = (admitted - go) if admitted is not None else 0.0
        end = watcher.wait(spec.until, spec.n, spec.timeout)
        if spec.until == "running":
            result.running = (end - go) if end is not None else 0.0
        else:
            running = watcher.wait("running", spec.n, 0.0)
            result.running = (running - go) if running is not None else 0.0
        after = sampler.snap()
        own = dispatcher.snap()
        if profiler is not None:
            profiler.stop()
            profiler = None
        fill_window(result, before, after)
        if go_profiles is not None:
            go_profiles.join()
        if own is not None:
            result.threads = dict(own["threads"])
            result.full_gcs = (int(own["full_gcs"]), float(own["full_gc_seconds"]))
        if dispatcher.dispatched_at is not None:
            result.dispatched = dispatcher.dispatched_at - go
        result.admissions = sorted(t - go for t in watcher.admitted.values())
        result.note = f"peak admitted-and-unfinished {watcher.active_peak}"
        if admitted is None or end is None:
            result.note += f"; TIMED OUT after {spec.timeout:.0f} s"
        return result
    finally:
        if profiler is not None:
            profiler.stop()
        if watcher is not None:
            watcher.stop()
        if dispatcher is not None:
            dispatcher.stop()
        if extra is not None:
            extra.stop()
        if not keep:
            cluster.down(progress=lambda _m: None)
            shutil.rmtree(work, ignore_errors=True)


def binding_line(result: RunResult, concurrency: int, duration: float) -> str:
    """The binding case's figures: admissions per second against the ceiling C/D."""
    last = result.admissions[-1] if result.admissions else 0.0
    fraction = rate_vs_ceiling(len(result.admissions), last, concurrency, duration)
    rate = len(result.admissions) / last if last else 0.0
    return (
        f"{result.side:<11} binding: {len(result.admissions)} Jobs of {duration:g} s, quota "
        f"{concurrency} GPUs: last admitted at {last:.1f} s = {rate:.1f}/s against C/D "
        f"{concurrency / duration:.1f} = {fraction:.2f} of the ceiling; {result.note}; "
        f"others {result.others:.2f} cores" + ("  FLAG" if result.flagged else "")
    )


def binding_fraction(result: RunResult, concurrency: int, duration: float) -> float:
    last = result.admissions[-1] if result.admissions else 0.0
    return rate_vs_ceiling(len(result.admissions), last, concurrency, duration)
