"""``kstage jars fetch``: the pinned jars, through mvn or from a Maven repository over HTTP,
each checked by its SHA-256 before it is put in place.

The repository is a real HTTP server on loopback serving Maven Central's layout (its jars
are the ones ``make`` fetched, linked into that layout); mvn runs for real on the pinned
POM (its local repository already holds the jars, as on any machine that ran ``make``).
"""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.sinks.spark.jars import PINNED, jars_dir, sha256
from service.cli import main
from service.ops.jars import JarsError, fetch


@pytest.fixture
def repository(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A Maven repository on loopback holding the pinned jars: (URL, its directory)."""
    root = tmp_path / "repo"
    missing = [j.file_name for j in PINNED if not (jars_dir() / j.file_name).is_file()]
    assert not missing, f"run `kstage jars fetch` first (make does): {missing}"
    for jar in PINNED:
        relative = jar.url("").lstrip("/")
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).symlink_to(jars_dir() / jar.file_name)
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/maven2", root
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def translate_path(self, path: str) -> str:
        return super().translate_path(path.removeprefix("/maven2"))

    def log_message(self, format: str, *args: object) -> None:
        return None


def test_download_checks_every_jar_and_keeps_good_ones(
        tmp_path: Path, repository: tuple[str, Path]) -> None:
    url, _ = repository
    target = tmp_path / "jars"
    result = fetch(target, url)
    assert result.fetched == [j.file_name for j in PINNED] and result.kept == []
    assert all(sha256(target / j.file_name) == j.sha256 for j in PINNED)
    assert not list(target.glob(".*"))  # no partial file left behind
    again = fetch(target, url)
    assert again.fetched == [] and again.kept == [j.file_name for j in PINNED]


def test_a_jar_whose_checksum_does_not_match_is_refused(
        tmp_path: Path, repository: tuple[str, Path]) -> None:
    url, root = repository
    bad = PINNED[2]
    served = root / bad.url("").lstrip("/")
    served.unlink()
    served.write_bytes(b"not the pinned jar")
    target = tmp_path / "jars"
    with pytest.raises(JarsError, match=rf"{bad.coordinates}: SHA-256 [0-9a-f]{{64}} does not "
                                        rf"match the pinned {bad.sha256}"):
        fetch(target, url)
    assert not (target / bad.file_name).exists()


def test_an_unreachable_repository_is_named(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["jars", "fetch", "--dir", str(tmp_path / "jars"),
                 "--repository", "http://127.0.0.1:9/maven2"])
    err = capsys.readouterr().err
    assert code == 1
    assert f"kstage jars fetch: http://127.0.0.1:9/maven2/{PINNED[0].url('').lstrip('/')}" in err
    assert "ConnectError" in err


def test_with_mvn_from_the_pinned_pom(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      ) -> None:
    assert shutil.which("mvn"), "mvn is installed by .ci/system-deps"
    target = tmp_path / "jars"
    assert main(["jars", "fetch", "--dir", str(target)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"{target}:"
    assert all(f"{j.file_name} (fetched, mvn)" in out for j in PINNED)
    assert sorted(p.name for p in target.iterdir()) == sorted(j.file_name for j in PINNED)
