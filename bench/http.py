"""HTTP sink benchmark: kstage's http sink against a raw httpx loop, same server, one run.

50k events go to a local HTTP server that answers at once, in batches of 100 events per
request, with 8 requests in flight:

(a) raw: one ``httpx.AsyncClient`` posting the prebuilt batches (the same JSON rows
    kstage sends, with an idempotency header) with a semaphore of 8;
(b) kstage: ``kstage run --drain`` consuming the events from an 8-partition topic on
    the embedded broker, ``json_rows`` processor, ``sink: {type: http, batch:
    {max_events: 100}, max_concurrency: 8}``, commits after the API answered.

The server runs in its own process (so neither side shares a GIL with it) and timestamps
every request; each side is timed at the server from its first to its last request, so
both are measured the same way and kstage's start-up and group join are excluded.
Last line: ``ratio=<kstage events/s / raw events/s>``; the target is >= 0.8.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path and this module
# (named http.py, as the issue asks) would shadow the standard library's http package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]

import argparse
import asyncio
import json
import subprocess
import tempfile
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BATCH = 100
CONCURRENCY = 8
PARTITIONS = 8


# -- the server (separate process) -----------------------------------------------------

class _Stats:
    requests = 0
    events = 0
    first = 0.0
    last = 0.0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        now = time.time()
        if self.path == "/reset":
            _Stats.requests = _Stats.events = 0
        else:
            _Stats.first = _Stats.first if _Stats.requests else now
            _Stats.last = now
            _Stats.requests += 1
            data = json.loads(body)
            _Stats.events += len(data) if isinstance(data, list) else 1
        self._reply(b"")

    def do_GET(self) -> None:
        self._reply(json.dumps({"requests": _Stats.requests, "events": _Stats.events,
                                "first": _Stats.first, "last": _Stats.last}).encode())

    def _reply(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def serve(port: int) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    server.daemon_threads = True
    print("ready", flush=True)
    server.serve_forever()


# -- the benchmark ---------------------------------------------------------------------

def rows(n: int, topic: str) -> list[dict[str, Any]]:
    return [{"id": i, "urn": f"urn:li:dataset:(urn:li:dataPlatform:hive,db.t{i % 997},PROD)",
             "actor": "urn:li:corpuser:etl", "ts": 1_700_000_000_000 + i,
             "_topic": topic, "_partition": i % PARTITIONS, "_offset": i // PARTITIONS,
             "_timestamp": 1_700_000_000_000 + i} for i in range(n)]


async def stats(client: Any, url: str) -> dict[str, Any]:
    return dict((await client.get(f"{url}/stats")).json())


async def run_raw(url: str, batches: list[bytes]) -> None:
    import httpx

    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    slots = asyncio.Semaphore(CONCURRENCY)
    async with httpx.AsyncClient(timeout=10, limits=limits) as client:
        async def post(i: int, body: bytes) -> None:
            async with slots:
                r = await client.post(f"{url}/hook", content=body, headers={
                    "Content-Type": "application/json", "Idempotency-Key": f"raw-{i}"})
                r.raise_for_status()
        await asyncio.gather(*(post(i, b) for i, b in enumerate(batches)))


async def bench(n: int, url: str, workdir: Path) -> tuple[float, float]:
    import httpx
    import yaml
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from service.broker import EmbeddedBroker

    topic = f"bench-http-{uuid.uuid4().hex[:8]}"
    data = rows(n, topic)
    batches = [json.dumps(data[i:i + BATCH]).encode() for i in range(0, n, BATCH)]
    async with httpx.AsyncClient() as client:
        await client.post(f"{url}/reset", content=b"{}")
        await run_raw(url, batches)
        raw = await stats(client, url)
        assert raw["events"] == n, raw
        raw_rate = n / (raw["last"] - raw["first"])
        print(f"raw httpx: {raw_rate:.0f} events/s ({raw['requests']} requests)", flush=True)

        with EmbeddedBroker() as broker:
            admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
            await admin.start()
            await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
            await admin.close()
            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20)
            await producer.start()
            for i in range(n):
                await producer.send(topic, json.dumps({k: v for k, v in data[i].items()
                                                       if not k.startswith("_")}).encode(),
                                    partition=i % PARTITIONS)
            await producer.flush()
            await producer.stop()
            cfg = workdir / "kstage.yml"
            cfg.write_text(yaml.safe_dump({
                "name": "bench-http", "kafka": {"bootstrap": broker.bootstrap},
                "service": {"http_port": 0},
                "groups": [{
                    "group_id": f"bench-http-{uuid.uuid4().hex[:6]}",
                    "session_timeout_ms": 6000, "heartbeat_interval_ms": 500,
                    "commit": {"mode": "batch", "max_messages": 1000, "max_interval_s": 5},
                    "topics": [{"topic": topic, "processor": "json_rows", "format": "json",
                                "sink": {"type": "http", "url": f"{url}/hook",
                                         "batch": {"max_events": BATCH, "max_interval_s": 1},
                                         "max_concurrency": CONCURRENCY}}],
                }],
            }))
            await client.post(f"{url}/reset", content=b"{}")
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "service", "run", "-c", str(cfg), "--drain",
                cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            code = await asyncio.wait_for(proc.wait(), 300)
            assert code == 0, f"kstage exited {code}"
            ks = await stats(client, url)
    assert ks["events"] == n, ks
    ks_rate = n / (ks["last"] - ks["first"])
    print(f"kstage http sink: {ks_rate:.0f} events/s ({ks['requests']} requests)", flush=True)
    return raw_rate, ks_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return
    from service.broker import free_port

    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        with tempfile.TemporaryDirectory() as tmp:
            raw, ks = asyncio.run(bench(args.events, f"http://127.0.0.1:{port}", Path(tmp)))
    finally:
        server.kill()
        server.wait()
    print(f"ratio={ks / raw:.2f}")


if __name__ == "__main__":
    main()
