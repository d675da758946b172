"""``format: protobuf`` and ``format: json_schema`` on the real broker, into a JSONL sink.

Records are written by confluent-kafka's own ``ProtobufSerializer`` and ``JSONSerializer``
against the fake Confluent registry; kstage decodes them with the writer's schema by id.
Poison of each kind is dead-lettered with topic, partition, offset and schema id; a
registry outage, then its 404 window after a restart, is waited out (shown in /readyz),
nothing dead-lettered, nothing lost.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from actors.master import Master
from settings import load_settings
from tests.fake_registry import FakeRegistry
from tests.integration.test_avro_pipeline import registry_yaml
from tests.integration.test_registry_404 import wait_for
from tests.kafkautil import committed, create_topic, produce, read_jsonl, unique, write_config
from tests.unit.test_json_schema_format import PLAIN
from tests.unit.test_json_schema_format import serialize as json_serialize
from tests.unit.test_protobuf_format import CLASSES, TOPIC, order
from tests.unit.test_protobuf_format import serialize as proto_serialize

pytestmark = pytest.mark.kafka


def config(tmp_path: Path, broker: str, group: str, topic: str, fmt: str,
           registry: FakeRegistry, **registry_keys: Any) -> Path:
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [
        {"topic": topic, "processor": "json_rows", "format": fmt,
         "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}])
    cfg.write_text(cfg.read_text() + registry_yaml(registry.url, **registry_keys))
    return cfg


def proto_registry(registry: FakeRegistry, topic: str) -> None:
    """The shop schemas under ``topic``'s subject, serialized as for ``TOPIC``."""
    from tests.proto_files import MONEY, ORDER

    registry.register("common/money.proto", MONEY, "PROTOBUF")
    for subject in (f"{TOPIC}-value", f"{topic}-value"):
        registry.register(subject, ORDER, "PROTOBUF", [
            {"name": "common/money.proto", "subject": "common/money.proto", "version": 1}])


async def test_protobuf_records_land_as_dicts_and_poison_is_dead_lettered(
        broker: str, tmp_path: Path) -> None:
    topic, group = unique("proto"), unique("g-proto")
    with FakeRegistry() as registry:
        proto_registry(registry, topic)
        good = proto_serialize(registry, order())
        refund = proto_serialize(registry, CLASSES["shop.Refund"](order_id="r-1"))
        sid = int.from_bytes(good[1:5], "big")
        values = [good, b"\x01" + good[1:], refund, good[:5] + b"\x02\x0a" + good[6:],
                  good[:6] + b"\x0a\x20abc", good]
        await create_topic(broker, topic)
        await produce(broker, topic, values)
        cfg = config(tmp_path, broker, group, topic, "protobuf", registry)
        await asyncio.wait_for(Master(load_settings(cfg), broker, drain=True).run(), 90)
    rows = read_jsonl(tmp_path / "out.jsonl")
    assert [r["_offset"] for r in rows] == [0, 2, 5]
    assert rows[0]["status"] == "SHIPPED" and rows[0]["big"] == 2**63 + 5
    assert rows[0]["lines"][0] == {"sku": "k-1", "quantity": 3,
                                   "price": {"currency": "EUR", "units": 7}}
    assert rows[0]["labels"] == {"x": 1} and rows[0]["placed_at"] == "2024-05-01T12:00:00Z"
    assert {k: rows[1][k] for k in ("order_id", "amount")} == {"order_id": "r-1",
                                                               "amount": None}
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [(d["topic"], d["partition"], d["offset"]) for d in dead] == [
        (topic, 0, 1), (topic, 0, 3), (topic, 0, 4)]
    assert "wrong magic byte" in dead[0]["error"]
    assert "unknown message index [5]" in dead[1]["error"] and dead[1]["schema_id"] == sid
    assert "undecodable Protobuf body" in dead[2]["error"] and dead[2]["schema_id"] == sid
    assert (await committed(broker, group, topic, 1))[0] == 6


