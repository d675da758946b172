"""The ``csv`` sink: each write lands as CSV files, one per partition, published whole.

A write (one flush of the worker) becomes one file per partition its rows come from,
named by topic, partition and the first and last offset of those rows::

    DIR/orders-2-0000000000000000100-0000000000000000199.csv

The file is written under a hidden temporary name, fsynced, renamed to its final name and
the directory fsynced: a reader never sees a partial file under a final name, a crash
leaves at most a ``.*.tmp`` file, and a retried write of the same batch (the worker retries
with the same rows) replaces the same file with the same bytes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import csv
import datetime as dt
import decimal
import hashlib
import io
import json
import logging
import os
import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Self

from actors.appends import fsync_dir
from actors.errors import SinkError
from actors.sinks import Sink, SinkCapabilities, SinkSettingsBase
from processors.base import Row
from pydantic import Field, field_validator

logger = logging.getLogger(__name__)

OFFSET_DIGITS = 19
"""Offsets in file names are zero-padded to this many digits (a signed 64-bit offset's),
so the files of a partition sort by offset."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class CsvSinkSettings(SinkSettingsBase):
    """``sink: {type: csv, dir: DIR}``; unknown keys are refused (``SinkSettingsBase``)."""

    type: Literal["csv"] = Field("csv", description="Sink type.")
    dir: str = Field(min_length=1, description="Directory of the CSV files (created).")
    delimiter: str = Field(",", min_length=1, max_length=1,
                           description="Field delimiter: one character.")
    fsync: bool = Field(True, description="fsync each file and the directory before the "
                        "write returns (off: faster, but a machine crash can lose files "
                        "whose offsets were committed).")

    @field_validator("delimiter")
    @classmethod
    def _usable_delimiter(cls, value: str) -> str:
        if value in '"\r\n':
            raise ValueError("the delimiter cannot be a double quote or a line break")
        return value


def cell(value: Any) -> str:
    """One CSV cell: None is empty, bytes are base64, booleans ``true``/``false``,
    lists and mappings JSON, date and time ISO 8601, anything else ``str``."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | decimal.Decimal):
        return str(value)
    if isinstance(value, dt.date | dt.time):  # datetime is a date
        return value.isoformat()
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=cell)
    return str(value)


def _offset(row: Row, key: str) -> int | None:
    value = row.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class CsvSink(Sink):
    """Writes each batch as CSV files (see the module docstring).

    The header is the processor's declared columns (``context.columns``) in their order,
    then every other key of the rows in the order first seen (the Kafka coordinate
    columns ``_topic``, ``_partition``, ``_offset``, ``_timestamp``, or all keys of a
    processor that declares no columns). A row without a key has an empty cell.

    Rows are grouped into files by their ``_topic`` and ``_partition`` columns and named
    by their ``_offset`` range. Rows without these columns (a processor that does not add
    the coordinates) go to one file per write named by the SHA-256 of its content, so a
    retry of the same batch still replaces the same file.
    """

    type = "csv"
    settings_model = CsvSinkSettings
    # Files of different partitions are independent: writes of up to four partitions
    # may run at once (one lane per partition keeps each partition's files in order).
    capabilities = SinkCapabilities(max_concurrency=4)

    @classmethod
    def from_settings(cls, settings: SinkSettingsBase) -> Self:
        if not isinstance(settings, CsvSinkSettings):
            raise TypeError(f"csv sink: expected CsvSinkSettings, got {type(settings).__name__}")
        return cls(settings)

    def __init__(self, settings: CsvSinkSettings) -> None:
        self.settings = settings
        self.dir = Path(settings.dir)

    async def open(self) -> None:
        try:
            await asyncio.to_thread(self.dir.mkdir, parents=True, exist_ok=True)
        except OSError as exc:
            raise SinkError(f"csv sink: cannot create {self.dir}: {exc}") from exc

    async def write(self, rows: Sequence[Row]) -> None:
        files = self._files(rows)  # rendered before the first file is written
        try:
            for name, data in files:
                await asyncio.to_thread(self._publish, name, data)
        except OSError as exc:
            raise SinkError(f"csv sink {self.dir}: {exc}") from exc

    def header(self, rows: Sequence[Row]) -> list[str]:
        """The header of a file holding ``rows`` (see the class docstring)."""
        names = [column.name for column in self.context.columns]
        seen = set(names)
        for row in rows:
            for key in row:
                if key not in seen:
                    seen.add(key)
                    names.append(key)
        return names

    def render(self, rows: Sequence[Row]) -> bytes:
        """``rows`` as the bytes of one CSV file (UTF-8, RFC 4180 quoting, CRLF)."""
        names = self.header(rows)
        out = io.StringIO()
        writer = csv.writer(out, delimiter=self.settings.delimiter, lineterminator="\r\n")
        writer.writerow(names)
        writer.writerows([cell(row.get(name)) for name in names] for row in rows)
        return out.getvalue().encode("utf-8")

    def _files(self, rows: Sequence[Row]) -> list[tuple[str, bytes]]:
        """(file name, content) per partition of ``rows``; coordinate-less rows last."""
        parts: dict[tuple[str, int], list[Row]] = {}
        loose: list[Row] = []
        for row in rows:
            partition, offset = _offset(row, "_partition"), _offset(row, "_offset")
            if partition is None or offset is None:
                loose.append(row)
            else:
                topic = str(row.get("_topic") or self.context.topic)
                parts.setdefault((topic, partition), []).append(row)
        files = []
        for (topic, partition), part in parts.items():
            offsets = [row["_offset"] for row in part]
            files.append((f"{_UNSAFE.sub('_', topic)}-{partition}-"
                          f"{min(offsets):0{OFFSET_DIGITS}d}-{max(offsets):0{OFFSET_DIGITS}d}"
                          ".csv", self.render(part)))
        if loose:
            data = self.render(loose)
            digest = hashlib.sha256(data).hexdigest()[:32]
            files.append((f"{_UNSAFE.sub('_', self.context.topic or 'rows')}-{digest}.csv",
                          data))
        return files

    def _publish(self, name: str, data: bytes) -> None:
        """Write ``data`` as ``dir/name`` whole: temporary file, fsync, rename, fsync dir."""
        final = self.dir / name
        temp = self.dir / f".{name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
        try:
            with open(temp, "wb") as fh:  # a buffered write writes every byte or raises
                fh.write(data)
                fh.flush()
                if self.settings.fsync:
                    os.fsync(fh.fileno())
            os.replace(temp, final)
        except BaseException:
            with contextlib.suppress(OSError):  # the first error is the one to report
                temp.unlink(missing_ok=True)
            raise
        if self.settings.fsync:
            fsync_dir(self.dir)  # the rename is durable before the offsets are committed
        logger.debug("csv sink: wrote %s (%d bytes)", final, len(data))
