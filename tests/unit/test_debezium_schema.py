"""The ``debezium`` processor without ``options.columns``: its columns come from the
events' Connect schema (JSON with schemas, Avro's writer schema) and evolve while it runs
(a source ``ALTER TABLE ADD COLUMN``); an incompatible change is poison naming the field,
or stops the topic."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from fastavro import parse_schema

from actors.record_columns import sink_columns
from processors.base import DELETED, Message
from processors.debezium import DebeziumProcessor
from processors.errors import PoisonMessage, StopTopic
from processors.registry import for_options, load
from settings.models import TopicSettings

OPTIONS = {"table": "customers", "key_columns": ["id"]}
ID = {"type": "int32", "optional": False, "field": "id"}
EMAIL = {"type": "string", "optional": True, "field": "email"}
BALANCE = {"type": "bytes", "optional": True, "field": "balance",
           "name": "org.apache.kafka.connect.data.Decimal",
           "parameters": {"scale": "2", "connect.decimal.precision": "12"}}
AT = {"type": "string", "optional": True, "field": "updated_at",
      "name": "io.debezium.time.ZonedTimestamp"}
NOTE = {"type": "string", "optional": True, "field": "note"}
SOURCE = {"lsn": 100, "txId": 10, "ts_ms": 1700}


def envelope(op: str, image: dict[str, Any], columns: list[dict[str, Any]]) -> dict[str, Any]:
    """A Debezium event as the JSON converter writes it (schemas.enable=true)."""
    schema = {"type": "struct", "name": "dbz.public.customers.Envelope", "fields": [
        {"type": "struct", "optional": True, "field": "before", "fields": columns,
         "name": "dbz.public.customers.Value"},
        {"type": "struct", "optional": True, "field": "after", "fields": columns,
         "name": "dbz.public.customers.Value"},
        {"type": "string", "optional": False, "field": "op"}]}
    return {"schema": schema, "payload": {
        "before": image if op == "d" else None, "after": None if op == "d" else image,
        "source": SOURCE, "op": op, "ts_ms": 1701}}


def message(value: Any, offset: int = 5, key: Any = None) -> Message:
    return Message("dbz.public.customers", 0, offset, 1702, key, value, (), None)


def described(processor: DebeziumProcessor) -> list[tuple[str, str, bool]]:
    live = processor.live_columns()
    assert live is not None
    return [(c.name, c.type, c.nullable) for c in live.columns]


SOURCE_COLUMNS = [("_op", "string", True), ("_source_lsn", "long", True),
                  ("_source_txid", "long", True), ("_source_ts_ms", "long", True),
                  (DELETED, "boolean", True)]


def test_without_columns_the_table_comes_from_the_events_schema() -> None:
    cls = for_options(load("debezium"), OPTIONS)
    assert cls.columns_from_schema and cls.key == ("id",) and cls.columns == ()
    topic = TopicSettings.model_validate({"topic": "t", "processor": "debezium",
                                          "options": OPTIONS})
    assert sink_columns(topic, cls) == ()  # the sinks follow live_columns()
    assert not for_options(load("debezium"), {**OPTIONS, "columns": [
        {"name": "id", "type": "int"}]}).columns_from_schema  # an explicit list still wins
    processor = DebeziumProcessor(OPTIONS)
    assert processor.live_columns() is not None and described(processor) == []
    value = {"id": 1, "email": "a@x", "balance": "BNo=", "updated_at": "2026-11-26T10:00:00Z"}
    [row] = processor.transform(message(envelope("c", value, [ID, EMAIL, BALANCE, AT])))
    assert described(processor) == [
        ("id", "int", False), ("email", "string", True), ("balance", "decimal(12,2)", True),
        ("updated_at", "timestamp", True), *SOURCE_COLUMNS]
    assert row == {"id": 1, "email": "a@x", "balance": Decimal("12.42"),
                   "updated_at": dt.datetime(2026, 11, 26, 10, tzinfo=dt.UTC), "_op": "c",
                   "_source_lsn": 100, "_source_txid": 10, "_source_ts_ms": 1700,
                   "_topic": "dbz.public.customers", "_partition": 0, "_offset": 5,
                   "_timestamp": 1702}


def test_a_column_added_at_the_source_is_added_and_earlier_rows_read_null() -> None:
    processor = DebeziumProcessor(OPTIONS)
    live = processor.live_columns()
    assert live is not None
    processor.transform(message(envelope("r", {"id": 1, "email": "a"}, [ID, EMAIL]), 1))
    first = live.version
    processor.transform(message(envelope("u", {"id": 1, "email": "b"}, [ID, EMAIL]), 2))
    assert live.version == first  # the same schema: nothing changes
    [row] = processor.transform(message(envelope(
        "c", {"id": 2, "email": "c", "note": "n"}, [ID, EMAIL, NOTE]), 3))
    assert live.version == first + 1 and row["note"] == "n"
    assert described(processor) == [("id", "int", False), ("email", "string", True),
                                    *SOURCE_COLUMNS, ("note", "string", True)]
    # an event of the older schema (a replay, another partition) still lands: note NULL
    [row] = processor.transform(message(envelope("u", {"id": 1, "email": "d"}, [ID, EMAIL]),
                                        4))
    assert "note" not in row and live.version == first + 1
    # a delete: the key from the record key (JSON envelope), the rest NULL
    key = {"schema": {"type": "struct", "fields": [ID]}, "payload": {"id": 2}}
    [row] = processor.transform(message(envelope("d", {"id": 2, "email": "c", "note": "n"},
                                                 [ID, EMAIL, NOTE]), 5, key=key))
    assert (row["id"], row[DELETED], row["_op"]) == (2, True, "d")
    [row] = processor.transform(message(None, 6, key=key))  # its tombstone
    assert (row["id"], row[DELETED], row["_op"]) == (2, True, None)


def test_an_incompatible_change_is_poison_naming_the_field_or_stops() -> None:
    processor = DebeziumProcessor(OPTIONS)
    processor.transform(message(envelope("c", {"id": 1, "email": "a"}, [ID, EMAIL])))
    changed = {**EMAIL, "type": "int64"}  # ALTER COLUMN email TYPE bigint
    with pytest.raises(PoisonMessage, match=(
            "field 'email' is long in the event's schema, string in the table's column: "
            "not a widening")):
        processor.transform(message(envelope("c", {"id": 2, "email": 5}, [ID, changed])))
    # the rest of the topic flows
    [row] = processor.transform(message(envelope("c", {"id": 3, "email": "c"}, [ID, EMAIL])))
    assert row["id"] == 3
    stopping = DebeziumProcessor({**OPTIONS, "on_incompatible": "stop"})
    stopping.transform(message(envelope("c", {"id": 1, "email": "a"}, [ID, EMAIL])))
    with pytest.raises(StopTopic, match="field 'email'"):
        stopping.transform(message(envelope("c", {"id": 2, "email": 5}, [ID, changed])))


def test_a_key_column_missing_from_the_schema_or_a_bad_value_is_poison() -> None:
    with pytest.raises(PoisonMessage, match=(
            r"key column\(s\) id are not fields of the event's row schema \(email\)")):
        DebeziumProcessor(OPTIONS).transform(message(envelope("c", {"email": "a"}, [EMAIL])))
    with pytest.raises(PoisonMessage, match="field 'balance': 'not base64!' does not convert"):
        DebeziumProcessor(OPTIONS).transform(message(envelope(
            "c", {"id": 1, "balance": "not base64!"}, [ID, BALANCE])))
    with pytest.raises(PoisonMessage, match="has no schema to take the columns from"):
        DebeziumProcessor(OPTIONS).transform(message(envelope("c", {"id": 1}, [ID])["payload"]))


def test_json_without_schemas_needs_columns() -> None:
    with pytest.raises(ValueError, match="json_schemas is false: the events carry no schema"):
        DebeziumProcessor({**OPTIONS, "json_schemas": False})


AVRO = parse_schema({"type": "record", "name": "Envelope", "namespace": "dbz", "fields": [
    {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": "int"},
        {"name": "born", "type": ["null", {"type": "int",
                                           "connect.name": "io.debezium.time.Date"}]}]}]},
    {"name": "after", "type": ["null", "Value"]},
    {"name": "op", "type": "string"}]})


def test_avro_writer_schema_gives_the_columns_at_start_and_per_message() -> None:
    processor = DebeziumProcessor(OPTIONS)
    processor.schema_known(AVRO, 7)  # the latest schema of the subject, before any message
    assert described(processor)[:2] == [("id", "int", False), ("born", "date", True)]
    value = {"before": None, "after": {"id": 1, "born": 2}, "op": "c", "source": SOURCE}
    [row] = processor.transform(Message("t", 0, 1, 2, None, value, (), None, -1, AVRO, 7))
    assert row["born"] == dt.date(1970, 1, 3)
