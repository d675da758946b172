"""``kstage dlq replay`` of a routed topic's dead letters, into files: a row a table
refused (its dead letter's row tagged with the table) goes back to that table; a message
that was poison for want of a route is routed again, by the configuration as it is now
(a ``default`` added since)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from actors.deadletters.file import dead_letter_line
from actors.errors import PermanentSinkError
from actors.routing import ROUTE_FIELD
from processors.errors import PoisonMessage
from service.ops.dlq import replay_async
from settings.models import Settings
from tests.kafkautil import read_jsonl


async def test_replay_writes_each_dead_letter_to_its_table(tmp_path: Path) -> None:
    refused = {"i": 1, "kind": "b", "_topic": "t", "_partition": 0, "_offset": 1,
               "_timestamp": 5, ROUTE_FIELD: "t_b"}
    lines = [
        dead_letter_line(group="g", topic="t", partition=0, offset=1, timestamp=5, key=None,
                         value=json.dumps(refused).encode(), headers=[],
                         processor="json_rows", attempts=1,
                         exc=PermanentSinkError("jsonl sink could not send the rows: table "
                                                "t_b: refused"),
                         extra={"sink": "jsonl", "sink_type": "jsonl", "status": 0}),
        dead_letter_line(group="g", topic="t", partition=0, offset=2, timestamp=6, key=None,
                         value=json.dumps({"i": 2, "kind": "zzz"}).encode(), headers=[],
                         processor="json_rows", attempts=1,
                         exc=PoisonMessage("t[0]@2: route by value.kind: no table")),
    ]
    (tmp_path / "dead.jsonl").write_text("\n".join(lines) + "\n")
    settings = Settings.model_validate({
        "kafka": {"bootstrap": "embedded"},
        "groups": [{"group_id": "g", "failure": {
            "dead_letter_path": str(tmp_path / "dead.jsonl")}, "topics": [{
                "topic": "t", "processor": "json_rows",
                "route": {"by": "value.kind", "tables": {"a": "t_a", "b": "t_b"},
                          "default": "t_other"},
                "sink": {"type": "jsonl", "path": str(tmp_path / "{table}.jsonl")}}]}]})
    async with asyncio.timeout(60):
        result = await replay_async(settings)
    assert result.failed == [], result.failed
    assert [r["i"] for r in read_jsonl(tmp_path / "t_b.jsonl")] == [1]
    assert [r["i"] for r in read_jsonl(tmp_path / "t_other.jsonl")] == [2]
    assert all(ROUTE_FIELD not in r for r in read_jsonl(tmp_path / "t_b.jsonl"))
    assert not (tmp_path / "t_a.jsonl").exists()
