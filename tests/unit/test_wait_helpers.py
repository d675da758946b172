"""The suite's waits (tests/kafkautil.py): ``wait_until`` pauses longer after a costly
check, so its polling takes at most a ninth of a core; ``KstageProcess.output`` reads
only what the process wrote since its last call, and keeps a character whose bytes
arrive in two reads whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kafkautil import POLL_MAX_S, POLL_S, KstageProcess, poll_pause, wait_until


def test_a_cheap_check_is_polled_every_tenth_of_a_second() -> None:
    assert poll_pause(0.0) == POLL_S == 0.1
    assert poll_pause(0.01) == POLL_S


def test_a_costly_check_is_polled_less_often_up_to_a_second() -> None:
    assert poll_pause(0.05) == pytest.approx(0.4)  # 50 ms of CPU per 450 ms: a ninth
    assert poll_pause(5.0) == POLL_MAX_S == 1.0


async def test_wait_until_returns_once_true_and_names_what_it_waited_for() -> None:
    calls = []
    await wait_until(lambda: calls.append(1) or len(calls) == 3, timeout=10)
    assert len(calls) == 3
    with pytest.raises(AssertionError, match="timed out after 0.2s waiting for the moon"):
        await wait_until(lambda: False, timeout=0.2, what="the moon")


async def test_output_reads_what_was_appended_and_splits_no_character(tmp_path: Path) -> None:
    config = tmp_path / "kstage.yml"
    config.write_text("name: x\n")  # refused: no groups
    proc = KstageProcess(config)
    try:
        assert await proc.wait(timeout=60) != 0
        before = proc.output()
        assert before  # its refusal
        with open(proc.log, "ab") as log:
            log.write(b"caf" + "é".encode()[:1])
        assert proc.output() == before + "caf"
        with open(proc.log, "ab") as log:
            log.write("é".encode()[1:] + b"!\n")
        assert proc.output() == before + "café!\n"
    finally:
        proc.close()
