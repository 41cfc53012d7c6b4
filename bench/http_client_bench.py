"""One create's CPU in the reconciler's process, by HTTP client, on a real API server.

Creates N Jobs (suspended: no pods, so the control plane does no more than store them) on
one thread through ``Kube._create``, the reconciler's own create, with its answer sent by:

- http1: ``adapters/http1.py``, as the reconciler does;
- urllib3: urllib3 on the same connection pool (``_urllib3_client.py``);
- aiohttp: aiohttp's client (its C parser, llhttp) with the same TLS settings, on an event
  loop of its own thread, each create handed to it and waited for, as the reconciler's
  create threads would have to;
- aiohttp-native: the same session, the creates awaited one after the other in one
  coroutine on that loop (the request ``Kube._post`` builds, the same decode of the
  answer): aiohttp at its best, as a reconciler written for asyncio would use it.

Rounds alternate the clients (each goes first in turn), so a change of the machine's load
falls on all of them. The cost of a create is the process's CPU (``time.process_time``:
every thread, the event loop's included) over the round, divided by N; the figure is each
client's median over its rounds, with the ratios to http1.

    PYTHONPATH=$PWD python bench/http_client_bench.py [-n 300] [--rounds 6]
        [--kubeconfig K] [--clients http1,urllib3,aiohttp,aiohttp-native]

Without ``--kubeconfig``, on a fresh dev cluster of its own, torn down after.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import ssl
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _measure as m
import _urllib3_client

from reconciler.adapters import http1
from reconciler.adapters.kube import _CREATE_PATHS, _CREATED, Kube, _parse, connect
from reconciler.devcluster.shape import NodePool

NAMESPACE = "http-bench"
POOLS = (NodePool("bench", count=1, cpu="100", memory="400Gi", pods=110),)
HTTP1 = (http1.request, http1.stream)


class AiohttpClient:
    """``http1.request`` by aiohttp on a loop thread of its own."""

    def __init__(self, configuration: Any) -> None:
        import aiohttp

        self._aiohttp = aiohttp
        context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        if configuration.cert_file:
            context.load_cert_chain(configuration.cert_file, configuration.key_file)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.base = configuration.host

        async def session() -> Any:
            return aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=context, limit=8),
                auto_decompress=True,
            )

        self.session = asyncio.run_coroutine_threadsafe(session(), self.loop).result()

    def request(
        self,
        _pool: Any,
        method: str,
        target: str,
        _host: str,
        headers: dict[str, str],
        body: bytes,
        *,
        connect_timeout: float,
        read_timeout: float,
    ) -> http1.Answer:
        aiohttp = self._aiohttp
        timeout = aiohttp.ClientTimeout(sock_connect=connect_timeout, sock_read=read_timeout)

        async def send() -> http1.Answer:
            async with self.session.request(
                method, self.base + target, headers=headers, data=body, timeout=timeout
            ) as resp:
                data = await resp.read()
                return http1.Answer(
                    resp.status,
                    resp.reason or "",
                    {k.lower(): v for k, v in resp.headers.items()},
                    data,
                )

        return asyncio.run_coroutine_threadsafe(send(), self.loop).result()

    def native_round(self, kube: Kube, manifests: list[dict[str, Any]]) -> None:
        """The creates of ``Kube._post`` (the same request, the same decode of the
        answer) awaited one after the other in one coroutine on the loop: aiohttp at its
        best, as an asyncio reconciler would use it, with no thread handing it work."""
        timeout = self._aiohttp.ClientTimeout(sock_connect=5.0, sock_read=30.0)

        async def creates() -> None:
            for manifest in manifests:
                method, url, headers, _, _ = kube.api.param_serialize(
                    "POST",
                    _CREATE_PATHS["Job"],
                    path_params={"namespace": NAMESPACE},
                    query_params=[("fieldManager", kube.field_manager)],
                    header_params={
                        "Accept": "application/json",
                        "Content-Type": "application/json",
                    },
                    auth_settings=["BearerToken"],
                )
                async with self.session.request(
                    method, url, headers=headers, data=orjson.dumps(manifest), timeout=timeout
                ) as resp:
                    data = await resp.read()
                if not 200 <= resp.status <= 299:
                    raise RuntimeError(f"create: {resp.status} {data[:200]!r}")
                _parse(data, _CREATED)

        asyncio.run_coroutine_threadsafe(creates(), self.loop).result()

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.session.close(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()


def use(client: str, aio: AiohttpClient | None) -> None:
    http1.request, http1.stream = HTTP1
    if client == "urllib3":
        _urllib3_client.install()
    elif client == "aiohttp" and aio is not None:
        http1.request = aio.request  # type: ignore[assignment]


def job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"bench": "http"}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "command": ["true"],
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                        }
                    ],
                }
            },
        },
    }


def round_cost(kube: Kube, prefix: str, n: int, native: AiohttpClient | None = None) -> float:
    """Process CPU seconds per create over ``n`` creates (with ``native``, aiohttp's
    coroutine in place of ``Kube._create``)."""
    manifests = [job(f"{prefix}-{i}") for i in range(n)]
    started = time.process_time()
    if native is not None:
        native.native_round(kube, manifests)
    else:
        for manifest in manifests:
            kube._create("Job", NAMESPACE, manifest)
    return (time.process_time() - started) / n


def measure(kubeconfig: Path, clients: list[str], n: int, rounds: int) -> dict[str, list[float]]:
    api = connect(kubeconfig)
    kube = Kube(api)
    kube.ensure_namespace(NAMESPACE)
    aio = AiohttpClient(api.configuration) if {"aiohttp", "aiohttp-native"} & set(clients) else None
    costs: dict[str, list[float]] = {c: [] for c in clients}
    try:
        for client in clients:  # warm: a connection each, the code paths loaded
            use(client, aio)
            round_cost(kube, f"warm-{client}", 20, aio if client == "aiohttp-native" else None)
        for r in range(rounds):
            order = clients[r % len(clients) :] + clients[: r % len(clients)]
            for client in order:
                use(client, aio)
                native = aio if client == "aiohttp-native" else None
                cost = round_cost(kube, f"r{r}-{client}", n, native)
                costs[client].append(cost)
                m.say(
                    f"round {r + 1}/{rounds} {client:<14} {1e6 * cost:7.0f} µs CPU a create; "
                    f"load {os.getloadavg()[0]:.1f}"
                )
    finally:
        use("http1", aio)
        if aio is not None:
            aio.close()
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=300, help="creates per client per round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--kubeconfig", type=Path, default=None)
    parser.add_argument("--clients", default="http1,urllib3,aiohttp,aiohttp-native")
    args = parser.parse_args()
    clients = args.clients.split(",")
    m.say(
        f"http clients: {', '.join(clients)}, {args.n} creates a round, {args.rounds} rounds, "
        f"{os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.1f}"
    )
    cluster = None
    work = m.temp_dir("http-bench-")
    kubeconfig = args.kubeconfig
    try:
        if kubeconfig is None:
            from reconciler.devcluster.cluster import DevCluster

            cluster = DevCluster(work / "cluster")
            cluster.up(POOLS, progress=lambda _m: None)
            kubeconfig = cluster.kubeconfig
        costs = measure(kubeconfig, clients, args.n, args.rounds)
    finally:
        if cluster is not None:
            cluster.down(progress=lambda _m: None)
        shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(costs[clients[0]])
    for client in clients:
        values = costs[client]
        ratios = m.pair_ratios(values, costs[clients[0]])
        m.say(
            f"{client:<14} median {1e6 * statistics.median(values):.0f} µs CPU a create "
            f"(spread {1e6 * min(values):.0f}-{1e6 * max(values):.0f}); "
            f"/{clients[0]} per round: {m.ratio_summary(ratios).text()}; "
            f"of medians {statistics.median(values) / base:.2f}"
        )
    m.say(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
