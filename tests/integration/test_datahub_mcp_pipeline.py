"""DataHub MetadataChangeProposals end to end: produced on the real broker as
``DatahubKafkaEmitter`` sends them (Confluent wire format Avro of the real schema, a
registered ``-value`` subject, the entity urn as UTF-8 key), landed by ``kstage run
--drain`` with the ``datahub_mcp`` processor into a jsonl sink, the undecodable one
dead-lettered with its reason, every offset committed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from aiokafka import AIOKafkaProducer
from fastavro import parse_schema

from actors.codecs.avro import encode
from processors.base import SCHEMA_DIR
from tests.fake_registry import FakeRegistry
from tests.kafkautil import (
    KstageProcess,
    committed,
    create_topic,
    read_jsonl,
    unique,
    write_config,
)
from tests.unit.test_processors_datahub import OWNERSHIP, URN, aspect
from tests.unit.test_processors_datahub_mcp import TAG_PATCH, mcp, patch

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

OTHER = "urn:li:dataset:(urn:li:dataPlatform:kafka,PageViewEvent,PROD)"


async def test_proposals_land_in_stg_datahub_mcp_and_poison_is_dead_lettered(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    topic, group = unique("MetadataChangeProposal_v1"), unique("g-mcp")
    records = [
        mcp(),
        mcp(entityUrn=OTHER, changeType="PATCH", aspectName="globalTags",
            aspect=patch(TAG_PATCH)),
        mcp(aspect={"value": b"\x02\x04", "contentType": "application/avro"}),  # poison
        mcp(entityUrn=OTHER, changeType="DELETE", aspectName="status", aspect=None),
        mcp(aspect=aspect({**OWNERSHIP, "owners": []}), headers={"If-Version-Match": "4"}),
    ]
    text = (SCHEMA_DIR / "datahub/MetadataChangeProposal.avsc").read_text()
    with FakeRegistry() as registry:
        sid = registry.register(f"{topic}-value", text)
        schema = parse_schema(json.loads(text))
        await create_topic(broker, topic)
        producer = AIOKafkaProducer(bootstrap_servers=broker)
        await producer.start()
        try:
            for record in records:  # keyed by the entity urn, like the SDK's emitter
                await producer.send_and_wait(topic, encode(schema, sid, record),
                                             key=record["entityUrn"].encode("utf-8"))
        finally:
            await producer.stop()
        out = tmp_path / "stg_datahub_mcp.jsonl"
        cfg = write_config(tmp_path / "kstage.yml", broker, group, [
            {"topic": topic, "processor": "datahub_mcp", "format": "avro",
             "sink": {"type": "jsonl", "path": str(out)}}])
        data = yaml.safe_load(cfg.read_text())
        data["schema_registry"] = {"url": registry.url}
        cfg.write_text(yaml.safe_dump(data))
        proc = kstage(cfg, "--drain")
        assert await proc.wait(timeout=90) == 0, proc.output()
    rows = read_jsonl(out)
    assert [(r["_offset"], r["entity_urn"], r["aspect_name"], r["change_type"])
            for r in rows] == [(0, URN, "ownership", "UPSERT"), (1, OTHER, "globalTags", "PATCH"),
                               (3, OTHER, "status", "DELETE"), (4, URN, "ownership", "UPSERT")]
    assert json.loads(rows[0]["aspect"]) == OWNERSHIP
    assert json.loads(rows[1]["aspect"]) == TAG_PATCH
    assert rows[2]["aspect"] is None
    assert json.loads(rows[3]["headers"]) == {"If-Version-Match": "4"}
    assert all(r["_topic"] == topic and r["run_id"] == "hive-2024_05_29" for r in rows)
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [(d["offset"], d["processor"]) for d in dead] == [(2, "datahub_mcp")]
    assert dead[0]["error_type"].endswith("PoisonMessage")
    assert "field aspect.contentType='application/avro' cannot be decoded" in dead[0]["error"]
    assert await committed(broker, group, topic, 1) == {0: 5}
