"""Appending to files that several writers share and a crash may cut short.

The JSONL sink, the dead-letter file and ``kstage dlq replay``'s marker file append
lines with ``O_APPEND``. Each needs the same three pieces: write every byte (``os.write``
may write less than asked, e.g. on a full disk), tell whether the file ends in a torn
line (a write cut short), and make a created file's directory entry durable.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` (loops on short writes; errors propagate)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def torn_tail(fd: int, size: int) -> bool:
    """Whether the file of ``size`` bytes ends in a partial line (not a newline)."""
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a created or renamed file) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
