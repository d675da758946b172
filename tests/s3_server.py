"""A real S3-compatible server on loopback (moto's server), for the broker's persistent
storage: Tansu with ``--storage-engine s3://BUCKET/`` keeps topics, records and committed
offsets there, so they survive a restart of the broker (ENVIRONMENT.md)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from service.broker import free_port


class S3Server:
    """``python -m moto.server`` as a child process with one bucket; a context manager."""

    def __init__(self, log_path: Path, bucket: str = "tansu") -> None:
        self.port = free_port()
        self.bucket = bucket
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def broker_env(self) -> dict[str, str]:
        """What Tansu's S3 storage engine reads to reach this server."""
        return {"AWS_ACCESS_KEY_ID": "kstage", "AWS_SECRET_ACCESS_KEY": "kstage-test",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT": self.url,
                "AWS_ALLOW_HTTP": "true"}

    def __enter__(self) -> S3Server:
        with open(self.log_path, "wb") as out:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                 str(self.port)], stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.put(f"{self.url}/{self.bucket}", timeout=1).raise_for_status()
                return self
            except httpx.TransportError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"the S3 server did not start; see {self.log_path}"
                                       ) from None
                time.sleep(0.1)

    def __exit__(self, *exc: object) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
