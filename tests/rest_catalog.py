"""A real Iceberg REST catalog on loopback for the tests of ``spark.catalog.type: rest``:
Project Nessie's server (tests/jars/nessie/pom.xml, fetched by ``make test``; in-memory
version store), its warehouse in a bucket of a moto S3 server (tests/s3_server.py).

Nessie's classes are Java 21's: it runs on the newest JDK under /usr/lib/jvm (the machines
have Temurin 25 beside the Java 17 that Spark uses). Nessie vends no credentials and signs
no S3 request here: kstage's ``spark.catalog.s3`` reaches the same S3 server.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
from pyiceberg.catalog import load_catalog

from service.broker import free_port
from tests.lake import kept_snapshots
from tests.s3_server import S3Server

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "tests" / "jars" / "nessie" / "lib" / "nessie-quarkus-0.99.0-runner.jar"
BUCKET = "rest-lake"
WAREHOUSE = f"s3://{BUCKET}/warehouse"


def java_21() -> str:
    """The newest ``java`` under /usr/lib/jvm of version 21 or more."""
    found = []
    for home in Path("/usr/lib/jvm").iterdir():
        match = re.search(r"(\d+)", home.name)
        java = home / "bin" / "java"
        if match and int(match.group(1)) >= 21 and java.exists():
            found.append((int(match.group(1)), str(java)))
    if not found:
        raise RuntimeError("the REST catalog test needs Java 21 or newer under /usr/lib/jvm "
                           "(Nessie's classes are Java 21's)")
    return max(found)[1]


def appended_by_spark(catalog: Any, table: str, group: str) -> set[bool]:
    """Of the staging appends of ``group`` in ``table`` (their ``kstage.expect`` names
    it), whether Spark made them (Iceberg's Spark writer adds ``spark.app.id`` to the
    snapshot summary; pyiceberg does not): ``{True}``, ``{False}``, or both."""
    found = set()
    for snapshot in catalog.load_table(("kstage", table)).metadata.snapshots:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if group in summary.get("kstage.expect", ""):
            found.add("spark.app.id" in summary)
    return found


class RestCatalog:
    """Nessie on loopback with its warehouse in a moto bucket; a context manager."""

    def __init__(self, work: Path, auth_server_url: str | None = None) -> None:
        """``auth_server_url``: an OpenID Connect issuer (tests/oidc_server.py) whose
        bearer tokens Nessie then requires (Quarkus OIDC reads its discovery document
        and validates each token's signature, issuer and expiry against its JWKS)."""
        self.work = work
        self.auth_server_url = auth_server_url
        self.port = free_port()
        self.s3 = S3Server(work / "s3.log", bucket=BUCKET)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}/iceberg"

    def spark(self, **extra: Any) -> dict[str, Any]:
        """The ``spark:`` section of a kstage writing through this catalog."""
        return kept_snapshots({"master": "local[1]", "warehouse": WAREHOUSE,
                               "catalog": {"type": "rest", "uri": self.uri, "s3": {
                                   "endpoint": self.s3.url, "path_style_access": True,
                                   "access_key_id": "kstage",
                                   "secret_access_key": "kstage-test"}},
                               **extra})

    def reader(self, **extra: Any) -> Any:
        """pyiceberg's catalog of this server, its files from the moto bucket; ``extra``:
        more catalog properties (a ``token`` when Nessie requires one)."""
        return load_catalog("rest", type="rest", uri=self.uri, **{
            "s3.endpoint": self.s3.url, "s3.access-key-id": "kstage",
            "s3.secret-access-key": "kstage-test", "s3.region": "us-east-1"}, **extra)

    def __enter__(self) -> RestCatalog:
        if not RUNNER.exists():
            raise RuntimeError(f"{RUNNER} is missing: run `make test` (it fetches it with "
                               "mvn from tests/jars/nessie/pom.xml)")
        self.s3.__enter__()
        s3 = "nessie.catalog.service.s3.default-options"
        options = {
            "quarkus.http.host": "127.0.0.1", "quarkus.http.port": str(self.port),
            # Nessie's build enables the management interface (a build-time setting the
            # line above cannot turn off): on a port of its own, not 9000, so two catalogs
            # (two test processes) can run at once.
            "quarkus.management.enabled": "false", "quarkus.log.level": "WARN",
            "quarkus.management.host": "127.0.0.1",
            "quarkus.management.port": str(free_port()),
            "nessie.version.store.type": "IN_MEMORY",
            "nessie.catalog.default-warehouse": "warehouse",
            "nessie.catalog.warehouses.warehouse.location": WAREHOUSE,
            f"{s3}.endpoint": self.s3.url, f"{s3}.path-style-access": "true",
            f"{s3}.region": "us-east-1", f"{s3}.request-signing-enabled": "false",
            f"{s3}.access-key": "urn:nessie-secret:quarkus:test-secrets.s3",
            "test-secrets.s3.name": "kstage", "test-secrets.s3.secret": "kstage-test",
        }
        if self.auth_server_url is not None:
            options |= {"nessie.server.authentication.enabled": "true",
                        "quarkus.oidc.tenant-enabled": "true",
                        "quarkus.oidc.auth-server-url": self.auth_server_url,
                        "quarkus.oidc.client-id": "nessie"}
        # C1 alone: a short-lived server starts at half the CPU (13.9 -> 7.8 s to its
        # first answer and ten appends, measured on the 2-core machine)
        command = [java_21(), "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                   *(f"-D{k}={v}" for k, v in options.items()), "-jar", str(RUNNER)]
        log = self.work / "nessie.log"
        with open(log, "wb") as out:
            self._proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            try:
                # 401: up, and asking for a token. A loaded machine takes seconds to
                # answer the first requests (OIDC set up on the first one).
                if httpx.get(f"{self.uri}/v1/config", timeout=10).status_code in (200, 401):
                    return self
            except httpx.TransportError:
                pass
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"the REST catalog did not start; see {log}")
            time.sleep(0.2)

    def __exit__(self, *exc: object) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        self.s3.__exit__()
