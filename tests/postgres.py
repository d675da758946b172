"""A throwaway PostgreSQL cluster for tests: ``initdb`` + ``pg_ctl`` in a temporary
directory, listening on a free loopback port (Debian package ``postgresql``).

Never skipped: missing binaries fail the test loudly. ``initdb`` refuses to run as root,
so as uid 0 every server command runs as the ``postgres`` user (``runuser``) and the
directory is handed to it. Trust authentication on loopback; the sink still sends a
user and password, which the server ignores.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

JAR = "/usr/share/java/postgresql.jar"
USER = "kstage"
DATABASE = "kstage"


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).resolve().parent
    pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) are missing: install the Debian "
                "package postgresql (bash .ci/system-deps does)", pytrace=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Postgres:
    """One PostgreSQL server: :meth:`start`, :meth:`stop`, :meth:`psql`."""

    def __init__(self, root: Path, settings: dict[str, str] | None = None) -> None:
        self.bin = _bin_dir()
        self.settings = settings or {}  # server settings (-c name=value), e.g. wal_level
        self.root = root
        self.data = root / "data"
        self.log = root / "postgres.log"
        self.port = _free_port()
        self.url = f"jdbc:postgresql://127.0.0.1:{self.port}/{DATABASE}"
        self._as_postgres = os.getuid() == 0
        self.running = False

    def _cmd(self, *args: str) -> list[str]:
        if self._as_postgres:
            return ["runuser", "-u", "postgres", "--", *args]
        return list(args)

    def _run(self, *args: str, timeout: float = 60) -> str:
        done = subprocess.run(self._cmd(*args), capture_output=True, text=True,
                              timeout=timeout, check=False)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise AssertionError(f"{' '.join(args)} failed ({done.returncode}): "
                                 f"{done.stdout}{done.stderr}\n{log}")
        return done.stdout

    def init(self) -> Postgres:
        self.root.mkdir(parents=True, exist_ok=True)
        if self._as_postgres:
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self.root.chmod(0o700)
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                  "-A", "trust", "-E", "UTF8", "--no-sync")
        return self

    def start(self) -> None:
        opts = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories="
                f"{self.root} -c fsync=off -c full_page_writes=off"
                + "".join(f" -c {k}={v}" for k, v in self.settings.items()))
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                  "-o", opts, "-w", "-t", "60", "start")
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        if self.running:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")
            self.running = False

    def psql(self, sql: str, database: str = DATABASE) -> list[list[str]]:
        """Run ``sql`` as the superuser; rows as lists of text (``|``-separated)."""
        psql = self.bin / "psql"
        out = self._run(str(psql) if psql.exists() else "psql", "-X", "-q", "-At", "-v",
                        "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(self.port),
                        "-U", "postgres", "-d", database, "-c", sql)
        return [line.split("|") for line in out.splitlines() if line]

    def create_database(self) -> None:
        self.psql(f"CREATE ROLE {USER} LOGIN PASSWORD 'secret'", database="postgres")
        self.psql(f"CREATE DATABASE {DATABASE} OWNER {USER}", database="postgres")

    def hold_lock(self, table: str, timeout: float = 30) -> subprocess.Popen[str]:
        """A psql session holding an ACCESS EXCLUSIVE lock on ``table`` (every other
        access to it waits) until the server stops; returns once the lock is held."""
        psql = self.bin / "psql"
        proc = subprocess.Popen(self._cmd(  # our own server, fixed arguments
            str(psql) if psql.exists() else "psql", "-X", "-q", "-h", "127.0.0.1", "-p",
            str(self.port), "-U", "postgres", "-d", DATABASE, "-c",
            f'BEGIN; LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(600);'),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
        held = ("SELECT count(*) FROM pg_locks WHERE granted AND mode = "  # noqa: S608
                f"'AccessExclusiveLock' AND relation = '\"{table}\"'::regclass")
        self._await(held, timeout)
        return proc

    def stop_when_waiting_on_lock(self, timeout: float = 60) -> threading.Thread:
        """In a thread: stop the server (fast: sessions are terminated) as soon as a
        session waits on a lock."""
        def run() -> None:
            self._await("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                        "'Lock'", timeout)
            self.stop()

        thread = threading.Thread(target=run, name="pg-stop-on-lock")
        thread.start()
        return thread

    def _await(self, count_sql: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.psql(count_sql) == [["0"]]:
            if time.monotonic() > deadline:
                raise AssertionError(f"still 0 after {timeout}s: {count_sql}")
            time.sleep(0.05)

    def wait_until_down(self, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) != 0:
                    return
            time.sleep(0.05)
        raise AssertionError(f"postgres on port {self.port} still accepts connections")


P = TypeVar("P", bound=Postgres)


def postgres_server(settings: dict[str, str] | None = None) -> Iterator[Postgres]:
    """A started server with database and role ``kstage``; stopped and removed at the end.
    ``settings``: server settings (``{"wal_level": "logical"}`` for change data capture).

    Its directory is a fresh one under the system temp dir, not pytest's ``tmp_path``:
    pytest keeps its base temp dir private to the current user (0700), which the
    ``postgres`` user could not enter."""
    yield from _served("kstage-pg-", lambda root: Postgres(root, settings).init(),
                       lambda server: server.start())


def _served(prefix: str, make: Callable[[Path], P], start: Callable[[P], None]
            ) -> Iterator[P]:
    """The server ``make`` builds in a fresh temp directory, started by ``start``, with
    database and role ``kstage``; stopped and removed at the end."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        server = make(root)
        start(server)
        try:
            server.create_database()
            yield server
        finally:
            server.stop("immediate")
    finally:
        shutil.rmtree(root, ignore_errors=True)


TLS_ONLY_HBA = """\
# TLS only: no plain TCP entry, so a client that does not do TLS is refused.
local   all all                 trust
hostssl all postgres 127.0.0.1/32 trust
hostssl all all      127.0.0.1/32 scram-sha-256
"""


class TlsPostgres(Postgres):
    """A server that requires TLS (``ssl=on``, ``hostssl`` entries only; the role
    ``kstage`` logs in with its password) and serves the certificate :meth:`serve` gave
    it (copied into its directory, owned by the server's user)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, {"ssl": "on", "ssl_cert_file": str(root / "server.crt"),
                                "ssl_key_file": str(root / "server.key")})
        self.serving: Path | None = None  # the certificate it presents

    def init(self) -> TlsPostgres:
        super().init()
        (self.data / "pg_hba.conf").write_text(TLS_ONLY_HBA, encoding="utf-8")
        self._own(self.data / "pg_hba.conf")
        return self

    def _own(self, path: Path) -> None:
        if self._as_postgres:
            pw = pwd.getpwnam("postgres")
            os.chown(path, pw.pw_uid, pw.pw_gid)

    def serve(self, cert: Path, key: Path) -> None:
        """(Re)start the server with ``cert`` and ``key`` as its TLS certificate."""
        self.stop()
        for source, name in ((cert, "server.crt"), (key, "server.key")):
            target = self.root / name
            shutil.copyfile(source, target)
            target.chmod(0o600)
            self._own(target)
        self.serving = cert
        self.start()


def tls_postgres_server(cert: Path, key: Path) -> Iterator[TlsPostgres]:
    """:func:`postgres_server` for a :class:`TlsPostgres` serving ``cert``."""
    yield from _served("kstage-pg-tls-", lambda root: TlsPostgres(root).init(),
                       lambda server: server.serve(cert, key))
