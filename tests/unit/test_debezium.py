"""The ``debezium`` processor on Debezium's envelopes (JSON with and without its schema,
and the dict an Avro decode gives), the deletions it emits, and what ``validate`` refuses
about it: its options, and a sink that cannot take deletions."""

from __future__ import annotations

import base64
import datetime as dt
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema

from actors.codecs.avro import AvroDecoder, encode
from actors.errors import MessageFailedError
from actors.failure import FailurePolicy
from actors.record_columns import sink_columns
from actors.worker.pipeline import RecordPipeline, no_wait
from actors.worker.records import Record
from processors.base import DELETED, Column, Message, Row
from processors.debezium import DebeziumProcessor
from processors.errors import PoisonMessage
from processors.registry import for_options, load
from service.cli import main
from settings.models import FailureMode, FailureSettings, TopicSettings
from tests.doc_blocks import run_block
from tests.kafkautil import CHILD_PATH
from tests.unit.test_validate import HEAD, ROOT, only, validate

OPTIONS = {"table": "customers", "key_columns": ["id"],
           "columns": [{"name": "id", "type": "int"}, {"name": "email"},
                       {"name": "balance", "type": "decimal(12,2)"},
                       {"name": "updated_at", "type": "timestamp"},
                       {"name": "born", "type": "timestamp",
                        "time_type": "io.debezium.time.MicroTimestamp"}]}
SOURCE = {"version": "3.6.1.Final", "connector": "postgresql", "name": "dbz", "ts_ms": 1700,
          "snapshot": "false", "db": "shop", "schema": "public", "table": "customers",
          "txId": 771, "lsn": 24023128, "xmin": None}


def image(i: int, email: str, cents: int) -> dict[str, Any]:
    """A row image as Debezium's JSON converter writes it (decimal: base64 of the unscaled
    value; timestamptz: ISO text; timestamp: epoch microseconds)."""
    return {"id": i, "email": email,
            "balance": base64.b64encode(cents.to_bytes(4, "big", signed=True)).decode(),
            "updated_at": "2026-11-26T10:00:00.123456Z", "born": 86_400_000_001}


def event(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None
          ) -> dict[str, Any]:
    return {"before": before, "after": after, "source": SOURCE, "op": op, "ts_ms": 1701,
            "transaction": None}


def message(value: Any, offset: int = 5, key: Any = None) -> Message:
    return Message("dbz.public.customers", 0, offset, 1702, key, value, (), None)


def processor() -> DebeziumProcessor:
    return DebeziumProcessor(OPTIONS)


def test_options_shape_the_columns_and_key() -> None:
    cls = for_options(load("debezium"), OPTIONS)
    assert cls.table == "customers" and cls.key == ("id",) and cls.emits_deletes
    assert [(c.name, c.type, c.nullable) for c in cls.columns] == [
        ("id", "int", False), ("email", "string", True), ("balance", "decimal(12,2)", True),
        ("updated_at", "timestamp", True), ("born", "timestamp", True),
        ("_op", "string", True), ("_source_lsn", "long", True),
        ("_source_txid", "long", True), ("_source_ts_ms", "long", True)]
    topic = TopicSettings.model_validate({"topic": "t", "processor": "debezium",
                                          "options": OPTIONS})
    assert sink_columns(topic, cls)[-1] == Column(DELETED, "boolean", doc=(
        "True: the row of this key was deleted"))


def test_creates_updates_and_snapshot_reads_are_upserts_of_after() -> None:
    for op in "cur":
        [row] = processor().transform(message(event(op, None, image(1, "a@x", -1250))))
        assert row == {"id": 1, "email": "a@x", "balance": Decimal("-12.50"),
                       "updated_at": dt.datetime(2026, 11, 26, 10, 0, 0, 123456, dt.UTC),
                       "born": dt.datetime(1970, 1, 2, 0, 0, 0, 1, dt.UTC),
                       "_op": op, "_source_lsn": 24023128, "_source_txid": 771,
                       "_source_ts_ms": 1700, "_topic": "dbz.public.customers",
                       "_partition": 0, "_offset": 5, "_timestamp": 1702}


