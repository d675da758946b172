"""The compatibility matrix of producer changes (issue 34, point 3), for Avro, Protobuf and
JSON Schema, on both brokers (each format on each).

Each change is a v1 -> v2 of one writer schema. For each compatibility level (BACKWARD,
FORWARD, FULL, NONE) a subject of its own gets v1 then v2, registered the way producers
do: by confluent-kafka's ``AvroSerializer`` and ``JSONSerializer`` (auto-register), and for
Protobuf by confluent-kafka's registry client (the tests' registry takes ``.proto`` text,
not the descriptor the serializer would send) with its ``ProtobufSerializer`` writing the
records; the tests' registry accepts or refuses v2 as its level says
(:mod:`tests.registry_compat`). Every change then gets a topic of its own, with v1 and v2
records interleaved (v1, v2, v1, v2: old and new producers at once; the ids are those the
registry gave), all of one format landed by ``kstage run --drain`` (real process, both
append paths: ``spark.appends: pyiceberg`` and ``spark``; each format on each path once,
on the two brokers in turn: tests/brokers.py's ``PAIRWISE``) into one table per topic: a
first run lands v1's first record (the table made with v1), a second the rest. What
kstage did with v2 is read back: ``evolves`` (every row lands and the table's schema
changed: v1 rows NULL in new columns), ``fits`` (every row lands, the table unchanged) or
``dead-lettered`` (each v2 record dead-lettered naming the field, the schema id and the
reason, the column as the table's found at start (the second run's: the id that typed
it is not kept across restarts); the v1 records land). The tables are read with
pyiceberg and with Spark, the same rows.

The expected matrix is the table in docs/plugins.md ("Producer changes, by format"): the
test reads it from there, so the docs say what kstage and the registry do.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.schema_registry import (
    ConfigCompatibilityLevel,
    Schema,
    SchemaRegistryClient,
    SchemaRegistryError,
    ServerConfig,
)
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from actors.sinks.spark.actor import SparkActor
from tests.brokers import PAIRWISE
from tests.fake_registry import FakeRegistry
from tests.kafkautil import (
    KstageProcess,
    committed,
    create_topic,
    produce,
    read_jsonl,
    unique,
    write_config,
)
from tests.lake import IcebergReader, spark_section, spark_settings
from tests.proto_files import message_classes

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"
LEVELS = ("BACKWARD", "FORWARD", "FULL", "NONE")
FORMATS = ("avro", "protobuf", "json_schema")

# the producer changes, in the docs table's order: (name, the field it touches)
CHANGES = [("optional field added", "note"), ("optional field added in a nested record",
                                             "item.color"),
           ("int -> long", "qty"), ("float -> double", "price"), ("field removed", "price"),
           ("required -> optional", "id"), ("string -> int", "id"),
           ("narrowed type", "big"), ("new required field without default", "code")]


# ---------------------------------------------------------------- the schemas


def _avro(changes: dict[str, Any]) -> str:
    item = [{"name": "sku", "type": "string"}]
    if changes.get("nested"):
        item.append({"name": "color", "type": ["null", "string"], "default": None})
    fields: list[dict[str, Any]] = [
        {"name": "id", "type": changes.get("id", "string")},
        {"name": "qty", "type": changes.get("qty", "int")},
        {"name": "big", "type": changes.get("big", "long")},
        {"name": "price", "type": changes.get("price", "float")},
        {"name": "item", "type": {"type": "record", "name": "Item", "fields": item}}]
    if changes.get("removed"):
        fields = [f for f in fields if f["name"] != "price"]
    if changes.get("note"):
        fields.append({"name": "note", "type": ["null", "string"], "default": None})
    if changes.get("code"):
        fields.append({"name": "code", "type": "string"})
    if "id" in changes and isinstance(changes["id"], list):
        fields[0]["default"] = None
    return json.dumps({"type": "record", "name": "Order", "namespace": "cm",
                       "fields": fields})


def _proto(changes: dict[str, Any]) -> str | None:
    if changes.get("code"):
        return None  # proto3 has no required fields
    color = "  optional string color = 2;\n" if changes.get("nested") else ""
    ident = {"optional": "optional string", "int": "int32"}.get(changes.get("id", ""),
                                                               "string")
    price = "" if changes.get("removed") else \
        f"  {'double' if changes.get('price') else 'float'} price = 4;\n"
    note = "  optional string note = 6;\n" if changes.get("note") else ""
    return ('syntax = "proto3";\npackage cm;\n'
            f"message Item {{\n  string sku = 1;\n{color}}}\n"
            f"message Order {{\n  {ident} id = 1;\n"
            f"  {'int64' if changes.get('qty') else 'int32'} qty = 2;\n"
            f"  {'int32' if changes.get('big') else 'int64'} big = 3;\n"
            f"{price}  Item item = 5;\n{note}}}\n")


def _json(changes: dict[str, Any]) -> str | None:
    if changes.get("price") and not changes.get("narrow"):
        return None  # JSON Schema has one number type
    item: dict[str, Any] = {"sku": {"type": "string"}}
    if changes.get("nested"):
        item["color"] = {"type": "string"}
    props: dict[str, Any] = {
        "id": {"type": "integer" if changes.get("id") == "int" else "string"},
        "qty": {"type": "number" if changes.get("qty") else "integer"},
        "big": {"type": "integer"},
        "price": {"type": "integer" if changes.get("narrow") else "number"},
        "item": {"type": "object", "properties": item, "required": ["sku"],
                 "additionalProperties": False}}
    required = ["id", "qty", "big", "price", "item"]
    if changes.get("removed"):
        del props["price"]
        required.remove("price")
    if changes.get("id") == "optional":
        required.remove("id")
    if changes.get("note"):
        props["note"] = {"type": "string"}
    if changes.get("code"):
        props["code"] = {"type": "string"}
        required.append("code")
    # a closed content model: Confluent's rules refuse any property added to an open one
    return json.dumps({"type": "object", "title": "Order", "properties": props,
                       "required": required, "additionalProperties": False})


# each change as the keyword its schema makes of it (JSON Schema: integer -> number
# for "int -> long", number -> integer for "narrowed type")
_KEYS: list[dict[str, Any]] = [
    {"note": True}, {"nested": True}, {"qty": "long"}, {"price": "double"},
    {"removed": True}, {"id": "optional"}, {"id": "int"}, {"big": "int"}, {"code": True}]


def schemas(fmt: str, change: int) -> tuple[str, str] | None:
    """(v1, v2) of a change in a format, None when the format has no such change."""
    keys = dict(_KEYS[change])
    if fmt == "avro":
        if keys.get("id") == "optional":
            keys["id"] = ["null", "string"]
        return _avro({}), _avro(keys)
    if fmt == "protobuf":
        v2 = _proto(keys)
        return None if v2 is None else (_proto({}) or "", v2)
    if "big" in keys:  # narrowed: number -> integer
        keys = {"price": True, "narrow": True}
    v2j = _json(keys)
    return None if v2j is None else (_json({}) or "", v2j)


def value(fmt: str, change: int, version: int, n: int) -> dict[str, Any]:
    """Record ``n`` (0..3) of a change's topic, of v1 or v2."""
    keys = _KEYS[change] if version == 2 else {}
    out: dict[str, Any] = {"id": 100 + n if keys.get("id") == "int" else f"r{n}",
                           "qty": 10 + n, "big": 20 + n, "price": 0.5 + n,
                           "item": {"sku": f"k{n}"}}
    if fmt == "json_schema" and keys.get("qty"):
        out["qty"] = 10.5 + n  # integer -> number: a number no long holds
    if fmt == "json_schema" and keys.get("big"):
        out["price"] = n  # number -> integer
    if keys.get("nested"):
        out["item"]["color"] = f"c{n}"
    if keys.get("removed"):
        del out["price"]
    if keys.get("note"):
        out["note"] = f"n{n}"
    if keys.get("code"):
        out["code"] = f"x{n}"
    return out


