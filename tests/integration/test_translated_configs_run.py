"""The seeds' WhereHows job and DataHub Actions pipeline, translated, run end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fastavro import parse_schema

from actors.codecs.avro import encode
from processors.base import SCHEMA_DIR
from service.cli import main
from service.dev.samples import SAMPLE_TOPICS, sample_records
from tests.fake_registry import FakeRegistry
from tests.kafkautil import ROOT, create_topic, produce, read_jsonl

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SEEDS = {
    "from-wherehows": ROOT / "examples/configs/wherehows-kafka.job",
    "from-datahub": ROOT / "examples/configs/datahub-actions.yml",
}
SAMPLE_OF = {t.processor: t for t in SAMPLE_TOPICS if t.topic != "MetastorePartitionAudit"}


@pytest.mark.parametrize("command", list(SEEDS))
async def test_translated_seed_runs(command, broker, tmp_path: Path, kstage) -> None:
    cfg = tmp_path / "kstage.yml"
    assert main(["config", command, str(SEEDS[command]), "-o", str(cfg)]) == 0
    topics = yaml.safe_load(cfg.read_text())["groups"][0]["topics"]
    with FakeRegistry() as registry:
        for t in topics:
            sample = SAMPLE_OF[t["processor"]]
            text = (SCHEMA_DIR / sample.schema_file).read_text()
            sid = registry.register(f"{t['topic']}-value", text)
            schema = parse_schema(json.loads(text))
            await create_topic(broker, t["topic"])
            await produce(broker, t["topic"],
                          [encode(schema, sid, r) for r in sample_records(sample, 20)])
        proc = kstage(cfg, "--drain", env={
            "KAFKA_BOOTSTRAP": broker, "SCHEMA_REGISTRY_URL": registry.url,
            "ACTIONS_FAILED_EVENTS_DIR": str(tmp_path / "failed"),
            "KSTAGE_SERVICE__HTTP_PORT": "0"})
        assert await proc.wait(timeout=90) == 0, proc.output()
    for t in topics:
        rows = read_jsonl(tmp_path / t["sink"]["path"])
        assert len(rows) == 20 and {r["_topic"] for r in rows} == {t["topic"]}, t
