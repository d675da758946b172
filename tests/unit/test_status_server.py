"""The status server reports an unresponsive event loop instead of hanging with it."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from actors.metrics import Metrics
from service.http import StatusServer, bind_status_server
from settings import load_settings
from settings.models import ServiceSettings


class _Master:
    def __init__(self) -> None:
        self.controls: dict[str, Any] = {}
        self.stuck: list[str] = []

    def snapshot(self) -> list[dict[str, Any]]:
        return []

    def readiness(self) -> list[str]:
        return []

    def liveness(self) -> list[str]:
        return self.stuck


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


def test_a_stuck_consumer_fails_health_even_with_a_live_event_loop() -> None:
    """The stall watch's reasons (actors.liveness) turn /healthz 503, the first one as
    the reason; they are read without the event loop (this one never runs)."""
    loop = asyncio.new_event_loop()
    master = _Master()
    server = StatusServer(master, Metrics(), loop, "127.0.0.1", 0)  # type: ignore[arg-type]
    server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        master.stuck = ["g/t[0]: lag 9, the offset 40 has not moved for 11s", "g/t[1]: ..."]
        health = httpx.get(f"{base}/healthz")
        assert health.status_code == 503
        assert health.json() == {"status": "unhealthy", "reason": master.stuck[0],
                                 "reasons": master.stuck}
        master.stuck = []
        assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
        assert httpx.get(f"{base}/status").status_code == 404  # no control token: off
        assert httpx.post(f"{base}/groups/g/topics/t/pause").status_code == 404
    finally:
        server.stop()
        loop.close()


def test_taken_ports_move_the_server_on_and_say_so(caplog: pytest.LogCaptureFixture) -> None:
    """http_port and the next http_port_tries - 1 ports held by other processes: the next
    attempts go to any free port, never to an exit."""
    loop = asyncio.new_event_loop()
    first = _Master(), Metrics(), loop
    held = [StatusServer(*first, "127.0.0.1", 0)]  # type: ignore[arg-type]
    port = held[0].port
    try:
        try:
            held.append(StatusServer(*first, "127.0.0.1", port + 1))  # type: ignore[arg-type]
        except OSError:
            pytest.skip(f"port {port + 1} is not free here")
        two = ServiceSettings(http_port=port, http_host="127.0.0.1", http_port_tries=2)
        with caplog.at_level(logging.WARNING, logger="service.http"):
            server = bind_status_server(*first, two)  # type: ignore[arg-type]
        held.append(server)
        assert server.port not in (port, port + 1)
        assert (f"service.http_port {port} on 127.0.0.1 and the 1 port(s) after it are in use: "
                f"the status server of this process (pid {os.getpid()}) is on port "
                f"{server.port} instead") in caplog.text
        three = ServiceSettings(http_port=port, http_host="127.0.0.1", http_port_tries=3)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="service.http"):
            nearby = bind_status_server(*first, three)  # type: ignore[arg-type]
        held.append(nearby)
        if nearby.port == port + 2:  # free unless another process took it meanwhile
            assert f"is on port {port + 2} instead" in caplog.text
    finally:
        for server in held:
            server.stop()
        loop.close()


def test_the_status_server_listens_on_loopback_only_by_default() -> None:
    """It has no authentication: by default no other interface reaches it. 127.0.0.2 is
    another address of the host (the whole 127/8 is local): a server on every interface
    answers there, one bound to 127.0.0.1 refuses."""
    loop = asyncio.new_event_loop()
    # port 0 would disable the server: take a free port, let the server retry past it
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = bind_status_server(_Master(), Metrics(), loop,  # type: ignore[arg-type]
                                ServiceSettings(http_port=port))
    server.start()
    try:
        assert httpx.get(f"http://127.0.0.1:{server.port}/healthz").status_code == 200
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.2:{server.port}/healthz", timeout=5)
    finally:
        server.stop()
        loop.close()


def test_the_container_images_bind_every_interface_explicitly() -> None:
    """Loopback inside a container is unreachable from outside it: the Dockerfile and the
    compose file set http_host to every interface themselves, and say why."""
    root = Path(__file__).resolve().parents[2]
    dockerfile = (root / "Dockerfile").read_text().splitlines()
    env = [i for i, line in enumerate(dockerfile)
           if line.strip() == "ENV KSTAGE_SERVICE__HTTP_HOST=0.0.0.0"]
    assert env and "no authentication" in " ".join(dockerfile[env[0] - 4:env[0]])
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    environment = compose["services"]["kstage"]["environment"]
    assert environment["KSTAGE_SERVICE__HTTP_HOST"] == "0.0.0.0"  # noqa: S104
    assert "no authentication" in (root / "docker-compose.yml").read_text()
    settings = load_settings(root / "examples" / "configs" / "compose.yml",
                             environment)
    assert settings.service.http_host == "0.0.0.0"  # noqa: S104 - what the test checks