# ----------------------------------------------------------- registering, serializing


def level_config(level: str) -> ServerConfig:
    return ServerConfig(compatibility=ConfigCompatibilityLevel(level))


class Producer:
    """confluent-kafka's serializer of one schema under one subject."""

    def __init__(self, client: SchemaRegistryClient, fmt: str, subject: str,
                 schema: str, serializing: SchemaRegistryClient) -> None:
        def name(ctx: Any, record: Any) -> str:
            return subject

        self.fmt = fmt
        conf = {"subject.name.strategy": name}
        if fmt == "avro":
            self._serializer: Callable[..., Any] = AvroSerializer(client, schema, conf=conf)
        elif fmt == "json_schema":
            self._serializer = JSONSerializer(schema, client, conf=conf)
        else:  # registered as .proto text by the client; the serializer writes with its id
            schema_id = client.register_schema(subject, Schema(schema, "PROTOBUF"))
            self._message = message_classes({"cm.proto": schema})["cm.Order"]
            # another client: the registering one caches the .proto text by id, and the
            # serializer asks for the id's descriptor
            self._serializer = ProtobufSerializer(self._message, serializing, {
                "use.schema.id": schema_id, "auto.register.schemas": False,
                "use.deprecated.format": False, "subject.name.strategy": name})

    def __call__(self, record: dict[str, Any]) -> bytes:
        obj: Any = record
        if self.fmt == "protobuf":
            obj = self._message()
            for key, val in record.items():
                if key == "item":
                    obj.item.sku = val["sku"]
                    if "color" in val:
                        obj.item.color = val["color"]
                else:
                    setattr(obj, key, val)
        out = self._serializer(obj, SerializationContext("t", MessageField.VALUE))
        assert out is not None
        return bytes(out)


