"""The ``schema_rows`` processor alone: columns per writer schema id, evolution set on its
LiveColumns before the row of a new shape, incompatible and recursive schemas refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema
from pydantic import ValidationError

from processors.base import Column
from processors.errors import PoisonMessage, StopTopic
from processors.schema_rows import SchemaRowsProcessor
from processors.testing import avro_message
from service.cli import main


def order(*fields: tuple[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "Order", "fields": [
        {"name": n, "type": t, **({"default": None} if isinstance(t, list) else {})}
        for n, t in fields]}


V1 = order(("id", "string"), ("qty", "int"))
V2 = order(("id", "string"), ("qty", "long"), ("note", ["null", "string"]))
BAD = order(("id", "int"))


def columns(p: SchemaRowsProcessor) -> list[tuple[str, str]]:
    return [(c.name, c.type) for c in p.live_columns().columns]


def test_columns_follow_the_writer_schemas_and_only_grow() -> None:
    p = SchemaRowsProcessor()
    assert p.live_columns().version == 0
    row = p.transform(avro_message(V1, {"id": "a", "qty": 1}, schema_id=1))[0]
    assert (row["id"], row["qty"], row["_offset"]) == ("a", 1, 0)
    assert columns(p) == [("id", "string"), ("qty", "int")]
    p.transform(avro_message(V2, {"id": "b", "qty": 2**40, "note": "n"}, schema_id=2))
    assert columns(p) == [("id", "string"), ("qty", "long"), ("note", "string")]
    assert p.live_columns().version == 2
    p.transform(avro_message(V1, {"id": "c", "qty": 3}, schema_id=1))  # older: fits
    assert p.live_columns().version == 2
    assert all(c.nullable for c in p.live_columns().columns)


def test_an_incompatible_schema_is_poison_naming_field_and_ids_or_stops() -> None:
    p = SchemaRowsProcessor()
    p.transform(avro_message(V1, {"id": "a", "qty": 1}, schema_id=1))
    for _ in range(2):  # every message of that id, the same verdict
        with pytest.raises(PoisonMessage) as caught:
            p.transform(avro_message(BAD, {"id": 5}, schema_id=7))
        assert str(caught.value).startswith(
            "writer schema id 7 does not fit the table: field 'id' is int in writer schema "
            "id 7, string in the table's column (typed by writer schema id 1)")
        assert caught.value.details == {"schema_id": 7}
    assert p.live_columns().version == 1  # the table is left as it was
    stop = SchemaRowsProcessor({"on_incompatible": "stop"})
    stop.transform(avro_message(V1, {"id": "a", "qty": 1}, schema_id=1))
    with pytest.raises(StopTopic, match="field 'id' is int"):
        stop.transform(avro_message(BAD, {"id": 5}, schema_id=7))


def test_the_table_a_sink_found_is_what_writer_schemas_are_judged_against() -> None:
    """A restart: the subject's latest schema (BAD, given at start) does not fit the table
    the sink found; its messages are poison naming the table, not a fatal start, and the
    older schema's records fit the table as it is."""
    p = SchemaRowsProcessor()
    p.schema_known(parse_schema(BAD), 7)
    assert columns(p) == [("id", "int")]
    p.live_columns().table_found([Column("id", "string", True), Column("qty", "long", True)])
    assert columns(p) == [("id", "string"), ("qty", "long")]  # the table's, to write with
    with pytest.raises(PoisonMessage) as caught:
        p.transform(avro_message(BAD, {"id": 5}, schema_id=7))
    assert str(caught.value).startswith(
        "writer schema id 7 does not fit the table: field 'id' is int in writer schema id "
        "7, string in the table's column (typed by the table as kstage found it at start)")
    version = p.live_columns().version
    row = p.transform(avro_message(V1, {"id": "a", "qty": 1}, schema_id=1))[0]
    assert (row["id"], row["qty"]) == ("a", 1)
    assert p.live_columns().version == version  # int into the long column: no change
    p.transform(avro_message(V2, {"id": "b", "qty": 2, "note": "n"}, schema_id=2))
    assert columns(p) == [("id", "string"), ("qty", "long"), ("note", "string")]


def test_a_recursive_schema_is_refused_at_start_and_per_message() -> None:
    node = {"type": "record", "name": "Node", "fields": [
        {"name": "next", "type": ["null", "Node"], "default": None}]}
    p = SchemaRowsProcessor()
    with pytest.raises(ValueError, match="recursive type 'Node': next refers back"):
        p.schema_known(parse_schema(node), 3)
    with pytest.raises(PoisonMessage, match="writer schema id 4: recursive type 'Node'"):
        p.transform(avro_message(node, {"next": None}, schema_id=4))


