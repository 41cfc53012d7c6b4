"""Piped output: ``reconciler demo`` and ``reconciler dev-cluster build`` with stdout (and
stderr) not a terminal print plain lines, whole and readable: no live frames cut to 80
columns ("clust…"), and no Python dict or list repr (``operations: {'Succeeded': 18}``)."""

from __future__ import annotations

import io
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console
from support.harness import Harness

from reconciler.cli.output import ProgressPrinter, counts_line, plain_table
from reconciler.devcluster import build

REPR = re.compile(r"\{'|\['|': |\(\)|\.\.\.$")


def _plain(text: str) -> list[str]:
    lines = text.splitlines()
    assert lines, "nothing printed"
    for line in lines:
        assert "…" not in line, f"a line cut to a width: {line!r}"
        assert "\x1b[" not in line, f"terminal escapes in a pipe: {line!r}"
        assert not REPR.search(line), f"a Python repr in the output: {line!r}"
    return lines


def test_plain_table_aligns_every_column_at_any_width() -> None:
    rows = [("team-a", "local", "nvidia.com/gpu 2/2 (+1 borrowed)"), ("b", "", "-")]
    lines = plain_table(("queue", "cluster", "quota used/limit"), rows)
    assert lines == [
        "queue   cluster  quota used/limit",
        "team-a  local    nvidia.com/gpu 2/2 (+1 borrowed)",
        "b       -        -",
    ]


def test_counts_are_a_line_not_a_dict() -> None:
    assert counts_line({"Succeeded": 18}) == "18 (18 Succeeded)"
    assert counts_line({"Failed": 1, "Succeeded": 17}) == "18 (17 Succeeded, 1 Failed)"
    assert counts_line({}) == "0"


def test_progress_piped_prints_lines_and_a_status_line_at_most_every_interval() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(Console(file=out), plain_every=3600)
    printer.line("to build: etcd, kwok")
    printer.status("[5s] building etcd; left: kwok")
    printer.status("[10s] building etcd; left: kwok")  # within the interval: not printed
    printer.line("etcd v3.6.16: built etcd in 40s (CPU 1m10s)")
    printer.status("[45s] building kwok; left: nothing after these")  # a new step: shown
    printer.done()
    assert out.getvalue().splitlines() == [
        "to build: etcd, kwok",
        "[5s] building etcd; left: kwok",
        "etcd v3.6.16: built etcd in 40s (CPU 1m10s)",
        "[45s] building kwok; left: nothing after these",
    ]


def test_progress_on_a_terminal_keeps_the_status_on_one_line() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with ProgressPrinter(console) as printer:
        printer.line("to build: etcd")
        printer.status("[5s] building etcd; left: kwok")
        printer.status("[10s] building etcd; left: kwok")
    text = out.getvalue()
    assert "to build: etcd" in text
    assert "\x1b[" in text  # drawn in place, with cursor moves
    assert "[10s] building etcd" in text


# --- the build plan ------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_real_go(monkeypatch: pytest.MonkeyPatch) -> None:
    """FakeGo stands for every go command: the build neither looks for Go nor fetches it."""
    monkeypatch.setattr(build, "_go", lambda progress: Path("/nonexistent/go"))


class FakeGo:
    """Stands for ``go``: writes the binaries a ``go build -o dir/`` would and records what
    ran, at once or side by side."""

    def __init__(self, seconds: float = 0.05) -> None:
        self.seconds = seconds
        self.calls: list[list[str]] = []
        self.active = 0
        self.most_at_once = 0
        self.lock = threading.Lock()

    def __call__(
        self,
        go: Path,
        args: list[str],
        cwd: Path,
        what: str,
        log: Path,
    ) -> float:
        with self.lock:
            self.calls.append(args)
            self.active += 1
            self.most_at_once = max(self.most_at_once, self.active)
        time.sleep(self.seconds)
        assert args[0] == "build"
        out = Path(args[args.index("-o") + 1])
        for package in args[args.index("-o") + 2 :]:
            # `go build -o dir/ .` names the binary after the module (…/etcd)
            (out / (Path(package).name if package != "." else "etcd")).write_bytes(b"\x7fELF")
        with self.lock:
            self.active -= 1
        return 1.5