def register(clients: tuple[SchemaRegistryClient, SchemaRegistryClient], fmt: str,
             subject: str, change: int, v1: str, v2: str, level: str,
             ) -> tuple[bool, Producer | None, Producer]:
    """v1 then v2 under ``subject`` at ``level``: (v2 accepted, v2's producer, v1's)."""
    client, serializing = clients
    client.set_config(subject, level_config(level))
    first = Producer(client, fmt, subject, v1, serializing)
    first(value(fmt, change, 1, 0))
    try:
        second = Producer(client, fmt, subject, v2, serializing)
        second(value(fmt, change, 2, 1))
    except SchemaRegistryError as exc:
        assert exc.http_status_code == 409, exc
        return False, None, first
    return True, second, first


# ------------------------------------------------------------------ the docs table


def doc_matrix() -> dict[tuple[str, str], tuple[str, ...]]:
    """(change, format) -> (BACKWARD, FORWARD, FULL, NONE, kstage) of the docs table:
    each registry cell ``yes``/``no``, kstage's ``evolves``/``fits``/``dead-lettered``;
    a format without the change: ``n/a`` alone."""
    text = DOC.read_text()
    section = text.split("#### Producer changes, by format", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        for fmt, cell in zip(FORMATS, cells[1:], strict=True):
            out[(cells[0], fmt)] = ("n/a",) if cell.startswith("n/a") else tuple(
                cell.replace("`", "").split())
    return out


def columns(reader: IcebergReader, table: str) -> str:
    """The table's schema (names, types, nested ones too) as pyiceberg reads it."""
    namespace = reader.settings.catalog.namespace
    return str(reader.catalog.load_table((namespace, table)).schema())


def comparable(rows: list[dict[str, Any]]) -> list[str]:
    """Rows as sorted JSON texts, nested values too, without ``_ingested_at`` (Spark and
    pyiceberg hand timestamps differently: tests.lake compares those)."""
    return sorted(json.dumps({k: v for k, v in row.items() if k != "_ingested_at"},
                             sort_keys=True, default=str) for row in rows)


def spark_read(spark: Any, table: str) -> list[str]:
    """Spark thread: every row of ``table``, as :func:`comparable` makes them."""
    return comparable([r.asDict(recursive=True) for r in spark.table(table).collect()])


@pytest.fixture(scope="module")
def spark_reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SparkActor,
                                                                           dict[str, Any]]]:
    """One Spark session for the module (a process has one) on a catalog every run of
    the module writes its tables to."""
    lake = tmp_path_factory.mktemp("matrix-lake")
    catalog = {"uri": f"jdbc:sqlite:{lake / 'catalog.db'}", "warehouse": str(lake / "wh")}
    actor = SparkActor(spark_settings(spark_section(catalog)))
    yield actor, catalog
    actor.stop()


def test_the_docs_table_names_every_change_and_format() -> None:
    matrix = doc_matrix()
    assert sorted(matrix) == sorted((name, fmt) for name, _ in CHANGES for fmt in FORMATS)
    # every column of the table runs (pairwise over brokers and append paths: brokers.py)
    runs = PAIRWISE["test_compat_matrix::test_compatibility_matrix"].cases
    assert {fmt for _, fmt, _ in runs} == set(FORMATS)
    for (name, fmt), cells in matrix.items():
        assert cells == ("n/a",) or (
            len(cells) == 5 and set(cells[:4]) <= {"yes", "no"}
            and cells[4] in ("evolves", "fits", "dead-lettered")), (name, fmt, cells)
        assert (cells == ("n/a",)) == (schemas(fmt, [n for n, _ in CHANGES].index(name))
                                       is None), (name, fmt)


