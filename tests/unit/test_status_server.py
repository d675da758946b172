"""The status server reports an unresponsive event loop instead of hanging with it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from actors.metrics import Metrics
from service.http import StatusServer


class _Master:
    def snapshot(self) -> list[dict[str, Any]]:
        return []

    def readiness(self) -> list[str]:
        return []


def test_stale_heartbeat_and_stopped_loop_make_health_and_readiness_fail() -> None:
    loop = asyncio.new_event_loop()  # never run: like a loop blocked by a processor
    server = StatusServer(_Master(), Metrics(), loop, "127.0.0.1", 0)  # type: ignore[arg-type]
    server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
        server.heartbeat = time.monotonic() - 10
        health = httpx.get(f"{base}/healthz")
        assert health.status_code == 503
        assert health.json()["reason"].startswith("event loop unresponsive for 10.")
        ready = httpx.get(f"{base}/readyz", timeout=10)
        assert ready.status_code == 503 and "event loop" in ready.json()["reasons"][0]
        assert httpx.get(f"{base}/metrics", timeout=10).status_code == 503
        assert httpx.get(f"{base}/nope").status_code == 404
    finally:
        server.stop()
        loop.close()
