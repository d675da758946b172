"""The file sinks: ``jsonl`` (one JSON line per row, appended and fsynced) and ``null``
(discards rows: benchmarks, dry runs)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from actors.appends import torn_tail, write_all
from actors.errors import SinkError
from actors.sinks.base import Sink, SinkCapabilities, SinkSettingsBase
from processors.base import Row
from processors.jsonfast import dumps_compact

logger = logging.getLogger(__name__)


class NullSinkSettings(SinkSettingsBase):
    """``sink: {type: null}``: no options."""

    type: Literal["null"] = Field("null", description="Sink type.")


class JsonlSinkSettings(SinkSettingsBase):
    """``sink: {type: jsonl, path: FILE}``."""

    type: Literal["jsonl"] = Field("jsonl", description="Sink type.")
    path: str = Field(min_length=1, description="Output file (appended; created 0644); "
                      "{topic} in it stands for the topic's name made safe (see "
                      "topic_pattern).")
    topic_templates: ClassVar[tuple[str, ...]] = ("path",)
    fsync: bool = Field(True, description="fsync after every write (off: faster, but a "
                        "machine crash can lose acknowledged rows).")

    def destination(self) -> str:
        return f"jsonl file {os.path.normpath(self.path)}"


class NullSink(Sink):
    """Discards rows (benchmarks, dry runs)."""

    type = "null"
    settings_model = NullSinkSettings
    capabilities = SinkCapabilities(deletes=True)

    def __init__(self, settings: NullSinkSettings | None = None) -> None:
        self.settings = settings or NullSinkSettings()

    async def write(self, rows: Sequence[Row]) -> None:
        return None


def _default(value: object) -> object:
    """JSON of what a processor may put in a row beyond JSON's types: bytes as text,
    anything else as its str (a Decimal's exact digits, a datetime with its offset)."""
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "backslashreplace")
    return str(value)


class JsonlSink(Sink):
    """Appends rows as JSON lines to a file; each write is one ``O_APPEND`` write + fsync.

    One ``write(2)`` per batch keeps the lines of concurrent writers (several kstage
    processes with one config) from interleaving inside a line.

    A write cut short (a full disk, a file size limit, a process killed inside the
    ``write(2)``) leaves a partial last line whose rows were never acknowledged. Before
    the first write after :meth:`open` and after a failed write, the sink looks at the
    file's last byte and, if it is not a newline, starts its write with one: the fragment
    stays an unreadable line of its own and the rows written again after it stay whole.

    A deletion (``_is_deleted`` true) is a line like any row, with its marker.
    """

    type = "jsonl"
    settings_model = JsonlSinkSettings
    capabilities = SinkCapabilities(deletes=True)

    @classmethod
    def from_settings(cls, settings: SinkSettingsBase) -> JsonlSink:
        assert isinstance(settings, JsonlSinkSettings)  # noqa: S101 - the registry's model
        return cls(settings.path, fsync=settings.fsync)

    def __init__(self, path: str | Path, fsync: bool = True) -> None:
        self.path = Path(path)
        self._fsync = fsync
        self._fd: int | None = None
        self._check_tail = True

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Read and write: the tail check reads the last byte (writes still only append).
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        self._check_tail = True

    async def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write(self, data: bytes) -> None:
        assert self._fd is not None, "sink not open"  # noqa: S101 - internal invariant
        if self._check_tail and torn_tail(self._fd, os.fstat(self._fd).st_size):
            logger.warning("jsonl sink %s: the file ends in a partial last line (a write cut "
                           "short; its rows were not committed and are written again): "
                           "ending it with a newline", self.path)
            data = b"\n" + data
        self._check_tail = True  # until this write and its fsync returned
        write_all(self._fd, data)
        if self._fsync:
            os.fsync(self._fd)
        self._check_tail = False

    async def write(self, rows: Sequence[Row]) -> None:
        if not rows:
            return
        import asyncio  # here: checking a jsonl sink's settings (validate) loads no loop

        data = b"".join([dumps_compact(r, _default) + b"\n" for r in rows])
        try:
            await asyncio.to_thread(self._write, data)
        except OSError as exc:
            raise SinkError(f"jsonl sink {self.path}: {exc}") from exc