@pytest.mark.timeout(900)  # two kstage runs, each with a JVM on the spark path
async def test_compatibility_matrix(broker: str, tmp_path: Path,
                                    kstage: type[KstageProcess],
                                    spark_reader: tuple[SparkActor, dict[str, Any]],
                                    fmt: str, appends: str) -> None:
    reader_actor, catalog = spark_reader
    expected = doc_matrix()
    run = unique(f"cm-{appends}").replace("-", "_")
    group = unique("g-cm")
    observed: dict[str, tuple[str, ...]] = {}
    topics: dict[int, str] = {}
    ids: dict[int, tuple[int, int]] = {}
    later: dict[str, list[bytes]] = {}
    with FakeRegistry() as registry, SchemaRegistryClient({"url": registry.url}) as client, \
            SchemaRegistryClient({"url": registry.url}) as serializing:
        for change, (name, _) in enumerate(CHANGES):
            pair = schemas(fmt, change)
            if pair is None:
                observed[name] = ("n/a",)
                continue
            v1, v2 = pair
            verdicts = []
            for level in LEVELS:
                accepted, second, first = register(
                    (client, serializing), fmt, f"{run}-{change}-{level.lower()}", change,
                    v1, v2, level)
                verdicts.append("yes" if accepted else "no")
            assert second is not None  # NONE accepts every change
            observed[name] = tuple(verdicts)
            topic = topics[change] = f"{run}_{fmt}_{change}".replace("_", "-")
            records = [(first if n % 2 == 0 else second)(value(fmt, change, 1 + n % 2, n))
                       for n in range(4)]
            ids[change] = (int.from_bytes(records[0][1:5], "big"),
                           int.from_bytes(records[1][1:5], "big"))
            await create_topic(broker, topic)
            await produce(broker, topic, records[:1])
            later[topic] = records[1:]
        cfg = write_config(tmp_path / "kstage.yml", broker, group, [
            {"topic": topic, "format": fmt, "processor": "schema_rows",
             "sink": {"type": "spark", "table": f"{run}_{fmt}_{change}"}}
            for change, topic in topics.items()])
        data = yaml.safe_load(cfg.read_text())
        data["schema_registry"] = {"url": registry.url}
        data["spark"] = spark_section(catalog, appends=appends)
        cfg.write_text(yaml.safe_dump(data))
        # v1's first record makes each table; then v2's and v1's interleaved, in a second
        # run (a table made from both at once would show no evolution)
        first_run = kstage(cfg, "--drain")
        assert await first_run.wait(timeout=300) == 0, first_run.output()
        pyiceberg = IcebergReader(data["spark"])
        made = {topic: columns(pyiceberg, f"{run}_{fmt}_{change}")
                for change, topic in topics.items()}
        for topic, rest in later.items():
            await produce(broker, topic, rest)
        proc = kstage(cfg, "--drain")
        assert await proc.wait(timeout=300) == 0, proc.output()
    for out in (first_run.output(), proc.output()):
        assert not re.search(r"restarts=[1-9]", out), out
    dead = read_jsonl(tmp_path / "dead.jsonl") if (tmp_path / "dead.jsonl").exists() else []
    for change, topic in topics.items():
        name, field = CHANGES[change]
        if fmt == "json_schema" and name == "narrowed type":
            field = "price"  # number -> integer
        table = f"{run}_{fmt}_{change}"
        v2_id = ids[change][1]
        rows = sorted(pyiceberg.rows(table), key=lambda r: r["_offset"])
        letters = [d for d in dead if d["topic"] == topic]
        if letters:
            outcome = "dead-lettered"
            assert [d["offset"] for d in letters] == [1, 3], (name, letters)
            assert [r["_offset"] for r in rows] == [0, 2], name
            for letter in letters:  # the field, both schema ids, the reason
                error = letter["error"]
                assert f"writer schema id {v2_id} does not fit the table: field " \
                       f"'{field}'" in error, (name, error)
                # the column was made by v1 in the first run: this run found it made
                assert "(typed by the table as kstage found it at start)" in error, error
                assert "not a widening Iceberg allows" in error, (name, error)
        else:
            landed = [r["_offset"] for r in rows]
            if landed != [0, 1, 2, 3]:  # say whether the offsets went past what is missing
                offsets = await committed(broker, group, topic, 1)
                assert landed == [0, 1, 2, 3], (name, landed, offsets, proc.output())
            outcome = "fits" if columns(pyiceberg, table) == made[topic] else "evolves"
            for row in rows:  # each record's own values; v1 rows NULL in new columns
                n = row["_offset"]
                sent = value(fmt, change, 1 + n % 2, n)
                top = field.split(".")[0]
                if top in row and top != "item":
                    assert row[top] == sent.get(top) or (
                        fmt == "protobuf" and top not in sent), (name, row, sent)
                if field == "item.color":
                    assert row["item"]["color"] == sent["item"].get("color"), (name, row)
        observed[name] = (*observed[name], outcome)
        by_spark = await reader_actor.call(lambda s, t=table: spark_read(s, t))
        assert by_spark == comparable(rows), name

    wanted = {name: expected[(name, fmt)] for name, _ in CHANGES}
    assert observed == wanted