def test_a_delete_is_a_deletion_of_the_key_and_so_is_its_tombstone() -> None:
    [row] = processor().transform(message(event("d", image(1, "a@x", 5), None)))
    assert row == {"id": 1, DELETED: True, "_op": "d", "_source_lsn": 24023128,
                   "_source_txid": 771, "_source_ts_ms": 1700,
                   "_topic": "dbz.public.customers", "_partition": 0, "_offset": 5,
                   "_timestamp": 1702}
    # the key from the record key when decoded (JSON with its schema envelope)
    key = {"schema": {"type": "struct"}, "payload": {"id": 7}}
    [row] = processor().transform(message(event("d", {"id": 1}, None), key=key))
    assert row["id"] == 7
    # the tombstone deletes its record key too (its d may have been compacted away)
    gone = {"id": 7, DELETED: True, "_op": None, "_source_lsn": None, "_source_txid": None,
            "_source_ts_ms": None, "_topic": "dbz.public.customers", "_partition": 0,
            "_offset": 5, "_timestamp": 1702}
    assert processor().transform(message(None, key=key)) == [gone]
    assert processor().transform(message(None, key={"id": 7})) == [gone]
    # the JSON converter's envelope of a null payload is a tombstone as well
    assert processor().transform(message({"schema": None, "payload": None},
                                         key={"id": 7})) == [gone]


def test_a_tombstone_whose_key_is_not_decoded_is_poison_naming_key_format() -> None:
    for key in (b'{"id": 7}', None, {"other": 1}):
        with pytest.raises(PoisonMessage, match=(
                r"^a Debezium tombstone \(null value\) at offset 5 deletes its key, and its "
                r"record key gives no id \(got \w+\); decode the key with key_format: json "
                "or avro$")):
            processor().transform(message(None, key=key))


def test_json_with_schema_and_avro_decoded_envelopes() -> None:
    after = image(2, "b@x", 100)
    after["born"] = 86_400_001  # milliseconds, as the schema says
    schema = {"type": "struct", "fields": [
        {"type": "struct", "field": "before", "fields": []},
        {"type": "struct", "field": "after", "fields": [
            {"type": "int64", "field": "born", "name": "io.debezium.time.Timestamp"},
            {"type": "int32", "field": "updated_at", "name": "io.debezium.time.Date"}]}]}
    after["updated_at"] = 2  # days
    [row] = processor().transform(message({"schema": schema,
                                           "payload": event("c", None, after)}))
    assert row["born"] == dt.datetime(1970, 1, 2, 0, 0, 0, 1000, dt.UTC)
    assert row["updated_at"] == dt.datetime(1970, 1, 3, tzinfo=dt.UTC)
    assert row["balance"] == Decimal("1.00")
    # Avro: the decoded record holds bytes and a Decimal of the logical type
    avro = image(3, "c@x", 0) | {"balance": Decimal("3.10")}
    [row] = processor().transform(message(event("u", None, avro)))
    assert row["balance"] == Decimal("3.10")
    avro["balance"] = (310).to_bytes(2, "big")
    [row] = processor().transform(message(event("u", None, avro)))
    assert row["balance"] == Decimal("3.10")
    strings = DebeziumProcessor(OPTIONS | {"decimal_handling": "string"})
    [row] = strings.transform(message(event("u", None, image(3, "c", 0) | {"balance": "7.25"})))
    assert row["balance"] == Decimal("7.25")


@pytest.mark.parametrize(("value", "why"), [
    (event("t", None, None), "Debezium op 't' is not a change of one row"),
    (event("c", None, None), "Debezium op 'c' without a row image 'after'"),
    (event("c", None, image(1, "a", 1) | {"balance": "not base64!"}),
     "column 'balance' (decimal(12,2)) at offset 5: 'not base64!' does not convert"),
    (event("u", None, image(1, "a", 1) | {"id": None}),
     "Debezium event at offset 5 has no value for the key column(s) id"),
    ([1, 2], "a Debezium event is an object, not list"),
])
def test_poison_names_what_is_wrong(value: Any, why: str) -> None:
    with pytest.raises(PoisonMessage, match="^" + why.replace("(", r"\(").replace(")", r"\)")):
        processor().transform(message(value))


async def test_the_pipeline_marks_every_other_row_not_deleted() -> None:
    pipeline = RecordPipeline.for_processor(processor(), decode=json.loads)
    pipeline.decoded = True
    rows = await pipeline.rows([message(event("c", None, image(1, "a", 1)), 1),
                                message(event("d", image(1, "a", 1), None), 2),
                                message(None, 3, key={"id": 1})])  # type: ignore[list-item]
    assert [(r["_offset"], r[DELETED]) for r in rows] == [(1, False), (2, True), (3, True)]


DEBEZIUM = """\
        processor: debezium
        options:
          key_columns: [id]
          columns: [{name: id, type: int}, {name: total, type: "decimal(40,2)"}]
"""


