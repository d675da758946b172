"""Unit tests of the ``csv`` sink: files, header, escaping, idempotent retries, cut writes.

No broker: the sink is built from its settings through kstage's sink registry (which also
checks the entry point) and driven directly, or by kstage's own sink loop (``run_sink``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import csv
import errno
import io
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from actors.errors import SinkError
from actors.offsets import Entry
from actors.sinks import END, SinkBatch, SinkContext, build_sink, registry, run_sink
from aiokafka.structs import TopicPartition
from processors.base import Column
from pydantic import ValidationError

from kstage_example_sink import CsvSink, CsvSinkSettings


def make_sink(out: Path, context: SinkContext | None = None, **settings: Any) -> CsvSink:
    sink = build_sink({"type": "csv", "dir": str(out), **settings})
    assert isinstance(sink, CsvSink)
    sink.bind(context or SinkContext(topic="orders"))
    return sink


def row(offset: int, partition: int = 0, topic: str = "orders", **fields: Any) -> dict[str, Any]:
    return {"id": f"o-{offset}", **fields, "_topic": topic, "_partition": partition,
            "_offset": offset, "_timestamp": 1_700_000_000_000 + offset}


def read(path: Path, delimiter: str = ",") -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh, delimiter=delimiter))


def listing(out: Path) -> list[str]:
    """Every entry of ``out``, hidden temporary files included."""
    return sorted(os.listdir(out))


def name(topic: str, partition: int, first: int, last: int) -> str:
    return f"{topic}-{partition}-{first:019d}-{last:019d}.csv"


def test_the_entry_point_names_the_sink() -> None:
    assert "csv" in registry.available()
    assert registry.load("csv") is CsvSink
    assert CsvSink.settings_model is CsvSinkSettings


async def test_one_file_per_partition_named_by_topic_partition_and_offsets(
        tmp_path: Path) -> None:
    sink = make_sink(tmp_path / "out")
    await sink.open()
    await sink.write([row(7, partition=2), row(8, partition=2), row(9, partition=2)])
    await sink.write([row(10, partition=2)])
    await sink.close()
    assert listing(tmp_path / "out") == [name("orders", 2, 7, 9), name("orders", 2, 10, 10)]
    assert read(tmp_path / "out" / name("orders", 2, 7, 9)) == [
        ["id", "_topic", "_partition", "_offset", "_timestamp"],
        ["o-7", "orders", "2", "7", "1700000000007"],
        ["o-8", "orders", "2", "8", "1700000000008"],
        ["o-9", "orders", "2", "9", "1700000000009"],
    ]


async def test_rows_of_several_partitions_in_one_write_get_a_file_each(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    await sink.write([row(3, partition=0), row(5, partition=1), row(4, partition=0)])
    assert listing(tmp_path) == [name("orders", 0, 3, 4), name("orders", 1, 5, 5)]
    assert [r[3] for r in read(tmp_path / name("orders", 0, 3, 4))[1:]] == ["3", "4"]


async def test_the_header_is_the_declared_columns_in_order_then_the_other_keys(
        tmp_path: Path) -> None:
    context = SinkContext(topic="orders", columns=(Column("total", "double"), Column("id"),
                                                   Column("note")))
    sink = make_sink(tmp_path, context)
    await sink.write([row(0, total=1.5), row(1, total=2, extra="x")])
    header, first, second = read(tmp_path / name("orders", 0, 0, 1))
    assert header == ["total", "id", "note", "_topic", "_partition", "_offset", "_timestamp",
                      "extra"]
    assert first == ["1.5", "o-0", "", "orders", "0", "0", "1700000000000", ""]
    assert second == ["2", "o-1", "", "orders", "0", "1", "1700000000001", "x"]


@pytest.mark.parametrize("delimiter", [",", ";", "\t", "|"])
async def test_values_are_escaped_and_read_back(tmp_path: Path, delimiter: str) -> None:
    tricky: dict[str, Any] = {
        "text": f'a{delimiter}b "quoted"\nsecond line\r\nthird',
        "unicode": "Zürich ✓",
        "empty": "",
        "none": None,
        "raw": b"\x00\xff,\n\"",
        "flag": True,
        "nested": {"k": [1, None, "v,w"]},
        "small": -3,
    }
    sink = make_sink(tmp_path, delimiter=delimiter)
    await sink.write([row(0, **tricky)])
    header, values = read(tmp_path / name("orders", 0, 0, 0), delimiter)
    got = dict(zip(header, values, strict=True))
    assert got["text"] == tricky["text"]
    assert got["unicode"] == "Zürich ✓"
    assert got["empty"] == "" and got["none"] == ""
    assert base64.b64decode(got["raw"]) == tricky["raw"]
    assert got["flag"] == "true"
    assert json.loads(got["nested"]) == {"k": [1, None, "v,w"]}
    assert got["small"] == "-3"


async def test_a_retried_write_replaces_the_same_file_with_the_same_bytes(
        tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    rows = [row(i, partition=1) for i in range(5)]
    await sink.write(rows)
    first = (tmp_path / name("orders", 1, 0, 4)).read_bytes()
    await sink.write(rows)  # what the sink loop does when a write raised after the rename
    assert listing(tmp_path) == [name("orders", 1, 0, 4)]
    assert (tmp_path / name("orders", 1, 0, 4)).read_bytes() == first


async def test_rows_without_coordinates_go_to_a_file_named_by_their_content(
        tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    rows = [{"id": "a"}, {"id": "b"}]
    await sink.write(rows)
    await sink.write(rows)
    (only,) = listing(tmp_path)
    assert only.startswith("orders-") and only.endswith(".csv")
    assert read(tmp_path / only) == [["id"], ["a"], ["b"]]


async def test_an_empty_write_writes_nothing(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    await sink.write([])
    assert listing(tmp_path) == []


def test_settings_refuse_unknown_keys_and_bad_values() -> None:
    with pytest.raises(ValidationError, match="delimter"):
        registry.settings_for({"type": "csv", "dir": "out", "delimter": ";"})
    with pytest.raises(ValidationError, match="dir"):
        registry.settings_for({"type": "csv"})
    with pytest.raises(ValidationError, match="delimiter"):
        registry.settings_for({"type": "csv", "dir": "out", "delimiter": ";;"})
    with pytest.raises(ValidationError, match="double quote"):
        registry.settings_for({"type": "csv", "dir": "out", "delimiter": '"'})
    with pytest.raises(ValidationError, match="fsync"):
        registry.settings_for({"type": "csv", "dir": "out", "fsync": "sometimes"})
    settings = registry.settings_for({"type": "csv", "dir": "out", "delimiter": ";",
                                      "fsync": False})
    assert settings == CsvSinkSettings(dir="out", delimiter=";", fsync=False)


class _FailingFsync:
    """``os.fsync`` that fails with EIO ``times`` times (the data was written: the write
    is cut short before it is durable), then is the real one."""

    def __init__(self, times: int) -> None:
        self.times = times
        self.real = os.fsync

    def __call__(self, fd: int) -> None:
        if self.times > 0:
            self.times -= 1
            raise OSError(errno.EIO, "Input/output error (injected)")
        self.real(fd)


async def test_a_write_cut_short_leaves_no_file_and_the_retry_succeeds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "fsync", _FailingFsync(times=1))
    sink = make_sink(tmp_path)
    rows = [row(i) for i in range(3)]
    with pytest.raises(SinkError, match="Input/output error"):
        await sink.write(rows)
    assert listing(tmp_path) == [], "no final file and no temporary file left"
    await sink.write(rows)
    assert listing(tmp_path) == [name("orders", 0, 0, 2)]
    assert len(read(tmp_path / name("orders", 0, 0, 2))) == 4


async def test_kstages_sink_loop_retries_the_failed_write_until_it_lands(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failing = _FailingFsync(times=2)
    monkeypatch.setattr(os, "fsync", failing)
    sink = make_sink(tmp_path)
    batch = SinkBatch([row(i, partition=3) for i in range(4)],
                      Entry(TopicPartition("orders", 3), next_offset=4, count=4))
    mailbox: asyncio.Queue[SinkBatch] = asyncio.Queue()
    acked: list[SinkBatch] = []
    await mailbox.put(batch)
    await mailbox.put(END)
    async with asyncio.timeout(30):
        await run_sink(sink, mailbox, acked.append, label="test",
                       retry_backoff_s=(0.01, 0.01))
    assert failing.times == 0, "both injected failures were hit"
    assert acked == [batch]
    assert listing(tmp_path) == [name("orders", 3, 0, 3)]


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``path`` (a real full disk); unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs (a real full disk) needs root")
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:  # root without CAP_SYS_ADMIN (a container)
        pytest.skip(f"cannot mount a tmpfs (a real full disk): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


async def test_a_full_disk_leaves_no_partial_file_and_the_retry_lands_once_there_is_room(
        tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        sink = make_sink(disk)
        rows = [row(i, pad=uuid.uuid4().hex * 8) for i in range(400)]  # ~120 KB of CSV
        with pytest.raises(SinkError, match="No space left"):
            await sink.write(rows)
        assert listing(disk) == [], "the cut temporary file is removed, no final file"
        subprocess.run(["mount", "-o", "remount,size=1m", str(disk)], check=True)
        await sink.write(rows)  # the sink loop's retry: the same rows
        assert listing(disk) == [name("orders", 0, 0, 399)]
        lines = read(disk / name("orders", 0, 0, 399))
        assert [r[0] for r in lines[1:]] == [f"o-{i}" for i in range(400)]


def test_render_is_what_a_csv_reader_reads(tmp_path: Path) -> None:
    sink = make_sink(tmp_path, delimiter=";")
    data = sink.render([{"a": "x;y", "b": None}, {"b": b"\x01", "c": 1.25}])
    assert data.endswith(b"\r\n")
    assert list(csv.reader(io.StringIO(data.decode("utf-8"), newline=""), delimiter=";")) == [
        ["a", "b", "c"], ["x;y", "", ""], ["", "AQ==", "1.25"]]
