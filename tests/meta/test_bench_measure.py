"""The pure parts of bench/_measure.py: /proc and /metrics parsing, the ratio arithmetic.
No cluster and no timing: these are the numbers the benchmarks print, so they are tested."""

from __future__ import annotations

import importlib.util
import io
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_measure", BENCH / "_measure.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["_measure"] = module
    spec.loader.exec_module(module)
    return module


measure = _load()

PROC_STAT = """\
cpu  1000 20 300 5000 80 10 5 2 0 0
cpu0 500 10 150 2500 40 5 3 1 0 0
cpu1 500 10 150 2500 40 5 2 1 0 0
intr 12345 0 0
ctxt 999
"""

METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="",verb="POST",version="v1"} 40
apiserver_request_total{code="409",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="status",verb="PUT",version="v1"} 7
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/healthz",verb="GET",version=""} 3
apiserver_request_total_other{verb="POST",resource="jobs"} 100
apiserver_request_duration_seconds_count{verb="POST",resource="jobs"} 42
apiserver_request_total{code="201",group="",resource="events",subresource="",verb="POST",version="v1"} 1.5e+01
"""  # noqa: E501


def test_parse_cpu_line_counts_all_but_idle_and_iowait() -> None:
    busy, total = measure.parse_cpu_line(PROC_STAT)
    assert total == 1000 + 20 + 300 + 5000 + 80 + 10 + 5 + 2
    assert busy == total - 5000 - 80


def test_parse_cpu_line_refuses_text_without_the_aggregate_line() -> None:
    with pytest.raises(ValueError, match="aggregate"):
        measure.parse_cpu_line("cpu0 1 2 3 4\n")


def test_parse_pid_ticks_survives_spaces_and_parens_in_the_name() -> None:
    # fields after the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt
    # cmajflt utime stime ...
    line = "4242 (kube (api) server) S 1 2 3 0 -1 4194560 10 0 0 0 123 45 0 0 20 0 9 0 777"
    assert measure.parse_pid_ticks(line) == 123 + 45


def test_parse_pid_ticks_reads_this_process() -> None:
    text = Path(f"/proc/{os.getpid()}/stat").read_text()
    assert measure.parse_pid_ticks(text) >= 0


def test_parse_request_totals_sums_by_verb_and_resource() -> None:
    totals = measure.parse_request_totals(METRICS)
    assert totals == {
        "POST jobs": 42.0,  # codes added together
        "PUT jobs/status": 7.0,
        "GET /healthz": 3.0,  # a non-resource URL keeps its path
        "POST events": 15.0,
    }


def test_diff_counts_keeps_what_moved() -> None:
    before = {"POST jobs": 10.0, "GET /healthz": 3.0}
    after = {"POST jobs": 510.0, "GET /healthz": 3.0, "POST events": 20.0}
    assert measure.diff_counts(before, after) == {"POST jobs": 500.0, "POST events": 20.0}


def test_others_cores_is_busy_time_less_ours_over_wall() -> None:
    assert measure.others_cores(30.0, 20.0, 50.0) == pytest.approx(0.2)
    assert measure.others_cores(10.0, 12.0, 5.0) == 0.0  # sampling skew never goes negative
    assert measure.others_cores(1.0, 0.0, 0.0) == 0.0


def test_ratio_summary_median_and_spread() -> None:
    summary = measure.ratio_summary([0.9, 0.5, 1.2, 0.7, 0.8])
    assert (summary.median, summary.low, summary.high, summary.count) == (0.8, 0.5, 1.2, 5)
    assert summary.text() == "median 0.80 (spread 0.50-1.20, 5)"
    assert measure.ratio_summary([1.0, 2.0]).median == 1.5
    with pytest.raises(ValueError):
        measure.ratio_summary([])


def test_pair_ratios_skip_unmeasured_pairs() -> None:
    # raw times over reconciler times: the reconciler's rate relative to raw
    assert measure.pair_ratios([10.0, 0.0, 9.0], [20.0, 5.0, 9.0]) == [0.5, 1.0]
    with pytest.raises(ValueError):
        measure.pair_ratios([1.0], [1.0, 2.0])


def test_rate_vs_ceiling() -> None:
    # 400 admitted by 50 s = 8/s against C/D = 100/10 = 10/s
    assert measure.rate_vs_ceiling(400, 50.0, 100, 10.0) == pytest.approx(0.8)
    assert measure.rate_vs_ceiling(400, 0.0, 100, 10.0) == 0.0


def _result(side: str, cpu: dict[str, float], requests: dict[str, float], others: float = 0.0):  # type: ignore[no-untyped-def]
    result = measure.RunResult(side, 100, admitted=10.0, running=20.0)
    result.cpu = cpu
    result.requests = requests
    result.others = others
    return result


def test_run_result_costs_per_op_and_flag() -> None:
    result = _result(
        "raw",
        {"kube-apiserver": 2.0, "client": 0.5},
        {"POST jobs": 100.0, "POST events": 50.0},
        others=0.3,
    )
    assert result.per_op_ms() == {"kube-apiserver": 20.0, "client": 5.0}
    assert result.requests_per_op() == 1.5
    assert result.flagged
    assert "FLAG: others used 0.30 cores" in result.line()
    assert not _result("raw", {}, {"POST jobs": 1.0}, others=0.2).flagged


def test_print_costs_shows_each_side_in_process_order() -> None:
    out = io.StringIO()
    measure.print_costs(
        [
            _result("raw", {"client": 0.1, "kube-apiserver": 3.0}, {"POST jobs": 100.0}),
            _result(
                "reconciler",
                {"client": 0.4, "kube-apiserver": 3.2},
                {"POST jobs": 100.0, "POST events": 100.0},
            ),
        ],
        out,
    )
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["CPU", "ms", "per", "op", "(median)", "raw", "reconciler"]
    assert lines[1].split() == ["kube-apiserver", "30.00", "32.00"]
    assert lines[2].split() == ["client", "1.00", "4.00"]
    assert lines[3].split() == ["total", "31.00", "36.00"]
    assert ["POST", "events", "0.000", "1.000"] in [line.split() for line in lines]
    assert lines[-1].split() == ["total", "1.00", "2.00"]


def test_threads_are_grouped_by_the_prefix_of_their_names() -> None:
    names = {
        "1": "MainThread",
        "2": "informer-Job",
        "3": "informer-Pod",
        "4": "create_0",
        "5": "status-writer",
        "6": "bench-stdin",
    }
    before = {"1": 1.0, "2": 0.5, "3": 0.25}  # 4-6 started in the window
    after = {"1": 3.0, "2": 1.5, "3": 0.75, "4": 2.0, "5": 0.5, "6": 0.01, "7": 0.125}
    grouped = measure.group_thread_seconds(before, after, names)
    assert grouped == {
        "main": 2.0,
        "watches": 1.5,
        "creates": 2.0,
        "status writer": 0.5,
        "other": 0.135,  # the stdin reader and a thread with no name known
    }
    assert list(grouped) == ["main", "watches", "creates", "status writer", "other"]


def test_the_client_line_gives_each_thread_group_per_operation() -> None:
    result = measure.RunResult("reconciler", 1000, wall=60.0)
    result.cpu = {"client": 2.5}
    result.threads = {"main": 1.25, "watches": 0.5}
    result.full_gcs = (3, 0.25)
    assert result.client_line() == (
        "client 2.50 ms/op in 60 s; threads ms/op: main 1.25, watches 0.50; full GCs 3 (0.25 ms/op)"
    )
    assert result.client_line() in result.line()
