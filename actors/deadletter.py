"""The dead-letter file: one JSON line per failed message, written durably.

A line is flushed and fsynced before the message counts as finished, so a failed
message is never lost: it is either in this file or replayed from Kafka. Lines carry
everything needed to inspect or replay the message (key and value as base64).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
import traceback
from pathlib import Path
from typing import Any


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
) -> str:
    """Build one dead-letter JSON line (without the newline)."""
    record: dict[str, Any] = {
        "group": group,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "timestamp": timestamp,
        "key": _b64(key),
        "value": _b64(value),
        "headers": [[k, _b64(v)] for k, v in (headers or ())],
        "processor": processor,
        "error_type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "error": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
        "attempts": attempts,
        "failed_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z",
    }
    if extra:
        record.update(extra)
    return json.dumps(record, ensure_ascii=False, default=str)


class DeadLetterFile:
    """Appends lines to one file; each append is flushed and fsynced off the event loop."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = asyncio.Lock()

    def _append(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    async def write(self, line: str) -> None:
        async with self._lock:
            await asyncio.to_thread(self._append, (line + "\n").encode("utf-8"))
