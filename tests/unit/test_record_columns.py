"""A topic's record columns at work (actors.record_columns, actors.worker.records): what
each source gives, and the poison it refuses (the end-to-end run on the real broker and
sinks is tests/integration/test_record_columns.py)."""

from __future__ import annotations

import pytest

from actors.record_columns import RecordColumns
from actors.worker.records import key_decoder
from processors import testing
from processors.errors import PoisonMessage
from settings.models import TopicSettings


def topic(key_format: str | None = None, **extra: object) -> TopicSettings:
    columns = [{"name": "k", "from": "key"}, {"name": "tt", "from": "timestamp_type"},
               {"name": "h", "from": "header", "header": "h"},
               {"name": "b", "from": "header", "header": "b", "type": "binary"}]
    fmt = {} if key_format is None else {"key_format": key_format}
    return TopicSettings.model_validate({"topic": "t", "processor": "json_rows",
                                         "columns": columns, **fmt, **extra})


def values(settings: TopicSettings, key: object, headers: list[tuple[str, bytes | None]],
           timestamp_type: int = 0) -> dict[str, object]:
    cols = RecordColumns.of(settings)
    assert cols is not None
    msg = testing.message({"x": 1}, key=key, headers=headers)._replace(
        timestamp_type=timestamp_type, offset=7)
    row: dict[str, object] = {"x": 1}
    cols.add([row], msg)
    return row


def test_each_source_gives_its_value() -> None:
    row = values(topic(), "p1", [("h", b"caf\xc3\xa9"), ("b", b"\xff"), ("h", b"second")], 1)
    assert row == {"x": 1, "k": "p1", "tt": "LogAppendTime", "h": "café", "b": b"\xff"}
    assert values(topic(), None, [("h", None)], -1) == {
        "x": 1, "k": None, "tt": None, "h": None, "b": None}
    assert values(topic(), "p", [], 0)["tt"] == "CreateTime"
    # json/avro keys: a string as it is, anything else as its JSON text; bytes as bytes
    assert values(topic("json"), {"id": 1, "r": "é"}, [])["k"] == '{"id":1,"r":"é"}'
    assert values(topic("json"), 42, [])["k"] == "42"
    assert values(topic("json"), "s", [])["k"] == "s"
    assert values(topic("bytes"), b"\x00k", [])["k"] == b"\x00k"


def test_a_header_that_is_not_utf8_is_poison_naming_it_and_the_record() -> None:
    with pytest.raises(PoisonMessage, match=(
            "header 'h' of topic 'topic' partition 0 offset 7 is not UTF-8 .*declare its "
            "column 'h' with type: binary")):
        values(topic(), "k", [("h", b"\xc3\x28")])


def test_a_row_that_has_a_declared_column_already_is_poison_not_overwritten() -> None:
    cols = RecordColumns.of(topic())
    assert cols is not None
    row = {"k": "the value's own"}
    with pytest.raises(PoisonMessage, match="already has the column.s. k that the topic's"):
        cols.add([row], testing.message({}, key="p"))
    assert row == {"k": "the value's own"}


@pytest.mark.parametrize(("fmt", "raw", "why"), [
    ("string", b"\xff", "key (key_format string): key is not UTF-8"),
    ("json", b"{nope", "key (key_format json): key is not valid JSON")])
def test_a_key_that_does_not_decode_is_poison_naming_its_format(fmt: str, raw: bytes,
                                                                why: str) -> None:
    decode = key_decoder(topic(fmt), None)
    assert decode is not None
    with pytest.raises(PoisonMessage) as caught:
        decode(raw)
    assert str(caught.value).startswith(why)
    assert key_decoder(topic("bytes"), None) is None  # bytes: no decoding, no failure


def test_a_key_column_makes_the_default_key_format_string() -> None:
    assert topic().key_format == "string"
    assert topic("bytes").key_format == "bytes"
    plain = TopicSettings.model_validate({"topic": "t", "processor": "json_rows"})
    assert plain.key_format == "bytes" and RecordColumns.of(plain) is None
