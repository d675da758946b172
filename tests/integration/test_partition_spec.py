"""A ``schema_rows`` table created on first sight with the sink's ``partition_by`` and
``table_properties``, on the real broker, the tests' registry and a real Iceberg catalog,
through both append paths (``spark.appends: pyiceberg`` and ``spark``):

* the table's partition spec is the configured one, named as Spark's DDL names its fields
  (``ts_day``, ``customer_id_bucket``, ``region_trunc``, ``channel``), its properties hold
  the configured ones besides kstage's, and every row lands in the partition Iceberg's
  transforms give its values (the table's partitions, counted, against the transforms
  applied to the rows produced);
* a partition column the writer schema lacks (the subject had no version when ``kstage
  run`` started, so its start could not check it, and said so): the worker fails at the
  create, naming the transform and the table, nothing is created and nothing committed;
* a table that exists with another spec is not changed: a warning names both specs and the
  rows land in the table as it is partitioned;
* kstage SIGKILLed between the create (at start) and the first append, then run again: the
  same table (not made twice, its spec and properties as created), every row once.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastavro import parse_schema

from actors.codecs.avro import encode
from actors.sinks.spark.catalog import dotted
from tests.fake_registry import FakeRegistry
from tests.integration.test_schema_rows import send
from tests.kafkautil import KstageProcess, committed, create_topic, unique, wait_until, write_config
from tests.lake import IcebergReader, spark_section

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "string"}, {"name": "customer_id", "type": "long"},
    {"name": "region", "type": "string"}, {"name": "channel", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}}]}
PARTITION_BY = ["day(ts)", "bucket(4, customer_id)", "truncate(2, region)", "channel"]
PROPERTIES = {"write.target-file-size-bytes": "1048576", "kstage.owner-team": "orders"}
DAY = dt.datetime(2026, 11, 27, 10, 30, tzinfo=dt.UTC)
ORDERS = [{"id": f"o{i}", "customer_id": 1000 + i * 7, "region": region,
           "channel": "web" if i % 2 else "app", "ts": DAY + dt.timedelta(hours=13 * i)}
          for i, region in enumerate(["eu-west", "eu-north", "us-east", "eu-west", "ap-south"])]


def config(tmp_path: Path, broker: str, group: str, topic: str, table: str, registry: str,
           appends: str, **sink: Any) -> tuple[Path, dict[str, Any]]:
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [
        {"topic": topic, "format": "avro", "processor": "schema_rows",
         "sink": {"type": "spark", "table": table, **sink}}])
    data = yaml.safe_load(cfg.read_text())
    data["schema_registry"] = {"url": registry}
    data["spark"] = spark_section({"uri": f"jdbc:sqlite:{tmp_path / 'lake' / 'catalog.db'}",
                                   "warehouse": str(tmp_path / "lake" / "wh")},
                                  appends=appends)
    cfg.write_text(yaml.safe_dump(data))
    return cfg, data


def expected_partitions(orders: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """The partition of each order by Iceberg's transforms (pyiceberg's implementation of
    the spec: the same murmur3 bucket hash as the JVM's)."""
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import LongType

    bucket = BucketTransform(4).transform(LongType())
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return Counter(((o["ts"] - epoch).days, bucket(o["customer_id"]), o["region"][:2],
                    o["channel"]) for o in orders)


def table_partitions(reader: IcebergReader, table: str) -> Counter[tuple[Any, ...]]:
    """The rows per partition, as the table's metadata (its data files) records them."""
    loaded = reader.catalog.load_table((reader.settings.catalog.namespace, table))
    found: Counter[tuple[Any, ...]] = Counter()
    for row in loaded.inspect.files().to_pylist():
        part = row["partition"]
        day = part["ts_day"]
        day = (day - dt.date(1970, 1, 1)).days if isinstance(day, dt.date) else day
        found[(day, part["customer_id_bucket"], part["region_trunc"], part["channel"])] += \
            row["record_count"]
    return found


def spec(reader: IcebergReader, table: str) -> list[tuple[str, str]]:
    loaded = reader.catalog.load_table((reader.settings.catalog.namespace, table))
    return [(f.name, str(f.transform)) for f in loaded.spec().fields]


@pytest.mark.timeout(400)
async def test_the_table_is_created_with_the_configured_spec_and_properties(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], appends: str) -> None:
    group, topic, table = unique("g-partspec"), unique("orders-ps"), "stg_partspec"
    with FakeRegistry() as registry:
        sid = registry.register(f"{topic}-value", json.dumps(ORDER))
        parsed = parse_schema(ORDER)
        await create_topic(broker, topic)
        await send(broker, topic, [encode(parsed, sid, o) for o in ORDERS])
        cfg, data = config(tmp_path, broker, group, topic, table, registry.url, appends,
                           partition_by=PARTITION_BY, table_properties=PROPERTIES)
        proc = kstage(cfg, "--drain")
        assert await proc.wait(timeout=300) == 0, proc.output()
    reader = IcebergReader(data["spark"])
    assert sorted(r["id"] for r in reader.rows(table)) == [o["id"] for o in ORDERS]
    assert spec(reader, table) == [("ts_day", "day"), ("customer_id_bucket", "bucket[4]"),
                                   ("region_trunc", "truncate[2]"), ("channel", "identity")]
    loaded = reader.catalog.load_table((reader.settings.catalog.namespace, table))
    assert PROPERTIES.items() <= dict(loaded.properties).items()
    assert loaded.properties["commit.retry.num-retries"] == "30"  # kstage's own stay
    assert table_partitions(reader, table) == expected_partitions(ORDERS)
    assert len(expected_partitions(ORDERS)) > 2  # the rows really spread


