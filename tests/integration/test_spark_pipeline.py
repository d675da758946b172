"""WhereHows Gobblin and metastore events and DataHub MCL events (real schemas, Confluent
wire format) through `kstage run --drain` into their Iceberg staging tables written by
Spark, read back with Spark through the same catalog: every event, the declared types,
the Kafka coordinates, one commit per append with the offsets it covers."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from fastavro import parse_schema

from actors.codecs.avro import encode
from actors.sinks.spark.actor import SparkActor
from actors.tables.merge import final_name
from processors.base import SCHEMA_DIR
from service.dev.samples import SAMPLE_TOPICS, sample_records
from settings import SparkSettings
from tests import iceberg_tables
from tests.fake_registry import FakeRegistry
from tests.kafkautil import committed, create_topic, produce, unique, write_config
from tests.lake import IcebergReader, as_set, normalized, spark_rows

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

# processor -> (events, expected Spark types of some columns)
CASES: dict[str, tuple[int, dict[str, str]]] = {
    "gobblin_compaction": (30, {"record_count": "bigint", "cluster": "string",
                                "log_event_time": "bigint"}),
    "metastore_audit": (20, {"log_event_time": "bigint", "create_time": "bigint",
                             "db_name": "string", "new_info": "string"}),
    "datahub_mcl": (25, {"entity_urn": "string", "aspect": "string",
                         "created_time": "bigint"}),
    "datahub_mcp": (15, {"entity_urn": "string", "change_type": "string",
                         "last_observed": "bigint"}),
}
COORDINATES = {"_topic": "string", "_kafka_partition": "int", "_offset": "bigint",
               "_timestamp": "bigint", "_ingested_at": "timestamp"}


@pytest.mark.timeout(400)  # kstage starts a JVM; its waits inside add up past 180 s
async def test_real_schema_events_land_in_their_staging_tables(broker, tmp_path,
                                                               kstage) -> None:
    samples = {p: next(t for t in SAMPLE_TOPICS if t.processor == p) for p in CASES}
    group = unique("g-spark")
    topics = {p: unique(f"spark-{p}") for p in CASES}
    warehouse = tmp_path / "warehouse"
    with FakeRegistry() as registry:
        for processor, sample in samples.items():
            topic, count = topics[processor], CASES[processor][0]
            text = (SCHEMA_DIR / sample.schema_file).read_text()
            sid = registry.register(f"{topic}-value", text)
            await create_topic(broker, topic, partitions=2)
            await produce(broker, topic, [encode(parse_schema(json.loads(text)), sid, r)
                                          for r in sample_records(sample, count)],
                          partition_of=lambda i: i % 2)
        cfg = write_config(tmp_path / "kstage.yml", broker, group,
                           [{"topic": topics[p], "processor": p, "format": "avro",
                             "sink": {"type": "spark"}} for p in CASES])
        data = yaml.safe_load(cfg.read_text())
        data["schema_registry"] = {"url": registry.url}
        data["spark"] = {"master": "local[1]", "warehouse": str(warehouse),
                         "flush_max_interval_s": 0.5}
        data["merge"] = {"interval_s": 3600}  # once, after the drain
        cfg.write_text(yaml.safe_dump(data))
        proc = kstage(cfg, "--drain")
        assert await proc.wait(timeout=240) == 0, proc.output()
    for processor, (count, _) in CASES.items():
        assert sum((await committed(broker, group, topics[processor], 2)).values()) == count

    actor = SparkActor(SparkSettings(master="local[1]", warehouse=str(warehouse)))

    def read(name: str) -> Any:
        def run(spark: Any) -> tuple[list[dict[str, Any]], dict[str, str]]:
            frame = spark.table(name)  # the catalog's default namespace: kstage
            return [r.asDict() for r in frame.collect()], dict(frame.dtypes)
        return run

    try:
        tables = {p: await actor.call(read(samples[p].table)) for p in CASES}
        finals = {p: await actor.call(lambda s, p=p: spark_rows(s, final_name(samples[p].table)))
                  for p in CASES}
    finally:
        await actor.astop()
    # Another engine, through the same catalog: pyiceberg reads the rows Spark reads, in
    # the staging and in the final tables.
    reader = IcebergReader({"warehouse": str(warehouse)})
    for processor in CASES:
        table = samples[processor].table
        assert as_set(reader.rows(table)) == as_set(
            [normalized(r) for r in tables[processor][0]]), table
        assert as_set(reader.rows(final_name(table))) == as_set(finals[processor])
        assert finals[processor], final_name(table)
    for processor, (count, types) in CASES.items():
        rows, dtypes = tables[processor]
        assert len(rows) == count, processor
        assert sorted((r["_kafka_partition"], r["_offset"]) for r in rows) == sorted(
            (i % 2, i // 2) for i in range(count)), processor
        assert {r["_topic"] for r in rows} == {topics[processor]}
        assert all(r["_timestamp"] > 0 for r in rows)
        recorded = iceberg_tables.offsets(warehouse, samples[processor].table, group,
                                          topics[processor])
        assert recorded == {0: (count + 1) // 2, 1: count // 2}, processor
        assert {k: dtypes[k] for k in (*types, *COORDINATES)} == {**types, **COORDINATES}
    mcl = tables["datahub_mcl"][0]
    assert all(r["entity_urn"].startswith("urn:li:") and r["aspect_name"] for r in mcl)
    mcp = tables["datahub_mcp"][0]
    assert {r["change_type"] for r in mcp} == {"UPSERT", "PATCH"}
    assert all(json.loads(r["aspect"]) and r["last_observed"] > 0 for r in mcp)
    audit = tables["metastore_audit"][0]
    assert all(isinstance(r["log_event_time"], int) and r["db_name"] for r in audit)


async def test_drain_flushes_the_last_rows_without_waiting_for_the_interval(
        broker, tmp_path, kstage) -> None:
    """--drain with rows pending below every flush threshold (flush_min_rows 10000,
    flush_max_interval_s 600, flush_idle_s 600): once a poll comes back empty the worker
    flushes them, so the run ends long before the interval, with every event written and
    committed. The flush's task carries ~2 MB of Arrow data: Spark's per-flush "task of
    very large size" warning is filtered out of the log."""
    sample = next(t for t in SAMPLE_TOPICS if t.processor == "gobblin_compaction")
    group, topic, count = unique("g-spark-tail"), unique("spark-tail"), 6000
    warehouse = tmp_path / "warehouse"
    with FakeRegistry() as registry:
        text = (SCHEMA_DIR / sample.schema_file).read_text()
        sid = registry.register(f"{topic}-value", text)
        await create_topic(broker, topic)
        await produce(broker, topic, [encode(parse_schema(json.loads(text)), sid, r)
                                      for r in sample_records(sample, count)])
        cfg = write_config(tmp_path / "kstage.yml", broker, group,
                           [{"topic": topic, "processor": "gobblin_compaction",
                             "format": "avro", "sink": {"type": "spark"}}])
        data = yaml.safe_load(cfg.read_text())
        data["schema_registry"] = {"url": registry.url}
        data["spark"] = {"master": "local[1]", "warehouse": str(warehouse),
                         "flush_min_rows": 10000, "flush_max_rows": 10000,
                         "flush_max_interval_s": 600, "flush_idle_s": 600}  # idle flush off
        cfg.write_text(yaml.safe_dump(data))
        proc = kstage(cfg, "--drain")
        assert await proc.wait(timeout=150) == 0, proc.output()
    assert (await committed(broker, group, topic, 1))[0] == count
    files = list((warehouse / "kstage" / sample.table / "data").rglob("*.parquet"))
    assert len(files) == 1, files  # one flush
    assert len(iceberg_tables.summaries(warehouse, sample.table)) == 1  # one commit
    assert "spark: session started" in proc.output()
    assert "very large size" not in proc.output()
    assert "INFO TaskSetManager" not in proc.output()  # its level stays WARN