def test_validate_refuses_bad_options_with_their_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, lines = validate(tmp_path, capsys, HEAD + DEBEZIUM
                           + "        sink: {type: jsonl, path: out.jsonl}\n")
    assert "decimal(40,2)" in only(lines, path, "groups[0].topics[0].options.columns[1].type",
                                   10)
    path, lines = validate(tmp_path, capsys, HEAD + DEBEZIUM.replace("40,2", "10,2").replace(
        "[id]", "[nope]") + "        sink: {type: jsonl, path: out.jsonl}\n")
    assert "key column(s) nope are not among the columns (id, total)" in " ".join(lines)


def test_validate_refuses_a_sink_that_cannot_take_deletions(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = HEAD + DEBEZIUM.replace("40,2", "10,2")
    for sink in ("{type: jsonl, path: out.jsonl}", "{type: http, url: 'http://x/'}"):
        (tmp_path / "ok.yml").write_text(good + f"        sink: {sink}\n", encoding="utf-8")
        assert main(["validate", "-c", str(tmp_path / "ok.yml")]) == 0, capsys.readouterr()
        capsys.readouterr()
    path, lines = validate(tmp_path, capsys, good
                           + "        sink: {type: test_typed, dir: out}\n")
    assert only(lines, path, "groups[0].topics[0].processor", 7) == (
        "processor 'debezium' emits deletions and a test_typed sink cannot take them (its "
        "SinkCapabilities.deletes is False); use a sink that can (jsonl, http, spark, jdbc)")


async def test_the_plugin_guides_deletion_example_deletes_on_a_tombstone() -> None:
    """docs/plugins.md's Accounts processor: a tombstone becomes a deletion of its key."""
    accounts = run_block("docs/plugins.md", "class Accounts(Processor)")["Accounts"]()
    pipeline = RecordPipeline.for_processor(accounts)
    pipeline.decoded = True
    rows = await pipeline.rows([
        Message("accounts", 0, 1, 10, b"a1", {"owner": "ann"}, (), None),
        Message("accounts", 0, 2, 11, b"a1", None, (), None)])  # type: ignore[list-item]
    assert rows == [
        {"id": "a1", "owner": "ann", DELETED: False, "_topic": "accounts", "_partition": 0,
         "_offset": 1, "_timestamp": 10},
        {"id": "a1", DELETED: True, "_topic": "accounts", "_partition": 0, "_offset": 2,
         "_timestamp": 11}]


def test_run_exits_2_on_a_sink_that_cannot_take_deletions(tmp_path: Path) -> None:
    path = tmp_path / "kstage.yml"
    path.write_text("name: run-no-deletes\nkafka: {bootstrap: \"127.0.0.1:9\"}\n"
                    "service: {http_port: 0}\n" + HEAD.split("\n", 3)[3]
                    + DEBEZIUM.replace("40,2", "10,2")
                    + "        sink: {type: test_typed, dir: out}\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "service", "run", "-c", str(path)], cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": CHILD_PATH},
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"kstage: {path}: groups[0].topics[0].processor (line 7): processor 'debezium' emits "
        "deletions and a test_typed sink cannot take them (its SinkCapabilities.deletes is "
        "False); use a sink that can (jsonl, http, spark, jdbc)"]


# ---------------------------------------------------------------- time types from Avro

def _optional(kind: dict[str, Any]) -> list[Any]:
    return ["null", kind]


def avro_envelope(columns: list[dict[str, Any]]) -> dict[str, Any]:
    """The value schema Debezium's PostgreSQL connector registers through Confluent's
    AvroConverter: ``before`` defines the ``Value`` record, ``after`` names it; each
    column's Connect type in ``connect.name`` (and Avro's logical type in
    ``time.precision.mode: connect``)."""
    value = {"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": "int"},
        *({"name": c["name"], "type": _optional(c["type"]), "default": None}
          for c in columns)], "connect.name": "dbz.public.customers.Value"}
    source = {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
              "fields": [{"name": "version", "type": "string"},
                         {"name": "connector", "type": "string"},
                         {"name": "name", "type": "string"},
                         {"name": "ts_ms", "type": "long"},
                         {"name": "snapshot", "type": [{"type": "string", "connect.version": 1,
                          "connect.parameters": {"allowed": "true,last,false,incremental"},
                          "connect.default": "false", "connect.name": "io.debezium.data.Enum"},
                          "null"], "default": "false"},
                         {"name": "db", "type": "string"},
                         {"name": "schema", "type": "string"},
                         {"name": "table", "type": "string"},
                         {"name": "txId", "type": ["null", "long"], "default": None},
                         {"name": "lsn", "type": ["null", "long"], "default": None}],
              "connect.name": "io.debezium.connector.postgresql.Source"}
    return {"type": "record", "name": "Envelope", "namespace": "dbz.public.customers",
            "fields": [{"name": "before", "type": ["null", value], "default": None},
                       {"name": "after", "type": ["null", "Value"], "default": None},
                       {"name": "source", "type": source},
                       {"name": "op", "type": "string"},
                       {"name": "ts_ms", "type": ["null", "long"], "default": None}],
            "connect.version": 2, "connect.name": "dbz.public.customers.Envelope"}


