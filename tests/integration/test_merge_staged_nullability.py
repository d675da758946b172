"""The nullability of a final table merged from a ``schema_rows`` staging table (its
columns the staging table's, read at each merge: ``MergeJob._staged``), on a real
SparkSession and Iceberg catalog.

The staging table is written as the worker writes it: the real SparkSink follows the
processor's live columns, which are ``schema_rows``'s columns of each writer schema
(:func:`processors.avro_columns.avro_columns`, top-level columns nullable, a record's
fields as the schema says). V1 has a required top-level ``qty`` and a record ``address``
whose ``street`` is required; options.key is ``id``. Then a producer makes both optional
(V2), the staging table loosens ``address.street`` (``DROP NOT NULL``), and rows with
NULLs in them are staged: the next merge must still land them, and the final table must
say what its rows may hold.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition
from fastavro import parse_schema

from actors.offsets import Entry
from actors.preflight import resolve_processors
from actors.sinks import SinkContext
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.catalog import dotted
from actors.sinks.spark.sink import SparkSink, SparkSinkSettings
from actors.tables.merge import final_name, merge_table, plan
from processors.avro_columns import avro_columns
from processors.base import Column, LiveColumns, Row
from processors.column_types import type_string
from settings.models import Settings
from tests.integration.merge_support import module_actor

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TOPIC = "orders"


def schema(optional: bool) -> dict[str, Any]:
    def kind(name: str) -> Any:
        return ["null", name] if optional else name

    return {"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "string"},
        {"name": "qty", "type": kind("int")},
        {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
            {"name": "street", "type": kind("string")}]}}]}


def live_columns(optional: bool) -> tuple[Column, ...]:
    """``schema_rows``'s columns of the writer schema (as it sets its live columns)."""
    fields, _ = avro_columns(parse_schema(schema(optional)))
    return tuple(Column(f.name, type_string(f.type), True) for f in fields)


@pytest.fixture(scope="module")
def actor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkActor]:
    yield from module_actor(tmp_path_factory)


def settings(actor: SparkActor, table: str) -> Settings:
    return Settings(groups=[{"topics": [{
        "topic": TOPIC, "processor": "schema_rows", "format": "avro",
        "options": {"key": ["id"]}, "sink": {"type": "spark", "table": table}}]}],
        schema_registry={"url": "http://127.0.0.1:1"}, spark=actor.settings)


def row(offset: int, id_: str, qty: int | None, street: str | None) -> Row:
    return {"id": id_, "qty": qty, "address": {"street": street}, "_topic": TOPIC,
            "_partition": 0, "_offset": offset, "_timestamp": 1000 + offset}


def nullability(actor: SparkActor, table: str) -> Any:
    """Each column's (and ``address.street``'s) nullability in ``table``."""
    def read(spark: Any) -> dict[str, bool]:
        spark.sql(f"REFRESH TABLE {dotted(actor.settings, table)}")
        fields = {f.name: f for f in spark.table(dotted(actor.settings, table)).schema}
        found = {name: fields[name].nullable for name in ("id", "qty", "address")}
        found["address.street"] = fields["address"].dataType["street"].nullable
        return found
    return actor.call(read)


async def final_rows(actor: SparkActor, table: str) -> list[tuple[Any, ...]]:
    final = dotted(actor.settings, final_name(table))
    found = await actor.call(lambda spark: spark.table(final).select(
        "id", "qty", "address.street", "_offset").collect())
    return sorted(tuple(r) for r in found)


async def test_a_field_made_optional_merges_and_the_final_table_allows_its_nulls(
        actor: SparkActor, tmp_path: Path) -> None:
    table = "stg_nullable_orders"
    config = settings(actor, table)
    [item] = plan(config, resolve_processors(config))
    assert item.staged and item.key == ("id",)
    live = LiveColumns()
    sink = SparkSink(SparkSinkSettings(table=table), actor)
    sink.bind(SinkContext(columns=(), table=table, processor="schema_rows", key=("id",),
                          columns_from_schema=True, live=live))
    live.set(live_columns(optional=False))
    await sink.open()
    try:
        tp = TopicPartition(TOPIC, 0)
        await sink.write_at([row(0, "a", 1, "Main St"), row(1, "b", 2, "High St")],
                            Entry(tp, 2, 2))
        first = await merge_table(actor, item)
        assert first.final_rows == 2
        staging_v1 = await nullability(actor, table)
        assert staging_v1 == {"id": True, "qty": True, "address": True,
                              "address.street": False}
        final_v1 = await nullability(actor, final_name(table))
        # a producer makes qty and street optional: the staging table loosens street
        live.set(live_columns(optional=True))
        await sink.write_at([row(2, "a", None, None), row(3, "c", None, "Low St")],
                            Entry(tp, 4, 2))
        assert (await nullability(actor, table))["address.street"] is True
        second = await merge_table(actor, item)
    finally:
        await sink.close()
    assert second.final_rows == 3 and second.new_rows == 2
    assert await final_rows(actor, table) == [
        ("a", None, None, 2), ("b", 2, "High St", 1), ("c", None, "Low St", 3)]
    # Top-level columns are nullable in both tables (schema_rows makes every one so, and
    # MergeJob._staged keeps them so); the final table takes the NULLs staging now holds.
    assert all(final_v1[c] for c in ("id", "qty", "address")), final_v1
    final_v2 = await nullability(actor, final_name(table))
    assert final_v2["address.street"] is True, "the final table refuses what staging holds"
