"""The dead-letter file: one JSON line per failed message, written durably.

A line is flushed and fsynced before the message counts as finished, so a failed
message is never lost: it is either in this file or replayed from Kafka. Lines carry
everything needed to inspect or replay the message (key and value as base64), so the
file is created readable by its owner only (``0600``).
"""

from __future__ import annotations

import asyncio
import base64
import fcntl
import json
import logging
import os
import time
import traceback
from pathlib import Path
from typing import Any

from actors.appends import fsync_dir, torn_tail, write_all
from settings.secrets import redact_known

logger = logging.getLogger(__name__)

FILE_MODE = 0o600
"""Mode of a created dead-letter file: its lines hold whole messages (values, headers
such as an ``Authorization``), so only the service's user may read them. An existing
file keeps the mode it has."""


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def dead_letter_line(
    *,
    group: str,
    topic: str,
    partition: int,
    offset: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
    headers: Any,
    processor: str,
    exc: BaseException,
    attempts: int,
    extra: dict[str, Any] | None = None,
    timestamp_type: int | None = None,
) -> str:
    """Build one dead-letter JSON line (without the newline); ``timestamp_type``: the
    record's (0 CreateTime, 1 LogAppendTime), kept for a replay when given."""
    record: dict[str, Any] = {
        "group": group,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "timestamp": timestamp,
        **({} if timestamp_type is None else {"timestamp_type": timestamp_type}),
        "key": _b64(key),
        "value": _b64(value),
        "headers": [[k, _b64(v)] for k, v in (headers or ())],
        "processor": processor,
        "error_type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        # a driver's message may quote its connection string: the settings' secrets go
        "error": redact_known(str(exc)),
        "traceback": redact_known("".join(traceback.format_exception(exc))),
        "attempts": attempts,
        "failed_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z",
    }
    if extra:
        record.update(extra)
    return json.dumps(record, ensure_ascii=False, default=str)


class DeadLetterFile:
    """Appends lines to one file durably, off the event loop.

    An append writes every byte of its line (``os.write`` may write less than asked, e.g.
    on a full disk), fsyncs the file (and its directory when the append created it) and
    only then returns, so the caller commits the message after that. Writers hold an
    exclusive ``flock`` on the file for an append, so several workers and processes can
    share one file (``O_APPEND``).

    A failed append (``ENOSPC``, ``EFBIG``, ``EIO``) cuts the file back to its size
    before the append, so no partial line is left for the next line to glue onto, and
    raises the ``OSError``: the message is not dead-lettered, the caller retries.

    A torn tail (a writer killed mid-append, or a cut that could not be undone) is ended
    with a newline by the next append, never truncated: the fragment then stands alone as
    an unreadable line that ``kstage dlq show`` reports and skips, no byte another writer
    may still own is destroyed, and the worst a race can leave is an empty line. Each one
    ended this way is counted in :attr:`torn_tails` and logged.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.torn_tails = 0
        self._lock = asyncio.Lock()

    def _open(self) -> int:
        """Open for appending; create the file (and directories) durably if missing."""
        try:
            return os.open(self.path, os.O_RDWR | os.O_APPEND)
        except FileNotFoundError:
            pass
        missing = [p for p in (self.path.parent, *self.path.parent.parents) if not p.exists()]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL,
                         FILE_MODE)
        except FileExistsError:  # another writer created it first: it synced the entry
            return os.open(self.path, os.O_RDWR | os.O_APPEND)
        try:
            for created in (self.path, *reversed(missing)):
                fsync_dir(created.parent)  # the new entry survives a crash
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _append(self, data: bytes) -> None:
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released by close
            size = os.fstat(fd).st_size
            if torn_tail(fd, size):
                self.torn_tails += 1
                logger.warning("%s: the last line (from byte %d) is torn, a write was cut "
                               "short; ending it with a newline (readers skip it)",
                               self.path, _line_start(fd, size))
                data = b"\n" + data
            try:
                write_all(fd, data)
                os.fsync(fd)
            except OSError:
                try:
                    os.ftruncate(fd, size)  # no partial line stays behind
                    os.fsync(fd)
                except OSError as undo:  # the next append ends the torn line instead
                    logger.warning("%s: could not cut a failed append back: %s",
                                   self.path, undo)
                raise
        finally:
            os.close(fd)

    async def write(self, line: str) -> None:
        """Append ``line`` and a newline durably; raises ``OSError`` when it could not."""
        async with self._lock:
            await asyncio.to_thread(self._append, (line + "\n").encode("utf-8"))


def _line_start(fd: int, size: int) -> int:
    """Offset where the file's last (unterminated) line starts."""
    end = size
    while end > 0:
        start = max(end - 65536, 0)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0
