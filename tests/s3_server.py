"""A real S3-compatible server on loopback (moto's server):

* for the broker's persistent storage: Tansu with ``--storage-engine s3://BUCKET/``
  keeps topics, records and committed offsets there, so they survive a restart of the
  broker (ENVIRONMENT.md);
* for Iceberg warehouses (``spark.catalog.warehouse: s3://BUCKET/PREFIX``, written through
  Iceberg's S3FileIO): :meth:`S3Server.new_bucket` makes a bucket per test and
  :meth:`S3Server.catalog_s3` the ``spark.catalog.s3`` block that reaches it.

moto keeps its objects in memory: a restart loses them. A test that takes the server
down puts a :class:`tests.tcp_proxy.TcpProxy` in front of it instead."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

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

    ACCESS_KEY_ID, SECRET_ACCESS_KEY, REGION = "lake-key-id", "lake-secret-key", "us-east-1"

    def new_bucket(self, prefix: str = "lake") -> str:
        """Create a bucket of a unique name; return its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        httpx.put(f"{self.url}/{name}", timeout=10).raise_for_status()
        return name

    def catalog_s3(self, endpoint: str | None = None) -> dict[str, Any]:
        """``spark.catalog.s3`` for this server (or a proxy of it at ``endpoint``)."""
        return {"endpoint": endpoint or self.url, "region": self.REGION,
                "path_style_access": True, "access_key_id": self.ACCESS_KEY_ID,
                "secret_access_key": self.SECRET_ACCESS_KEY}

    def objects(self, bucket: str) -> list[str]:
        """The keys in ``bucket`` (ListObjectsV2, every page)."""
        import xml.etree.ElementTree as ET  # our own server's answer

        keys: list[str] = []
        token: str | None = None
        while True:
            params = {"list-type": "2", **({"continuation-token": token} if token else {})}
            answer = httpx.get(f"{self.url}/{bucket}", params=params, timeout=10)
            answer.raise_for_status()
            root = ET.fromstring(answer.content)  # noqa: S314
            ns = {"s3": root.tag.split("}")[0].strip("{")}
            keys += [k.text or "" for k in root.findall("s3:Contents/s3:Key", ns)]
            token = root.findtext("s3:NextContinuationToken", namespaces=ns)
            if not token:
                return keys

    def __enter__(self) -> S3Server:
        with open(self.log_path, "wb") as out:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                 str(self.port)], stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        try:
            while True:
                try:
                    httpx.put(f"{self.url}/{self.bucket}", timeout=1).raise_for_status()
                    return self
                except httpx.TransportError:
                    if self._proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("the S3 server did not start; see "
                                           f"{self.log_path}") from None
                    time.sleep(0.1)
        except BaseException:
            self.__exit__()  # a bad bucket name or a start that failed: no server left
            raise

    def __exit__(self, *exc: object) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
