"""The dead-letter file under real faults: short writes (RLIMIT_FSIZE in a child), a
writer SIGKILLed mid-line, and the fsyncs of a created file and its directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from actors.deadletters.file import DeadLetterFile, dead_letter_line
from service.ops import dlq
from settings import load_settings
from tests.kafkautil import ROOT


def line(offset: int, pad: int = 0) -> str:
    return dead_letter_line(group="g", topic="t", partition=0, offset=offset, timestamp=0,
                            key=None, value=b"x" * pad, headers=(), processor="json_rows",
                            exc=RuntimeError("bad"), attempts=1)


def offsets(path: Path) -> list[int]:
    """Offsets of the whole lines; every line must parse (nothing glued)."""
    return [json.loads(raw)["offset"] for raw in path.read_bytes().splitlines()]


def child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)


async def test_a_short_write_leaves_no_partial_line_and_raises(tmp_path):
    """RLIMIT_FSIZE lets the append write only part of its line (a real short write, then
    EFBIG): the append fails and cuts the file back; the next line lands whole."""
    path = tmp_path / "dead.jsonl"
    await DeadLetterFile(path).write(line(0))
    limit = path.stat().st_size + 100
    result = child(f"""
        import asyncio, errno, resource, signal
        from actors.deadletters.file import DeadLetterFile
        from tests.unit.test_deadletter import line
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
        try:
            asyncio.run(DeadLetterFile({str(path)!r}).write(line(1, pad=1000)))
        except OSError as exc:
            print("failed", errno.errorcode[exc.errno])
        else:
            print("written")
    """)
    assert result.stdout.strip() == "failed EFBIG", result.stdout + result.stderr
    await DeadLetterFile(path).write(line(2))
    assert offsets(path) == [0, 2]


async def test_a_writer_killed_mid_line_never_glues_the_next_line(tmp_path):
    """A real SIGKILL of a writer that wrote half a line: ``dlq show`` reports the torn
    tail; the next append ends it with a newline (counted), later lines are intact."""
    path = tmp_path / "dead.jsonl"
    cfg = tmp_path / "kstage.yml"
    cfg.write_text(json.dumps({"kafka": {"bootstrap": "embedded"}, "groups": [{
        "group_id": "g", "failure": {"dead_letter_path": str(path)},
        "topics": [{"topic": "t", "processor": "json_rows"}]}]}))
    writer = DeadLetterFile(path)
    await writer.write(line(0))
    half = line(1).encode()[:60]
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import os, sys, time
            fd = os.open({str(path)!r}, os.O_WRONLY | os.O_APPEND)
            os.write(fd, {half!r})
            print("half", flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "half\n"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
    settings = load_settings(cfg)

    letters, unreadable = dlq.show(settings)
    assert [d.record["offset"] for d in letters] == [0] and unreadable == 1

    reopened = DeadLetterFile(path)  # e.g. the worker after a restart
    await reopened.write(line(2))
    await reopened.write(line(3))
    assert reopened.torn_tails == 1
    raw = path.read_bytes().splitlines()
    assert raw[1] == half and [json.loads(r)["offset"] for r in raw[:1] + raw[2:]] == [0, 2, 3]
    letters, unreadable = dlq.show(settings)
    assert [d.record["offset"] for d in letters] == [0, 2, 3] and unreadable == 1
    assert [d.line for d in letters] == [1, 3, 4]


async def test_created_file_and_directory_are_fsynced(tmp_path, monkeypatch):
    real_fsync = os.fsync
    synced: list[str] = []

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    path = tmp_path / "new" / "dead.jsonl"
    writer = DeadLetterFile(path)
    await writer.write(line(0))
    assert sorted(synced) == sorted([str(path), str(path.parent), str(tmp_path)])
    synced.clear()
    await writer.write(line(1))
    assert synced == [str(path)], "an append to an existing file syncs only the file"
    assert offsets(path) == [0, 1]


async def test_a_failed_fsync_undoes_the_append(tmp_path, monkeypatch):
    path = tmp_path / "dead.jsonl"
    writer = DeadLetterFile(path)
    await writer.write(line(0))
    real_fsync = os.fsync
    calls = 0

    def fsync(fd: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="Input/output"):
        await writer.write(line(1))
    await writer.write(line(2))
    assert offsets(path) == [0, 2]
