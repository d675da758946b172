"""An exclusive lock on a file, shared by the suite's processes (the xdist workers and the
main process): one of them starts the shared Apache Kafka node (tests/brokers.py), or
makes a JVM's class-data archive (tests/jvm_archive.py), while the others wait."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (made if missing) for the block."""
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
