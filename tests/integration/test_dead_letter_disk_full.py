"""Fault matrix, "dead-letter disk full": the dead-letter file on a real full disk (a
64 KiB tmpfs), poison messages from the real broker through a real worker."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.master import Master
from service.ops import dlq
from settings import load_settings
from tests.http_server import HttpTestServer
from tests.kafkautil import (
    committed,
    produce,
    read_jsonl,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.kafka

PAGE = 4096


async def wait_blocked(master: Master, run: asyncio.Task[None]) -> str:
    """The worker's reason once it reports a failing dead-letter write."""
    def reason() -> str | None:
        return next((w["dead_letter_error"] for w in master.snapshot()
                     if w.get("dead_letter_error")), None)

    await wait_until(lambda: reason() is not None or run.done(), timeout=60,
                     what="the worker to report the failing dead-letter write")
    assert not run.done(), "the worker moved on although the line was not written"
    found = reason()
    assert found is not None
    return found


async def cancel(run: asyncio.Task[None]) -> None:
    """Teardown: cancel a run a failed test left behind (or collect its error)."""
    run.cancel()
    with contextlib.suppress(BaseException):
        await run


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (we run as root), unmounted at teardown."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)],
                   check=True, capture_output=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True, capture_output=True)


async def test_a_full_disk_holds_the_message_until_its_line_lands(
        fresh, broker, tmp_path, small_disk):
    topic, group = fresh.topic, fresh.group
    # Two poison messages whose lines (~12 KiB each) do not fit in the 8 KiB left: the
    # first append is a real short write (8 KiB), then ENOSPC.
    poison = b"\xff" + b"x" * 9000
    await produce(broker, topic, [{"i": 0}, poison, poison, {"i": 3}])
    filler = small_disk / "filler"
    filler.write_bytes(b"f" * (14 * PAGE))
    dead = small_disk / "dead.jsonl"
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "test_flaky",
                         "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}],
                       failure={"mode": "continue", "dead_letter_path": str(dead)})
    settings = load_settings(cfg)
    master = Master(settings, broker, drain=True)
    run = asyncio.create_task(master.run())
    try:
        reason = await wait_blocked(master, run)
        assert "No space left on device" in reason and str(dead) in reason
        assert any(reason in why for why in master.readiness()), "shown in /readyz"
        assert dead.read_bytes() == b"", "no partial line stays behind"
        assert (await committed(broker, group, topic, 1))[0] <= 1, "poison not committed"
        filler.unlink()  # space again: the retried line lands, then the next one
        await asyncio.wait_for(run, 90)
    finally:
        await cancel(run)
    assert [d["offset"] for d in read_jsonl(dead)] == [1, 2], "whole lines, none glued"
    assert [r["i"] for r in read_jsonl(tmp_path / "out.jsonl")] == [0, 3]
    assert (await committed(broker, group, topic, 1))[0] == 4
    letters, unreadable = dlq.show(settings)
    assert [d.record["offset"] for d in letters] == [1, 2] and unreadable == 0


async def test_a_stop_while_the_disk_is_full_leaves_the_poison_uncommitted(
        fresh, broker, tmp_path, small_disk):
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, [{"i": 0}, b"\xffpoison", {"i": 2}])
    (small_disk / "filler").write_bytes(b"f" * (16 * PAGE))  # not one byte left
    dead = small_disk / "dead.jsonl"
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "test_flaky",
                         "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}],
                       failure={"mode": "continue", "dead_letter_path": str(dead)})
    master = Master(load_settings(cfg), broker)
    run = asyncio.create_task(master.run())
    try:
        await wait_blocked(master, run)
        master.stop()
        await asyncio.wait_for(run, 30)
    finally:
        await cancel(run)
    assert not dead.exists() or dead.read_bytes() == b""
    assert [r["i"] for r in read_jsonl(tmp_path / "out.jsonl")] == [0]
    assert (await committed(broker, group, topic, 1))[0] == 1, "up to the poison, not past"


async def test_a_row_the_sink_refuses_waits_for_its_dead_letter_line(
        fresh, broker, tmp_path, small_disk):
    """The sink's path (an HTTP 400): the batch is not acked, nor the row sent again,
    until the refused row's line is written."""
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, [{"i": 0}, {"i": 1, "pad": "x" * 9000}, {"i": 2}])
    filler = small_disk / "filler"
    filler.write_bytes(b"f" * (14 * PAGE))
    dead = small_disk / "dead.jsonl"
    with HttpTestServer() as api:
        api.respond(200)
        api.respond(400, body="invalid event")
        cfg = write_config(tmp_path / "kstage.yml", broker, group,
                           [{"topic": topic, "processor": "json_rows",
                             "sink": {"type": "http", "url": f"{api.url}/hook"}}],
                           failure={"mode": "continue", "dead_letter_path": str(dead)})
        master = Master(load_settings(cfg), broker, drain=True)
        run = asyncio.create_task(master.run())
        try:
            assert "No space left on device" in await wait_blocked(master, run)
            assert dead.read_bytes() == b"", "no partial line stays behind"
            assert (await committed(broker, group, topic, 1))[0] <= 1
            filler.unlink()
            await asyncio.wait_for(run, 90)
        finally:
            await cancel(run)
        sent = [r.json["i"] for r in api.requests]
    assert sent == [0, 1, 2], "the refused row was not sent again"
    assert [(d["offset"], d["status"]) for d in read_jsonl(dead)] == [(1, 400)]
    assert (await committed(broker, group, topic, 1))[0] == 3
