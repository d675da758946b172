"""Dead letters hold whole messages: their files are the owner's only (``0600``), and
``kstage dlq show`` never prints a header value named like a credential."""

from __future__ import annotations

import base64
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.deadletters.file import DeadLetterFile, dead_letter_line
from service.cli import main
from service.ops import dlq
from service.ops.dlq.letters import Marker, sidecar_of
from settings import load_settings

HEADERS = [
    ("Authorization", b"Bearer tok-7f3a9c1e"),
    ("x-api-key", b"key-5d2b8e44"),
    ("Cookie", b"session=c0ffee99"),
    ("kafka_password", b"pw-31415926"),
    ("X-Auth-Token", b"tok-27182818"),
    ("client-secret", b"sec-16180339"),
    ("trace-id", b"trace-0001"),
    ("content-type", b"application/json"),
]
SECRET_VALUES = [v for k, v in HEADERS if k not in ("trace-id", "content-type")]


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask: files are world-readable unless created otherwise."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def _line(offset: int) -> str:
    return dead_letter_line(group="g", topic="t", partition=0, offset=offset, timestamp=0,
                            key=b"k", value=b'{"a": 1}', headers=HEADERS,
                            processor="json_rows", exc=RuntimeError("bad"), attempts=1)


def _config(tmp_path: Path, dead: Path) -> Path:
    cfg = tmp_path / "kstage.yml"
    cfg.write_text(json.dumps({"groups": [{
        "group_id": "g", "failure": {"dead_letter_path": str(dead)},
        "topics": [{"topic": "t", "processor": "json_rows"}]}]}))
    return cfg


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_created_dead_letter_file_is_the_owners_only(tmp_path: Path,
                                                             umask_022: None) -> None:
    path = tmp_path / "sub" / "dead.jsonl"
    await DeadLetterFile(path).write(_line(0))
    assert _mode(path) == 0o600


def test_the_replay_marker_file_is_the_owners_only(tmp_path: Path, umask_022: None) -> None:
    dead = tmp_path / "dead.jsonl"
    dead.write_text(_line(0) + "\n")
    marker = Marker(dead)  # what `dlq replay` opens before it replays a line
    marker.close()
    assert _mode(sidecar_of(dead)) == 0o600


def test_dlq_show_masks_header_values_named_like_credentials(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = tmp_path / "dead.jsonl"
    dead.write_text(_line(0) + "\n" + _line(1) + "\n")
    cfg = _config(tmp_path, dead)

    assert main(["dlq", "show", "-c", str(cfg), "--json"]) == 0
    out = capsys.readouterr().out
    records = [json.loads(raw) for raw in out.splitlines()]
    assert [r["offset"] for r in records] == [0, 1]
    shown = dict(records[0]["headers"])
    assert shown["trace-id"] == base64.b64encode(b"trace-0001").decode()  # unchanged
    assert shown["content-type"] == base64.b64encode(b"application/json").decode()
    masked = [k for k, _ in HEADERS if k not in ("trace-id", "content-type")]
    assert all(shown[k] == "**********" for k in masked), shown
    assert main(["dlq", "show", "-c", str(cfg)]) == 0
    out += capsys.readouterr().out
    for value in SECRET_VALUES:
        assert value.decode() not in out
        assert base64.b64encode(value).decode() not in out
    # the file keeps them: `dlq replay --to-kafka` re-produces the original headers
    letters, _ = dlq.show(load_settings(cfg))
    assert dict(letters[0].record["headers"])["Authorization"] == \
        base64.b64encode(b"Bearer tok-7f3a9c1e").decode()