async def test_json_schema_records_are_validated(broker: str, tmp_path: Path) -> None:
    topic, group = unique("jsonschema"), unique("g-jsonschema")
    with FakeRegistry() as registry:
        good = json_serialize(registry, PLAIN, {"n": 3})
        sid = int.from_bytes(good[1:5], "big")
        registry.register(f"{topic}-value", json.dumps(PLAIN), "JSON")
        values = [good, good[:5] + b'{"n": -4}', good[:5] + b"{nope", b"\x02" + good[1:],
                  good[:5] + b'{"n": 9}']
        await create_topic(broker, topic)
        await produce(broker, topic, values)
        cfg = config(tmp_path, broker, group, topic, "json_schema", registry)
        await asyncio.wait_for(Master(load_settings(cfg), broker, drain=True).run(), 90)
    assert [(r["_offset"], r["n"]) for r in read_jsonl(tmp_path / "out.jsonl")] == [
        (0, 3), (4, 9)]
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [d["offset"] for d in dead] == [1, 2, 3]
    assert "not valid for its JSON Schema" in dead[0]["error"] and dead[0]["schema_id"] == sid
    assert "not JSON" in dead[1]["error"] and dead[1]["schema_id"] == sid
    assert "wrong magic byte 0x02" in dead[2]["error"]
    assert (await committed(broker, group, topic, 1))[0] == 5


@pytest.mark.parametrize("fmt", ["protobuf", "json_schema"])
async def test_an_outage_then_a_404_window_is_waited_out(
        broker: str, tmp_path: Path, fmt: str) -> None:
    topic, group = unique(f"wait-{fmt}"), unique("g-wait")
    with FakeRegistry() as registry:
        if fmt == "protobuf":
            proto_registry(registry, topic)
            values = [proto_serialize(registry, order()) for _ in range(5)]
        else:
            values = [json_serialize(registry, PLAIN, {"n": n}) for n in range(5)]
        sid = int.from_bytes(values[0][1:5], "big")
        await create_topic(broker, topic)
        await produce(broker, topic, values)
        registry.fail_next(10_000)  # down
        cfg = config(tmp_path, broker, group, topic, fmt, registry, max_retries=0,
                     not_found_retry_s=120)
        master = Master(load_settings(cfg), broker, drain=True)
        run = asyncio.create_task(master.run())
        try:
            await wait_for(lambda: "unavailable" in str(master.readiness()), "an outage")
            registry.clear_log()
            registry.clear_failures()  # up again, but reloading: 404 for the id
            registry.start_reloading()
            await wait_for(lambda: f"404 for schema id {sid}" in str(master.readiness()),
                           "the 404 window")
            assert not (tmp_path / "dead.jsonl").exists()
            assert (await committed(broker, group, topic, 1))[0] == -1
            registry.finish_reloading()
            await asyncio.wait_for(asyncio.shield(run), 90)
        finally:
            master.stop()
            await asyncio.wait_for(run, 60)
    assert not (tmp_path / "dead.jsonl").exists()
    assert [r["_offset"] for r in read_jsonl(tmp_path / "out.jsonl")] == list(range(5))
    assert (await committed(broker, group, topic, 1))[0] == 5


@pytest.mark.parametrize("fmt", ["protobuf", "json_schema"])
async def test_dlq_replay_decodes_the_format(tmp_path: Path, fmt: str) -> None:
    """``kstage dlq replay`` decodes dead letters with the topic's format as the worker
    does (no broker: replayed into the topic's sink); poison fails again."""
    from actors.deadletters.file import dead_letter_line
    from service.ops.dlq import replay_async

    out, dead = tmp_path / "out.jsonl", tmp_path / "dead.jsonl"
    with FakeRegistry() as registry:
        if fmt == "protobuf":
            proto_registry(registry, "ev")
            good = proto_serialize(registry, CLASSES["shop.Refund"](order_id="r-9"))
            want = {"order_id": "r-9", "amount": None}
            bad = good[:5] + b"\x02\x0a" + good[6:]
        else:
            good = json_serialize(registry, PLAIN, {"n": 9})
            want, bad = {"n": 9}, good[:5] + b'{"n": -9}'
        cfg = tmp_path / "kstage.yml"
        cfg.write_text(json.dumps({
            "kafka": {"bootstrap": "embedded"},
            "schema_registry": {"url": registry.url},
            "groups": [{"group_id": "g", "failure": {"dead_letter_path": str(dead)},
                        "topics": [{"topic": "ev", "processor": "json_rows", "format": fmt,
                                    "sink": {"type": "jsonl", "path": str(out)}}]}]}))
        dead.write_text("".join(
            dead_letter_line(group="g", topic="ev", partition=0, offset=offset, timestamp=0,
                             key=None, value=value, headers=[], processor="json_rows",
                             exc=RuntimeError("sink down"), attempts=1) + "\n"
            for offset, value in ((0, good), (1, bad))))
        result = await replay_async(load_settings(cfg))
    assert [d.record["offset"] for d in result.replayed] == [0]
    assert [(d.record["offset"], why.split(":")[0]) for d, why in result.failed] == [
        (1, "PoisonMessage")]
    assert [{k: v for k, v in r.items() if not k.startswith("_")}
            for r in read_jsonl(out)] == [want]