@pytest.mark.timeout(300)
async def test_a_partition_column_the_schema_lacks_fails_the_create_and_commits_nothing(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    group, topic, table = unique("g-partspec-bad"), unique("orders-psb"), "stg_partspec_bad"
    with FakeRegistry() as registry:
        # not under the topic's subject: validate (run's start) cannot check the spec
        sid = registry.register(f"{topic}-other", json.dumps(ORDER))
        await create_topic(broker, topic)
        await send(broker, topic, [encode(parse_schema(ORDER), sid, ORDERS[0])])
        cfg, data = config(tmp_path, broker, group, topic, table, registry.url, "pyiceberg",
                           partition_by=["day(ts)", "bucket(8, account)"])
        proc = kstage(cfg, "--drain")
        assert await proc.wait(timeout=240) == 1, proc.output()
    out = proc.output()
    assert (f"sink.partition_by: not checked against the writer schema: subject {topic}-value "
            "has no version yet") in out, out
    name = dotted(IcebergReader(data["spark"]).settings, table)
    assert (f"spark sink: table {name}: partition_by cannot be applied: "
            "bucket(8, account): the table has no column 'account'") in out, out
    assert "(nothing was created)" in out
    assert not IcebergReader(data["spark"]).exists(table)
    assert (await committed(broker, group, topic, 1)).get(0, -1) <= 0  # none


@pytest.mark.timeout(400)
async def test_an_existing_table_with_another_spec_is_not_changed(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    group, topic, table = unique("g-partspec-old"), unique("orders-pso"), "stg_partspec_old"
    with FakeRegistry() as registry:
        sid = registry.register(f"{topic}-value", json.dumps(ORDER))
        parsed = parse_schema(ORDER)
        await create_topic(broker, topic)
        await send(broker, topic, [encode(parsed, sid, ORDERS[0])])
        cfg, data = config(tmp_path, broker, group, topic, table, registry.url, "pyiceberg")
        first = kstage(cfg, "--drain")
        assert await first.wait(timeout=240) == 0, first.output()
        reader = IcebergReader(data["spark"])
        assert spec(reader, table) == [("_ingested_at_day", "day")]
        await send(broker, topic, [encode(parsed, sid, o) for o in ORDERS[1:]])
        cfg, data = config(tmp_path, broker, group, topic, table, registry.url, "pyiceberg",
                           partition_by=PARTITION_BY)
        second = kstage(cfg, "--drain")
        assert await second.wait(timeout=240) == 0, second.output()
    out = second.output()
    assert (f"spark sink: table {dotted(reader.settings, table)} exists with partition spec "
            "[_ingested_at_day=day], not the configured [ts_day=day, customer_id_bucket="
            "bucket[4], region_trunc=truncate[2], channel=identity] (partition_by); kstage "
            "does not change an existing table's spec") in out, out
    assert spec(reader, table) == [("_ingested_at_day", "day")]
    await wait_until(lambda: len(reader.rows(table)) == len(ORDERS), 30, "every row once")
    assert sorted(r["id"] for r in reader.rows(table)) == [o["id"] for o in ORDERS]


@pytest.mark.timeout(400)
async def test_killed_between_the_create_and_the_first_append_then_run_again(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    """The table is made at start from the subject's latest schema, with the spec; kstage
    is SIGKILLed before any row: run again, the table is not made twice (the spec and the
    properties as created, no warning) and every row lands once."""
    group, topic, table = unique("g-partspec-kill"), unique("orders-psk"), "stg_partspec_kill"
    with FakeRegistry() as registry:
        sid = registry.register(f"{topic}-value", json.dumps(ORDER))
        await create_topic(broker, topic)
        cfg, data = config(tmp_path, broker, group, topic, table, registry.url, "pyiceberg",
                           partition_by=PARTITION_BY, table_properties=PROPERTIES)
        reader = IcebergReader(data["spark"])
        first = kstage(cfg)
        await wait_until(lambda: reader.exists(table), 120, "the table made at start")
        first.signal(signal.SIGKILL)
        await first.wait(timeout=60)
        created = reader.catalog.load_table((reader.settings.catalog.namespace, table))
        assert created.current_snapshot() is None  # no append yet
        await send(broker, topic, [encode(parse_schema(ORDER), sid, o) for o in ORDERS])
        second = kstage(cfg, "--drain")
        assert await second.wait(timeout=300) == 0, second.output()
    assert "exists with partition spec" not in second.output()
    loaded = reader.catalog.load_table((reader.settings.catalog.namespace, table))
    assert loaded.metadata.table_uuid == created.metadata.table_uuid  # the same table
    assert len(loaded.metadata.partition_specs) == 1
    assert PROPERTIES.items() <= dict(loaded.properties).items()
    assert sorted(r["id"] for r in reader.rows(table)) == [o["id"] for o in ORDERS]
    assert table_partitions(reader, table) == expected_partitions(ORDERS)
