"""Gobblin events (real schema, wire format) through `kstage run --drain` into a Parquet
staging table written by Spark, read back with Spark."""

from __future__ import annotations

import json

import pytest
import yaml
from fastavro import parse_schema

from actors.spark_sink import spark_actor, stop_spark_actors
from processors.avro import encode
from processors.base import SCHEMA_DIR
from service.samples import SAMPLE_TOPICS, sample_records
from settings import SparkSettings
from tests.fake_registry import FakeRegistry
from tests.kafkautil import committed, create_topic, produce, unique, write_config

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


async def test_gobblin_events_land_in_their_staging_table(broker, tmp_path, kstage) -> None:
    sample = next(t for t in SAMPLE_TOPICS if t.processor == "gobblin_compaction")
    topic, group = unique("spark-gobblin"), unique("g-spark")
    warehouse = tmp_path / "warehouse"
    text = (SCHEMA_DIR / sample.schema_file).read_text()
    records = sample_records(sample, 30)
    with FakeRegistry() as registry:
        sid = registry.register(f"{topic}-value", text)
        await create_topic(broker, topic, partitions=2)
        await produce(broker, topic, [encode(parse_schema(json.loads(text)), sid, r)
                                      for r in records], partition_of=lambda i: i % 2)
        cfg = write_config(tmp_path / "kstage.yml", broker, group,
                           [{"topic": topic, "processor": "gobblin_compaction",
                             "format": "avro", "sink": {"type": "spark"}}])
        data = yaml.safe_load(cfg.read_text())
        data["schema_registry"] = {"url": registry.url}
        data["spark"] = {"master": "local[1]", "warehouse": str(warehouse),
                         "flush_max_interval_s": 0.5}
        cfg.write_text(yaml.safe_dump(data))
        proc = kstage(cfg, "--drain")
        assert await proc.wait(timeout=150) == 0, proc.output()
    assert sum((await committed(broker, group, topic, 2)).values()) == 30

    actor = spark_actor(SparkSettings(master="local[1]", warehouse=str(tmp_path / "reader")))
    try:
        path = str(warehouse / sample.table)
        rows = await actor.call(lambda spark: [r.asDict() for r in
                                               spark.read.parquet(path).collect()])
        types = await actor.call(lambda spark: dict(spark.read.parquet(path).dtypes))
    finally:
        await stop_spark_actors()
    assert len(rows) == 30
    assert sorted((r["_partition"], r["_offset"]) for r in rows) == sorted(
        (i % 2, i // 2) for i in range(30))
    assert {r["_topic"] for r in rows} == {topic} and len({r["writer_id"] for r in rows}) == 1
    assert types["record_count"] == "bigint" and types["_offset"] == "bigint"
    assert types["cluster"] == "string" and types["ingest_date"] == "date"
