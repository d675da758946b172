"""``kstage dlq replay`` into a sink that is not pipelined (jsonl) hands the letters over
one write at a time: a slow first write must not let the next letter land before it."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from actors.deadletters.file import dead_letter_line
from actors.sinks.files import JsonlSink


def test_a_slow_jsonl_write_keeps_the_replayed_letters_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first write is held until a second write starts (the bug: the replay handed
    every letter over at once and the jsonl sink's writes raced) or for 1 s (none does:
    the replay waits for each write); the lines must keep the letters' offsets' order."""
    from service.ops import dlq
    from settings import load_settings

    out, dead = tmp_path / "out.jsonl", tmp_path / "dead.jsonl"
    cfg = tmp_path / "kstage.yml"
    cfg.write_text(json.dumps({"groups": [{
        "group_id": "g", "failure": {"dead_letter_path": str(dead)},
        "topics": [{"topic": "t", "processor": "json_rows",
                    "sink": {"type": "jsonl", "path": str(out)}}]}]}))
    dead.write_text("".join(dead_letter_line(
        group="g", topic="t", partition=0, offset=o, timestamp=0, key=None,
        value=json.dumps({"i": o}).encode(), headers=(), processor="json_rows",
        exc=RuntimeError("sink down"), attempts=1) + "\n" for o in range(3)))

    real, calls, second = JsonlSink._write, [], threading.Event()

    def slow_first(self: JsonlSink, data: bytes) -> None:
        calls.append(data)
        if len(calls) == 1:
            second.wait(1.0)  # a slow sink: the first write is still going
        else:
            second.set()
        real(self, data)

    monkeypatch.setattr(JsonlSink, "_write", slow_first)
    result = dlq.replay(load_settings(cfg))
    assert (len(result.replayed), len(result.failed)) == (3, 0)
    assert [json.loads(x)["i"] for x in out.read_text().splitlines()] == [0, 1, 2]
