"""The queue pages in a real browser (headless Debian chromium driven by playwright),
served by ``reconciler run --http`` on the seed example against the dev cluster.

Ops are made long-running so they stay active while the pages are read; screenshots are
saved under the test's tmp_path."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright
from support.cluster import KubeCluster
from support.helpers import wait_until
from support.reconciler_env import make_long_running, start_run

from reconciler.adapters.kube import Kube
from reconciler.devcluster.cluster import free_port

pytestmark = [pytest.mark.cluster, pytest.mark.browser, pytest.mark.timeout(300)]

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]


def _json(url: str) -> object | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read())
    except (OSError, urllib.error.HTTPError, ValueError):
        return None


def _dispatched(base: str) -> bool:
    data = _json(base + "/api/v1/queues")
    if not isinstance(data, dict):
        return False
    queues = {q["name"]: q for q in data["queues"]}
    return bool(queues) and queues["team-a"]["quota"][0]["used"] == "3"


def test_queue_pages_in_chromium(
    kube: Kube, config_repo: Path, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(
            f"{CHROMIUM} is missing: scripts/bootstrap installs it "
            "(the README's test command runs it first)"
        )
    make_long_running(config_repo, "*")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_run(
        config_repo,
        kube_cluster.kubeconfig,
        tmp_path / "run.log",
        "--http",
        f"127.0.0.1:{port}",
        cache_dir=tmp_path / "cache",
    )
    try:
        wait_until(lambda: _dispatched(base), timeout=90, what="the first dispatch")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                _browse(browser.new_page(), base, tmp_path)
            finally:
                browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _row(page, queue: str) -> str:  # type: ignore[no-untyped-def]
    return str(page.locator(f'tr[data-queue="{queue}"]').inner_text())


def _browse(page, base: str, out: Path) -> None:  # type: ignore[no-untyped-def]
    page.goto(base + "/")
    page.wait_for_selector('tr[data-queue="batch"]')
    assert page.locator("h1").inner_text() == "Queues"
    team_a, team_b, batch = _row(page, "team-a"), _row(page, "team-b"), _row(page, "batch")
    # a bar per flavor: team-a's H100 and an H100 borrowed from team-b, its A100; team-b's
    # ops pin A100 (2 of its 2), its H100s idle (one lent)
    assert "h100 nvidia.com/gpu 2/1 (+1 borrowed)" in team_a
    assert "a100 nvidia.com/gpu 1/1" in team_a
    assert "QuotaExceeded" in team_a or "BorrowingNotAllowed" in team_a  # sweep-lr-2
    assert "h100 nvidia.com/gpu 0/2 (1 lent)" in team_b and "a100 nvidia.com/gpu 2/2" in team_b
    assert "3/3" in batch.split("\t")[3]  # the count-limited queue: active/limit
    order = page.locator("tr[data-queue]").evaluate_all("rows => rows.map(r => r.dataset.queue)")
    assert order == ["notebooks", "sandboxes", "team-a", "team-b", "gpu-fleet", "batch"]
    assert "fleet (all clusters)" in page.locator('[data-fleet="*"]').inner_text()
    # the page refreshes itself by polling its <main>
    with page.expect_response(lambda r: "partial=main" in r.url, timeout=15_000) as polled:
        pass
    assert polled.value.status == 200
    page.wait_for_selector('tr[data-queue="team-a"]')
    assert "h100 nvidia.com/gpu 2/1 (+1 borrowed)" in _row(page, "team-a")
    page.screenshot(path=str(out / "queues.png"), full_page=True)

    page.locator('tr[data-queue="team-a"] a').first.click()
    page.wait_for_selector("h1:has-text('Queue team-a')")
    body = page.locator("main").inner_text()
    assert "queues/team-a.yaml:" in body and "initial config" in body  # blame
    assert "admitted when 1 a100 GPU is released by" in body  # per flavor
    page.screenshot(path=str(out / "queue-team-a.png"), full_page=True)

    active = page.locator("h2:has-text('Active operations') + table a").first
    op_id = active.inner_text()
    active.click()
    page.wait_for_selector(f"h1:has-text('Operation {op_id}')")
    body = page.locator("main").inner_text()
    for section in ("Phase history", "Logs (tail)", "where each field came from"):
        assert section in body, section
    assert "preset " in body and "team-a" in body
    assert "simulated container log" in page.locator("#logs").inner_text()  # kwok serves it
    assert "Recorded on the status branch" in body and "status commit" in body
    page.screenshot(path=str(out / "operation.png"), full_page=True)
    assert (out / "queues.png").stat().st_size > 1000
