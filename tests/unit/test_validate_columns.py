"""``kstage validate`` (and ``run``, at start) on a topic's ``columns:`` (the record's key,
headers and timestamp type as columns): each refusal names the file, the key and its line,
exit 2; a good declaration validates and gives the table sinks the typed columns."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from actors.record_columns import extra_columns, sink_columns
from processors.base import Column
from processors.registry import load
from service.cli import main
from settings.models import TopicSettings
from tests.kafkautil import CHILD_PATH
from tests.unit.test_validate import HEAD, ROOT, only, validate

PAYMENTS = """\
        processor: test_payments
        sink: {type: jsonl, path: out.jsonl}
        columns:
"""


@pytest.mark.parametrize(("columns", "key", "line", "why"), [
    ("          - {name: _offset, from: key}\n", "groups[0].topics[0].columns[0].name", 10,
     "column '_offset' is one of the coordinate columns every row has (_topic, _partition, "
     "_offset, _timestamp, _ingested_at); choose another name"),
    ("          - {name: k, from: key}\n          - {name: _ingested_at, from: timestamp_type}"
     "\n", "groups[0].topics[0].columns[1].name", 11,
     "column '_ingested_at' is one of the coordinate columns"),
    ("          - {name: amount, from: header, header: traceparent}\n",
     "groups[0].topics[0].columns[0].name", 10,
     "column 'amount' is a column of processor 'test_payments'; choose another name"),
    ("          - {name: k, from: key}\n          - {name: k, from: timestamp_type}\n",
     "groups[0].topics[0].columns[1].name", 11,
     "column 'k' is declared twice (also by columns[0]); give each a name of its own"),
    ("          - {name: message key, from: key}\n", "groups[0].topics[0].columns[0].name",
     10, "'message key' is not a SQL identifier"),
    ("          - {name: h, from: header}\n", "groups[0].topics[0].columns[0].header", 10,
     "from: header needs the header's name: header: NAME"),
    ("          - {name: k, from: key, type: binary}\n",
     "groups[0].topics[0].columns[0].type", 10,
     "type is for from: header only (a key column's type is fixed)"),
    ("          - {name: s, from: header, header: sig, type: text}\n",
     "groups[0].topics[0].columns[0].type", 10, "Input should be 'string' or 'binary'"),
    ("          - {name: p, from: partition}\n", "groups[0].topics[0].columns[0].from", 10,
     "Input should be 'key', 'header' or 'timestamp_type'"),
])
def test_a_bad_columns_declaration_is_refused_with_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], columns: str, key: str, line: int,
        why: str) -> None:
    path, lines = validate(tmp_path, capsys, HEAD + PAYMENTS + columns)
    problems = [x for x in lines if f": {key} (line {line}): " in x]
    assert problems, lines
    assert why in only(problems, path, key, line)


def test_good_columns_validate_and_type_the_table_columns(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "kstage.yml"
    declared = [{"name": "message_key", "from": "key"},
                {"name": "trace", "from": "header", "header": "traceparent"},
                {"name": "sig", "from": "header", "header": "signature", "type": "binary"},
                {"name": "ts_type", "from": "timestamp_type"}]
    path.write_text(HEAD + PAYMENTS + "".join(f"          - {json.dumps(c)}\n"
                                              for c in declared), encoding="utf-8")
    assert main(["validate", "-c", str(path)]) == 0, capsys.readouterr()
    topic = TopicSettings.model_validate({"topic": "t", "processor": "test_payments",
                                          "columns": declared})
    assert topic.key_format == "string"  # the default once columns.key is declared
    assert [(c.name, c.type, c.nullable) for c in extra_columns(topic)] == [
        ("message_key", "string", True), ("trace", "string", True),
        ("sig", "binary", True), ("ts_type", "string", True)]
    payments = load("test_payments")
    assert sink_columns(topic, payments)[:3] == payments.columns
    # bytes keys are binary; a processor without columns gives the table sinks none
    raw = TopicSettings.model_validate({"topic": "t", "processor": "json_rows",
                                        "key_format": "bytes",
                                        "columns": [{"name": "k", "from": "key"}]})
    assert extra_columns(raw) == (Column("k", "binary", doc="record key (bytes)"),)
    assert sink_columns(raw, load("json_rows")) == ()


def test_run_exits_2_on_a_column_that_collides(tmp_path: Path) -> None:
    path = tmp_path / "kstage.yml"
    path.write_text("name: run-bad-columns\nkafka: {bootstrap: \"127.0.0.1:9\"}\n"
                    "service: {http_port: 0}\n" + HEAD.split("\n", 3)[3] + PAYMENTS
                    + "          - {name: _topic, from: key}\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "service", "run", "-c", str(path)], cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": CHILD_PATH},
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"kstage: {path}: groups[0].topics[0].columns[0].name (line 10): column '_topic' is one "
        "of the coordinate columns every row has (_topic, _partition, _offset, _timestamp, "
        "_ingested_at); choose another name"]


def test_a_record_column_a_sink_reserves_is_named_where_it_is_declared(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Iceberg reserves ``_file`` (a metadata column): a spark sink refuses it, at the
    topic's columns entry, not at the processor."""
    path, lines = validate(tmp_path, capsys, HEAD + """\
        processor: test_payments
        sink: {type: spark}
        columns:
          - {name: message_key, from: key}
          - {name: _file, from: timestamp_type}
""")
    why = only(lines, path, "groups[0].topics[0].columns[1].name", 11)
    assert why == ("spark sink stg_payments: column name '_file' is reserved by the sink; "
                   "choose another name")