def _time(kind: str, name: str, logical: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"type": kind, "connect.version": 1, "connect.name": name}
    if logical:
        found["logicalType"] = logical
    return found


ADAPTIVE = [  # time.precision.mode: adaptive (Debezium's default)
    {"name": "born", "type": _time("int", "io.debezium.time.Date")},
    {"name": "seen", "type": _time("long", "io.debezium.time.MicroTimestamp")},
    {"name": "paid", "type": _time("long", "io.debezium.time.Timestamp")},
    {"name": "nano", "type": _time("long", "io.debezium.time.NanoTimestamp")},
    {"name": "at", "type": _time("string", "io.debezium.time.ZonedTimestamp")},
    {"name": "wake", "type": _time("long", "io.debezium.time.MicroTime")}]
CONNECT = [  # time.precision.mode: connect (Kafka Connect's types, Avro logical types)
    {"name": "born", "type": _time("int", "org.apache.kafka.connect.data.Date", "date")},
    {"name": "seen", "type": _time("long", "org.apache.kafka.connect.data.Timestamp",
                                   "timestamp-millis")},
    {"name": "paid", "type": _time("long", "org.apache.kafka.connect.data.Timestamp",
                                   "timestamp-millis")},
    {"name": "nano", "type": _time("long", "org.apache.kafka.connect.data.Timestamp",
                                   "timestamp-millis")},
    {"name": "at", "type": _time("string", "io.debezium.time.ZonedTimestamp")},
    {"name": "wake", "type": _time("int", "org.apache.kafka.connect.data.Time",
                                   "time-millis")}]
TIMES = {"key_columns": ["id"], "columns": [
    {"name": "id", "type": "int"}, *({"name": n, "type": "timestamp"} for n in
                                     ("born", "seen", "paid", "nano", "at")),
    {"name": "wake", "type": "long"}]}
SOURCE_AVRO = {"version": "3.6.1.Final", "connector": "postgresql", "name": "dbz",
               "ts_ms": 1700, "snapshot": "false", "db": "shop", "schema": "public",
               "table": "customers", "txId": 771, "lsn": 24023128}


async def avro_rows(columns: list[dict[str, Any]], after: dict[str, Any],
                    options: dict[str, Any] = TIMES) -> list[Row]:
    """The rows ``kstage`` makes of one Avro event (the registry's wire format, decoded by
    its Avro decoder in the record pipeline of a ``format: avro`` topic)."""
    schema = avro_envelope(columns)
    decoder = AvroDecoder(_OneSchema(json.dumps(schema)))
    await decoder.fetch((1).to_bytes(4, "big"))
    topic = TopicSettings.model_validate({"topic": "dbz.public.customers",
                                          "processor": "debezium", "format": "avro",
                                          "options": options})
    pipeline = RecordPipeline(
        topic=topic, processor=DebeziumProcessor(options), group_id="g", avro=decoder,
        failure=FailurePolicy(FailureSettings(mode=FailureMode.THROW), no_wait))
    raw = encode(parse_schema(schema), 1, {"before": None, "after": after,
                                           "source": SOURCE_AVRO, "op": "c", "ts_ms": 1701})
    return await pipeline.rows([Record("dbz.public.customers", 0, 3, 1702, None, raw)])


class _OneSchema:
    def __init__(self, text: str) -> None:
        self.text = text

    async def get_schema(self, schema_id: int | str) -> str:
        return self.text


async def test_avro_time_types_as_debezium_writes_them_adaptive() -> None:
    """19000 days is 2022-01-08, not 19 ms after the epoch; each unit as its
    ``connect.name`` says."""
    [row] = await avro_rows(ADAPTIVE, {
        "id": 1, "born": 19000, "seen": 1_700_000_000_123_456, "paid": 1_700_000_000_123,
        "nano": 1_700_000_000_123_456_789, "at": "2026-11-26T10:00:00.5+01:00",
        "wake": 3_600_000_001})
    assert row["born"] == dt.datetime(2022, 1, 8, tzinfo=dt.UTC)
    assert row["seen"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456, dt.UTC)
    assert row["paid"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, dt.UTC)
    assert row["nano"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456, dt.UTC)
    assert row["at"] == dt.datetime(2026, 11, 26, 9, 0, 0, 500000, dt.UTC)
    assert row["wake"] == 3_600_000_001  # a time of day kept as a number in a long column
    assert row["_source_lsn"] == 24023128


