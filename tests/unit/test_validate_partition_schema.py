"""``kstage validate`` checks a ``schema_rows`` topic's ``sink.partition_by`` against the
latest writer schema of its subject, fetched from the registry (the tests' registry: a
real HTTP server on loopback): a column the schema lacks and a transform the field's type
does not take are refused, each in one line naming the file, the key and its line; a
spec that fits passes (Avro and JSON Schema). A registry that is down leaves the spec
unchecked: exit 0 with a warning naming the key (the table's create checks it), within
the check's budget."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from actors.sinks.spark import layout_check
from service.cli import main
from tests.fake_registry import FakeRegistry
from tests.spark_cluster import free_port

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "string"}, {"name": "customer_id", "type": "long"},
    {"name": "region", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
ORDER_JSON = {"type": "object", "properties": {
    "id": {"type": "string"}, "ts": {"type": "string", "format": "date-time"}}}


def config(tmp_path: Path, url: str, partition_by: list[str], fmt: str = "avro") -> Path:
    """One schema_rows topic ``orders`` (line 6) whose sink's partition_by items start on
    line 12."""
    path = tmp_path / "kstage.yml"
    path.write_text(
        f"name: ps\nschema_registry: {{url: \"{url}\"}}\ngroups:\n  - topics:\n"
        f"      - topic: orders\n        format: {fmt}\n        processor: schema_rows\n"
        "        sink:\n          type: spark\n          table: orders\n          partition_by:\n"
        + "".join(f"            - {yaml.safe_dump(item).splitlines()[0]}\n"
                  for item in partition_by), encoding="utf-8")
    return path


def validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(["validate", "-c", str(path)])
    out, err = capsys.readouterr()
    return code, (out + err).splitlines()


@pytest.mark.parametrize(("partition_by", "index", "why"), [
    (["day(ts)", "bucket(16, account)"], 1,
     "bucket(16, account): the table has no column 'account'"),
    (["day(region)"], 0,
     "day(region) does not fit column 'region' of type string: day takes date, timestamp"),
])
def test_validate_refuses_a_spec_the_latest_writer_schema_does_not_take(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], partition_by: list[str],
        index: int, why: str) -> None:
    with FakeRegistry() as registry:
        sid = registry.register("orders-value", json.dumps(ORDER))
        path = config(tmp_path, registry.url, partition_by)
        code, lines = validate(path, capsys)
    assert code == 2, lines
    prefix = (f"kstage: {path}: groups[0].topics[0].sink.partition_by[{index}] "
              f"(line {12 + index}): spark sink: {why}")
    assert len(lines) == 1 and lines[0].startswith(prefix), lines
    assert lines[0].endswith(f"(the latest writer schema of subject orders-value, id {sid})")


@pytest.mark.parametrize(("fmt", "schema", "partition_by"), [
    ("avro", ORDER, ["day(ts)", "bucket(16, customer_id)", "truncate(2, region)"]),
    ("json_schema", ORDER_JSON, ["hour(ts)", "id"]),
])
def test_validate_accepts_a_spec_the_latest_writer_schema_takes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, schema: object,
        partition_by: list[str]) -> None:
    with FakeRegistry() as registry:
        registry.register("orders-value", json.dumps(schema),
                          "AVRO" if fmt == "avro" else "JSON")
        code, lines = validate(config(tmp_path, registry.url, partition_by, fmt), capsys)
        assert [r.path for r in registry.requests if "orders-value" in r.path], registry.requests
    assert code == 0, lines


@pytest.mark.parametrize("budget_s", [layout_check.BUDGET_S, 0.3],
                         ids=["retries-end-or-budget", "budget-ends-first"])
def test_a_registry_that_is_down_leaves_the_spec_unchecked_with_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        budget_s: float) -> None:
    """Whether the client's retries end first or the check's budget does (which one
    depends on the retries' jitter and the machine's load), the warning names why the
    registry did not answer: the refused connection, not only the timeout."""
    monkeypatch.setattr(layout_check, "BUDGET_S", budget_s)
    path = config(tmp_path, f"http://127.0.0.1:{free_port()}", ["bucket(16, account)"])
    started = time.monotonic()
    code, lines = validate(path, capsys)
    assert code == 0, lines
    assert time.monotonic() - started < layout_check.BUDGET_S + 10  # bounded, not hung
    warned = [line for line in lines if line.startswith("kstage: warning: ")]
    assert len(warned) == 1 and warned[0].startswith(
        f"kstage: warning: {path}: groups[0].topics[0].sink.partition_by: not checked "
        "against the writer schema: "), lines
    assert "ConnectError" in warned[0] and warned[0].endswith(
        "; the table's create checks it"), lines
    assert f"{path}: OK (1 group(s), 1 topic(s))" in lines, lines
