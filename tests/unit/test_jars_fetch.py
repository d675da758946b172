"""``kstage jars fetch``: the pinned jars, through mvn or from a Maven repository over HTTP,
each checked by its SHA-256 before it is put in place; the commit fence built from its
sources by mvn (again only when its sources changed), a failed build named.

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

from actors.sinks.spark import jars as spark_jars
from actors.sinks.spark.jars import (
    PINNED,
    fence_dir,
    fence_file_name,
    fetched_names,
    jars_dir,
    sha256,
)
from service.cli import main
from service.ops import jars as ops_jars
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


@pytest.mark.slow  # builds the fence with mvn (a JVM): 20-35 s
def test_download_checks_every_jar_and_keeps_good_ones(
        tmp_path: Path, repository: tuple[str, Path]) -> None:
    url, _ = repository
    target = tmp_path / "jars"
    result = fetch(target, url)
    assert result.fetched == [j.file_name for j in PINNED] and result.kept == []
    assert result.built == [fence_file_name()]
    assert all(sha256(target / j.file_name) == j.sha256 for j in PINNED)
    assert not list(target.glob(".*"))  # no partial file left behind
    assert sorted(p.name for p in target.iterdir()) == sorted(fetched_names())
    again = fetch(target, url)
    assert again.fetched == [] and again.built == [] and again.kept == fetched_names()


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


@pytest.mark.slow  # builds the fence with mvn (a JVM): 20-35 s
def test_with_mvn_from_the_pinned_pom(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      ) -> None:
    assert shutil.which("mvn"), "mvn is installed by .ci/system-deps"
    target = tmp_path / "jars"
    assert main(["jars", "fetch", "--dir", str(target)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"{target}:"
    assert all(f"{j.file_name} (fetched, mvn)" in out for j in PINNED)
    assert f"{fence_file_name()} (built from source, mvn)" in out
    assert sorted(p.name for p in target.iterdir()) == sorted(fetched_names())


def fence_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: str) -> Path:
    """The fence's sources copied, ``edit`` appended to its catalog class, and used by
    ``kstage jars fetch`` from there."""
    copy = tmp_path / "fence"
    shutil.copytree(fence_dir(), copy, ignore=shutil.ignore_patterns("target"))
    source = copy / "src/main/java/io/kstage/iceberg/FencingCatalog.java"
    source.write_text(source.read_text() + edit)
    monkeypatch.setattr(spark_jars, "fence_dir", lambda: copy)
    monkeypatch.setattr(ops_jars, "fence_dir", lambda: copy)
    return copy


@pytest.mark.slow  # builds the fence with mvn (a JVM): 20-35 s
def test_the_fence_is_built_again_when_its_sources_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "jars"
    target.mkdir()
    for jar in PINNED:  # already fetched: only the fence is built
        (target / jar.file_name).symlink_to(jars_dir() / jar.file_name)
    first = fetch(target)
    assert first.built == [fence_file_name()] and first.fetched == []
    fence_copy(tmp_path, monkeypatch, "// changed\n")
    changed = fence_file_name()
    assert changed != first.built[0]
    second = fetch(target)
    assert second.built == [changed] and (target / changed).is_file()


def test_a_fence_that_does_not_build_is_named_and_nothing_is_installed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    fence_copy(tmp_path, monkeypatch, "class Broken { int x = ; }\n")
    target = tmp_path / "jars"
    target.mkdir()
    for jar in PINNED:
        (target / jar.file_name).symlink_to(jars_dir() / jar.file_name)
    assert main(["jars", "fetch", "--dir", str(target)]) == 1
    err = capsys.readouterr().err
    assert "kstage jars fetch: building the commit fence failed: mvn exit 1" in err
    assert "FencingCatalog.java" in err  # mvn's own words name the file
    assert sorted(p.name for p in target.iterdir()) == sorted(j.file_name for j in PINNED)


def test_without_mvn_the_fence_says_what_it_needs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        repository: tuple[str, Path]) -> None:
    url, _ = repository
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(JarsError, match="mvn is not on the PATH: the commit fence jar is "
                                        "built from source with Maven and a JDK"):
        fetch(tmp_path / "jars", url)