def test_build_plan_overlaps_modules_builds_kwok_after_kubernetes_and_reports_what_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECONCILER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("RECONCILER_BUILD_JOBS", "2")
    go = FakeGo()
    monkeypatch.setattr(build, "_run_go", go)
    lines: list[str] = []
    statuses: list[build.BuildStatus] = []
    timings: list[build.Built] = []
    got = build.ensure_binaries(lines.append, status=statuses.append, timings=timings, tick=0.01)
    assert got == build.cached_binaries()
    assert all(path.is_file() for path in got.all().values())
    # the four Kubernetes commands in one go build; kwok from its wrapper module
    k8s = next(c for c in go.calls if "k8s.io/kubernetes/cmd/kube-apiserver" in c)
    assert [p for p in k8s if p.startswith("k8s.io/kubernetes/cmd/")] == [
        f"k8s.io/kubernetes/cmd/{c}" for c in build.K8S_COMMANDS
    ]
    assert any("sigs.k8s.io/kwok/cmd/kwok" in c and c[0] == "build" for c in go.calls)
    assert go.most_at_once == 2
    order = [t.name for t in timings]
    assert order.index("kwok") > order.index("kubernetes")
    assert order.index("helm") > order.index("kubernetes")
    assert {t.name for t in timings} == {"kubernetes", "etcd", "kwok", "helm"}
    assert all(t.cpu == 1.5 and t.wall > 0 for t in timings)
    assert lines[0].startswith("to build: kube-apiserver, kube-controller-manager, ")
    assert any(line.startswith("kwok v0.8.0: built kwok in ") for line in lines)
    assert lines[-1].startswith("built kube-apiserver, ")
    first = statuses[0]
    assert set(first.building) == {*build.K8S_COMMANDS, "etcd"}
    assert set(first.left) == {"kwok", "helm"}
    assert first.line().startswith("[0s] building kube-apiserver, ")
    assert first.line().endswith("; left: kwok, helm")
    # built once, cached after: go never runs again
    go.calls.clear()
    build.ensure_binaries(lines.append, tick=0.01)
    assert go.calls == []