async def test_avro_time_types_as_debezium_writes_them_connect() -> None:
    [row] = await avro_rows(CONNECT, {
        "id": 1, "born": dt.date(2022, 1, 8),
        "seen": dt.datetime(2023, 11, 14, 22, 13, 20, 123000, dt.UTC),
        "paid": dt.datetime(2023, 11, 14, 22, 13, 20, 123000, dt.UTC),
        "nano": None, "at": None, "wake": None},
        TIMES | {"columns": [c for c in TIMES["columns"] if c["name"] != "wake"]})
    assert row["born"] == dt.datetime(2022, 1, 8, tzinfo=dt.UTC)
    assert row["seen"] == row["paid"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, dt.UTC)


async def test_a_time_of_day_in_a_timestamp_column_is_poison() -> None:
    options = TIMES | {"columns": [*TIMES["columns"][:-1],
                                   {"name": "wake", "type": "timestamp"}]}
    with pytest.raises(MessageFailedError, match=(
            "column 'wake' \\(timestamp\\) at offset 3: 3600000001 does not convert: "
            "io.debezium.time.MicroTime is a time of day, not an instant; declare the "
            "column long")):
        await avro_rows(ADAPTIVE, {"id": 1, "born": None, "seen": None, "paid": None,
                                   "nano": None, "at": None, "wake": 3_600_000_001}, options)


def test_json_without_schema_reads_the_declared_time_type_and_never_guesses() -> None:
    options = {"key_columns": ["id"], "columns": [{"name": "id", "type": "int"},
                                                  {"name": "born", "type": "timestamp"}]}
    bare = event("c", None, {"id": 1, "born": 19000})
    with pytest.raises(PoisonMessage, match=(
            "column 'born' \\(timestamp\\) at offset 5: 19000 does not convert: the unit "
            "of this epoch number is unknown: the event's schema names no time type for it "
            "\\(JSON without schemas: declare the column's time_type\\)")):
        DebeziumProcessor(options).transform(message(bare))
    options["columns"][1]["time_type"] = "io.debezium.time.Date"
    [row] = DebeziumProcessor(options).transform(message(bare))
    assert row["born"] == dt.datetime(2022, 1, 8, tzinfo=dt.UTC)


TIMESTAMP_JSON = """\
        processor: debezium
        options:
          key_columns: [id]
          json_schemas: false
          columns:
            - {name: id, type: int}
            - {name: born, type: timestamp}
        sink: {type: jsonl, path: out.jsonl}
"""


def test_validate_refuses_a_timestamp_column_without_time_type_when_json_has_no_schema(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, lines = validate(tmp_path, capsys, HEAD + TIMESTAMP_JSON)
    assert only(lines, path, "groups[0].topics[0].options.columns[1].time_type", 13) == (
        "column 'born' is a timestamp and json_schemas is false: the events carry no "
        "schema to say whether a number is days, milliseconds, microseconds or "
        "nanoseconds since the epoch; declare its time_type (one of "
        "io.debezium.time.Date, org.apache.kafka.connect.data.Date, "
        "io.debezium.time.Timestamp, org.apache.kafka.connect.data.Timestamp, "
        "io.debezium.time.MicroTimestamp, io.debezium.time.NanoTimestamp, "
        "io.debezium.time.ZonedTimestamp)")
    fixed = TIMESTAMP_JSON.replace(
        "born, type: timestamp}", "born, type: timestamp, time_type: io.debezium.time.Date}")
    (tmp_path / "ok.yml").write_text(HEAD + fixed, encoding="utf-8")
    assert main(["validate", "-c", str(tmp_path / "ok.yml")]) == 0, capsys.readouterr()


def test_run_exits_2_on_a_timestamp_column_without_time_type(tmp_path: Path) -> None:
    path = tmp_path / "kstage.yml"
    path.write_text("name: run-no-unit\nkafka: {bootstrap: \"127.0.0.1:9\"}\n"
                    "service: {http_port: 0}\n" + HEAD.split("\n", 3)[3] + TIMESTAMP_JSON,
                    encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "service", "run", "-c", str(path)], cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": CHILD_PATH},
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"kstage: {path}: groups[0].topics[0].options.columns[1]."
                           "time_type (line 13): column 'born' is a timestamp"), line
