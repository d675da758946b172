"""The dead-letter topic's record (headers, scrubbed message) and its setting's validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.deadletters.file import dead_letter_line
from actors.deadletters.topic import topic_record
from service.cli import main
from settings import secrets

CONFIG = """\
name: dlt-test
kafka:
  bootstrap: 127.0.0.1:9092
groups:
  - topics:
      - topic: events
        processor: json_rows
    failure:
      dead_letter_topic: {name}
"""


@pytest.mark.parametrize("name", ["'bad topic'", "'..'", "'a/b'", "'" + "x" * 250 + "'", "''"])
def test_validate_refuses_a_bad_topic_name(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           name: str) -> None:
    path = tmp_path / "kstage.yml"
    path.write_text(CONFIG.format(name=name), encoding="utf-8")
    assert main(["validate", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: groups[0].failure.dead_letter_topic (line 9): " in err, err
    assert "not a valid Kafka topic name" in err, err


def test_validate_accepts_a_topic_name(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "kstage.yml"
    path.write_text(CONFIG.format(name="kstage.dead-letters_1"), encoding="utf-8")
    assert main(["validate", "-c", str(path)]) == 0, capsys.readouterr().err


def test_record_keeps_the_message_and_adds_scrubbed_error_headers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secrets, "_known", [])
    secrets.remember(["hunter2-secret-password"])
    line = dead_letter_line(
        group="g", topic="t", partition=3, offset=42, timestamp=1, key=b"\x00k",
        value=b"\xffv", headers=[("h", b"1"), ("empty", None)], processor="p",
        exc=RuntimeError("login failed for postgres://u:hunter2-secret-password@db"),
        attempts=2)
    key, value, headers = topic_record(line)
    assert (key, value) == (b"\x00k", b"\xffv")
    assert headers[:2] == [("h", b"1"), ("empty", None)]
    errors = {k: v or b"" for k, v in headers[2:]}
    assert errors["kstage.error.partition"] == b"3"
    assert errors["kstage.error.offset"] == b"42"
    assert errors["kstage.error.type"] == b"builtins.RuntimeError"
    assert errors["kstage.error.attempts"] == b"2"
    message = errors["kstage.error.message"].decode("utf-8")
    assert "hunter2" not in message and "login failed" in message


def test_validate_accepts_a_topic_instead_of_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "kstage.yml"
    path.write_text(CONFIG.format(name="dead") + "      dead_letter_path: null\n",
                    encoding="utf-8")
    assert main(["validate", "-c", str(path)]) == 0, capsys.readouterr().err


def test_validate_refuses_no_place_for_dead_letters(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "kstage.yml"
    path.write_text(CONFIG.format(name="null") + "      dead_letter_path: null\n",
                    encoding="utf-8")
    assert main(["validate", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert "groups[0].failure (line 8): " in err and "need a place" in err, err