def test_a_failed_step_stops_the_plan_and_says_which(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECONCILER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("RECONCILER_BUILD_JOBS", "1")

    def failing(go: Path, args: list[str], cwd: Path, what: str, log: Path) -> float:
        raise build.BuildError(f"building {what} failed (see {log}):\nno space left")

    monkeypatch.setattr(build, "_run_go", failing)
    with pytest.raises(build.BuildError, match=r"building kube-apiserver, .* failed"):
        build.ensure_binaries(lambda _m: None, tick=0.01)


def test_dev_cluster_build_piped_prints_plain_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reconciler.cli.main import cli

    monkeypatch.setenv("RECONCILER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "_run_go", FakeGo())
    result = CliRunner().invoke(cli, ["dev-cluster", "build"])
    assert result.exit_code == 0, result.output
    lines = _plain(result.output)
    assert lines[0].startswith("to build: kube-apiserver, ")
    assert any(re.match(r"\[\d+s\] building .*; left: ", line) for line in lines)
    paths = dict(line.split("\t") for line in lines if "\t" in line)
    assert set(paths) == set(build.cached_binaries().all())


# --- the demo --------------------------------------------------------------------------------


def test_demo_piped_prints_one_line_per_cycle_a_plain_table_and_a_readable_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole ``reconciler demo`` command, its cluster and reconciler faked (the real
    ones run in tests/cluster), with stdout a pipe."""
    from support.paths import TEMPLATE

    from reconciler.adapters.repo import snapshot_worktree
    from reconciler.cli import demo_cmd
    from reconciler.core.compile import compile_repo
    from reconciler.runtime import service

    harness = Harness(compile_repo(snapshot_worktree(TEMPLATE)))

    class FakeDevCluster:
        kubeconfig = tmp_path / "admin.kubeconfig"
        logs = tmp_path / "logs"

        def __init__(self, _state_dir: Path | None) -> None:
            pass

        def up(self, progress: Any, build_status: Any) -> None:
            progress("[1/7] binaries")
            build_status(build.BuildStatus(("kwok",), ("helm",), ("etcd",), 75.0))
            progress("dev cluster ready: export KUBECONFIG=x")

    def run_forever(
        _reconciler: Any, _interval: float, stop: threading.Event, on_cycle: Any, _w: Any
    ) -> None:
        for _ in range(20):
            if stop.is_set():
                return
            on_cycle(harness.cycle())
            for namespace, name in list(harness.clusters["local"].jobs):
                harness.clusters["local"].set_phase(namespace, name, "Succeeded")

    monkeypatch.setattr(demo_cmd, "DevCluster", FakeDevCluster)
    monkeypatch.setattr(demo_cmd, "apply_prerequisites", lambda _api: None)
    monkeypatch.setattr(demo_cmd, "connect", lambda _kubeconfig: None)
    monkeypatch.setattr(demo_cmd, "run_forever", run_forever)
    monkeypatch.setattr(
        service,
        "make_runtime",
        lambda *_a, **_k: SimpleNamespace(
            reconciler=harness.reconciler,
            on_cycle=lambda _result: None,
            close=lambda: True,
            unwritten="",
        ),
    )
    result = CliRunner().invoke(demo_cmd.demo, ["--workdir", str(tmp_path / "demo")])
    assert result.exit_code == 0, result.output
    lines = _plain(result.output)
    assert "[1m15s] building kwok; left: helm" in lines
    cycles = [line for line in lines if re.match(r"\d\d:\d\d:\d\d config \w+: ", line)]
    assert len(cycles) >= 2
    assert "dispatched" in cycles[0]
    assert cycles[-1].endswith(", 0 pending")
    assert any(
        line.startswith("team-a borrows nvidia.com/gpu (h100) from cohort") for line in lines
    )
    # the fallback: sweep-lr-1 finds team-a's H100 taken by sweep-lr-0
    assert "vision/sweep-lr-1 falls back to flavor a100 of team-a: h100 has no room" in lines
    # the last queue table, every column whole, every queue a row
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("queue "))
    assert lines[header].split() == [
        "queue", "cluster", "priority", "active/limit", "quota", "used/limit",
        "running", "waiting", "pending", "head", "reason",
    ]  # fmt: skip
    queues = [q.name for q in harness.cycle().plan.queues]  # type: ignore[union-attr]
    rows = lines[header + 1 : header + 1 + len(queues)]
    assert [row.split()[0] for row in rows] == queues
    total = len(harness.cycle().states)
    assert f"operations: {total} ({total} Succeeded)" in lines
    assert lines[-1].startswith("cluster logs: ")
    assert any(line.startswith("status branch: reconciler/status in ") for line in lines)


def test_every_text_command_piped_prints_whole_lines_without_python_reprs(
    template_remote: Path, tmp_path: Path
) -> None:
    """Each command's text output (the default, and table/wide) with stdout a pipe, on the
    example repo with a real status branch."""
    from support.status_branch import write_cycle

    from reconciler.adapters.git import ConfigRepo, StatusBranch
    from reconciler.cli.main import cli

    repo = ConfigRepo(str(template_remote), cache_dir=tmp_path / "cache")
    assert write_cycle(repo, StatusBranch(repo)) is not None
    work = tmp_path / "work"
    remote = ["--repo", str(template_remote), "--cache-dir", str(tmp_path / "c")]
    commands = [
        ["validate", "--repo", str(work)],
        ["compile", "vision/train-ddp", "--repo", str(work), "-o", "table"],
        ["plan", "--repo", str(work)],
        ["status", *remote],
        ["status", "vision/train-resnet", *remote],
        ["queues", *remote],
        ["queues", *remote, "-o", "wide"],
        ["usage", *remote],
    ]
    for args in commands:
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, (args, result.output)
        lines = _plain(result.output)
        assert all(line == line.rstrip() for line in lines), args


def test_a_binary_go_names_after_its_package_gets_the_name_asked_for(tmp_path: Path) -> None:
    (tmp_path / "training-operator.v1").write_bytes(b"\x7fELF")
    (tmp_path / "kwok").write_bytes(b"\x7fELF")
    got = build._rename_outputs(
        tmp_path,
        {
            "training-operator": "github.com/kubeflow/training-operator/cmd/training-operator.v1",
            "kwok": "sigs.k8s.io/kwok/cmd/kwok",
        },
    )
    assert got == {"training-operator": tmp_path / "training-operator", "kwok": tmp_path / "kwok"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kwok", "training-operator"]
