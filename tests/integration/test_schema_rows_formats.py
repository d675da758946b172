"""``schema_rows`` end to end for ``format: protobuf`` and ``format: json_schema``: a
topic of each, written by confluent-kafka's own serializers against the tests'
registry, lands by configuration alone in its own Iceberg table (the real broker, a real
catalog, both append paths), read back with pyiceberg: every value exact, a nested
message, a repeated field, a map, a oneof and a Timestamp among them."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fake_registry import FakeRegistry
from tests.integration.test_schema_rows import config, lake, send
from tests.kafkautil import KstageProcess, create_topic, unique, wait_until
from tests.lake import IcebergReader
from tests.unit import test_json_schema_columns as js
from tests.unit import test_protobuf_columns as pb
from tests.unit.test_json_schema_format import serialize as json_serialize
from tests.unit.test_protobuf_format import serialize as proto_serialize

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def maps(row: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """``row`` with the map columns ``names`` as dicts (Arrow reads pairs)."""
    return {k: dict(v) if k in names and v is not None else v for k, v in row.items()}


async def land(broker: str, tmp_path: Path, kstage: type[KstageProcess], fmt: str,
               registry: FakeRegistry, topic: str, raws: list[bytes],
               appends: str = "pyiceberg") -> list[dict[str, Any]]:
    """The rows of ``raws`` once kstage has landed them in a table of their own."""
    table = f"stg_{fmt}_rows"
    await create_topic(broker, topic)
    await send(broker, topic, raws)
    cfg, data = config(tmp_path, broker, unique(f"g-{fmt}"), topic, table, registry.url,
                       lake(tmp_path), fmt=fmt)
    if appends != "pyiceberg":
        data["spark"]["appends"] = appends
        cfg.write_text(yaml.safe_dump(data))
    proc = kstage(cfg)
    reader = IcebergReader(data["spark"])
    def landed() -> bool:
        assert proc.proc.poll() is None, proc.output()  # a refused configuration: at once
        return len(reader.rows(table)) == len(raws)

    await wait_until(landed, 240, "every row")
    proc.signal(signal.SIGTERM)
    assert await proc.wait(timeout=60) == 0, proc.output()
    rows = sorted(reader.rows(table), key=lambda r: r["_offset"])
    return [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]


@pytest.mark.timeout(400)
async def test_a_protobuf_topic_lands_by_configuration(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], appends: str) -> None:
    topic = unique("proto-rows")
    cls = pb.CLASSES["typemap.All"]
    with FakeRegistry() as registry:
        registry.register(f"{pb.TOPIC}-value", pb.TYPEMAP, "PROTOBUF")
        raws = [proto_serialize(registry, m) for m in (pb.full(), cls(), cls(as_text="t"))]
        rows = await land(broker, tmp_path, kstage, "protobuf", registry, topic, raws,
                          appends)
    names = ("by_name", "by_number", "by_flag")
    assert [maps(r, names) for r in rows] == [
        pb.FULL_ROW, pb.EMPTY_ROW, {**pb.EMPTY_ROW, "as_text": "t"}]


@pytest.mark.timeout(400)
async def test_a_json_schema_topic_lands_by_configuration(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], appends: str) -> None:
    topic = unique("json-rows")
    with FakeRegistry() as registry:
        raws = [json_serialize(registry, js.SCHEMA, v) for v in (js.VALUE, {"id": "b"})]
        rows = await land(broker, tmp_path, kstage, "json_schema", registry, topic, raws,
                          appends)
    assert [maps(r, ("scores",)) for r in rows] == [
        js.ROW, {name: ("b" if name == "id" else None) for name, _ in js.COLUMNS}]