def test_a_tombstone_makes_no_row_and_options_are_checked() -> None:
    p = SchemaRowsProcessor()
    assert p.transform(avro_message(V1, {"id": "a", "qty": 1})._replace(value=None)) == []
    with pytest.raises(ValidationError):
        SchemaRowsProcessor({"on_incompatible": "ignore"})


def validate(tmp_path: Path, options: str, capsys: pytest.CaptureFixture[str],
             sink: str = "{type: spark, table: orders}") -> tuple[int, str]:
    path = tmp_path / "kstage.yml"
    path.write_text("name: s\nschema_registry: {url: 'http://registry:8081'}\ngroups:\n"
                    "  - topics:\n      - topic: orders\n        format: avro\n"
                    "        processor: schema_rows\n"
                    f"        sink: {sink}\n{options}",
                    encoding="utf-8")
    code = main(["validate", "-c", str(path)])
    out, err = capsys.readouterr()
    return code, out + err


def test_validate_takes_a_table_sink_and_refuses_a_bad_option_with_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = validate(tmp_path, "", capsys)
    assert code == 0, out  # a spark sink takes it: its columns come from the schema
    code, out = validate(tmp_path, "        options: {on_incompatible: ignore}\n", capsys)
    assert code == 2, out
    assert "groups[0].topics[0].options.on_incompatible (line 9): " in out, out


def test_validate_refuses_a_table_sink_that_cannot_evolve(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = validate(tmp_path, "", capsys, sink="{type: test_typed, dir: out}")
    assert code == 2, out
    assert ("groups[0].topics[0].processor (line 7): processor 'schema_rows' takes its "
            "columns from the writer schemas and a test_typed sink cannot evolve") in out, out
    # the jdbc sink evolves its table (ALTER TABLE ADD COLUMN, a widened type)
    code, out = validate(tmp_path, "", capsys, sink="{type: jdbc, table: orders, "
                         "url: 'jdbc:postgresql://db/x'}")
    assert code == 0, out


def test_a_key_and_deletes_make_a_keyed_class_and_tombstones_deletions() -> None:
    options = {"key": ["id"], "deletes": True}
    cls = SchemaRowsProcessor.configured(options)
    assert (cls.key, cls.emits_deletes) == (("id",), True)
    assert SchemaRowsProcessor.configured({"key": ["id"]}).emits_deletes is False
    assert SchemaRowsProcessor.configured({}) is SchemaRowsProcessor
    p = cls(options)
    row = p.transform(avro_message(V1, {"id": "a", "qty": 1}, key={"id": "a"}))[0]
    assert columns(p) == [("id", "string"), ("qty", "int"), ("_is_deleted", "boolean")]
    assert (row["id"], row["qty"]) == ("a", 1)  # _is_deleted False: the worker sets it
    gone = p.transform(avro_message(V1, {"id": "a", "qty": 1}, key={"id": "b"}, offset=4)
                       ._replace(value=None))
    assert gone == [{"id": "b", "_is_deleted": True, "_topic": "topic", "_partition": 0,
                     "_offset": 4, "_timestamp": gone[0]["_timestamp"]}]


def test_a_key_the_message_or_schema_lacks_is_poison_and_deletes_need_a_key() -> None:
    p = SchemaRowsProcessor({"key": ["id"], "deletes": True})
    with pytest.raises(PoisonMessage, match="before any writer schema of the topic is known"):
        p.transform(avro_message(V1, {"id": "a", "qty": 1}, key={"id": "a"})
                    ._replace(value=None))
    p.transform(avro_message(V1, {"id": "a", "qty": 1}))  # the value's id: no record key
    with pytest.raises(PoisonMessage, match=r"a tombstone \(null value\) at offset 0 deletes "
                       "its key, and its record key gives no id \\(got bytes\\); decode the "
                       "key with key_format: json or avro"):
        p.transform(avro_message(V1, {"id": "a", "qty": 1}, key=b"a")._replace(value=None))
    with pytest.raises(PoisonMessage, match="writer schema id 9 has no field for the key "
                       r"column\(s\) id \(options.key\)"):
        p.transform(avro_message(order(("sku", "string")), {"sku": "x"}, schema_id=9))
    with pytest.raises(ValidationError, match="deletes: true needs the natural key"):
        SchemaRowsProcessor({"deletes": True})
