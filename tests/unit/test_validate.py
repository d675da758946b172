"""``kstage validate`` refuses what ``kstage run`` would refuse at start, and ``run`` exits 2
on such a file before anything starts.

Each case runs the CLI on a file and checks that every problem is one line naming the file,
the dotted key and its line, with exit code 2. No broker: the checks never connect.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from service.cli import main
from service.lifecycle import serve
from settings.identifiers import QualifiedSqlIdentifier, SqlIdentifier, sql_identifier
from settings.models import Settings
from tests.kafkautil import CHILD_PATH

ROOT = Path(__file__).resolve().parents[2]

HEAD = """\
name: validate-test
kafka:
  bootstrap: 127.0.0.1:9092
groups:
  - topics:
      - topic: events
"""


def validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
             ) -> tuple[Path, list[str]]:
    """Run ``kstage validate`` on ``text``; assert exit 2 and no stdout; the stderr lines."""
    path = tmp_path / "kstage.yml"
    path.write_text(text, encoding="utf-8")
    code = main(["validate", "-c", str(path)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), (code, out, err)
    return path, err.splitlines()


def only(lines: list[str], path: Path, key: str, line: int) -> str:
    """The one problem line; it names the file, the key and the line. Returns the reason."""
    assert len(lines) == 1, lines
    prefix = f"kstage: {path}: {key} (line {line}): "
    assert lines[0].startswith(prefix), lines[0]
    return lines[0].removeprefix(prefix)


# ---------------------------------------------------------------- processor options


def test_unknown_processor_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, lines = validate(tmp_path, capsys, HEAD + """\
        processor: json_rows
        options:
          fields: [a, b]
          colour: red
""")
    why = only(lines, path, "groups[0].topics[0].options.colour", 10)
    assert why == "unknown option of processor 'json_rows' (options: fields)"


def test_processor_without_options_refuses_any(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, lines = validate(tmp_path, capsys, HEAD + "        processor: log\n"
                           "        options: {level: debug}\n")
    why = only(lines, path, "groups[0].topics[0].options.level", 8)
    assert why == "unknown option of processor 'log' (options: none)"


def test_processor_option_of_the_wrong_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, lines = validate(tmp_path, capsys, HEAD + """\
        processor: json_rows
        options:
          fields: a
""")
    assert only(lines, path, "groups[0].topics[0].options.fields", 9) == (
        "Input should be a valid list")


def test_nested_processor_options_point_at_the_item(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, lines = validate(tmp_path, capsys, HEAD + """\
        processor: gobblin_compaction
        options:
          clusters:
            - {code: ltx1-holdem, short_name: holdem}
            - {code: ltx1-war}
      - topic: audit
        processor: datahub_entity_change_webhook
        format: avro
        options: {categories: [TAG, 3]}
schema_registry: {url: "file:///tmp"}
""")
    assert lines == [
        f"kstage: {path}: groups[0].topics[0].options.clusters[1].short_name (line 11): "
        "Field required",
        f"kstage: {path}: groups[0].topics[1].options.categories[1] (line 15): "
        "Input should be a valid string",
    ]


def test_processor_refusing_its_options_in_init(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, lines = validate(tmp_path, capsys, HEAD + "        processor: test_picky\n"
                           "        options: {n: 3}\n")
    assert only(lines, path, "groups[0].topics[0].options", 8) == (
        "processor 'test_picky' refused its options: ValueError: n must be an even integer, "
        "got 3")


# --------------------------------------------------------------------- table names


def test_processor_table_that_is_not_an_identifier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, lines = validate(tmp_path, capsys, HEAD + "        processor: test_bad_table\n")
    why = only(lines, path, "groups[0].topics[0].processor", 7)
    assert why.startswith("processor 'test_bad_table' declares the staging table "
                          "'stg-events v2' is not a SQL identifier")


@pytest.mark.parametrize("name", ["stg_events", "_t", "T2"])
def test_identifiers_accepted(name: str) -> None:
    assert sql_identifier(name) == name


@pytest.mark.parametrize("name", ["", "2t", "stg-events", "a b", "t;drop", "s.t", "`t`"])
def test_identifiers_refused(name: str) -> None:
    with pytest.raises(ValueError, match="is not a SQL identifier"):
        sql_identifier(name)


def test_identifier_field_types() -> None:
    class Table(BaseModel):
        name: SqlIdentifier
        qualified: QualifiedSqlIdentifier = "public.t"

    assert Table(name="t", qualified="s.t").qualified == "s.t"
    with pytest.raises(ValidationError) as info:
        Table(name="s.t", qualified="a.b.c")
    assert [e["loc"] for e in info.value.errors()] == [("name",), ("qualified",)]


# ---------------------------------------------------------------------------- kafka


def test_unsupported_consumer_config_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = HEAD.replace("  bootstrap: 127.0.0.1:9092\n", "  bootstrap: 127.0.0.1:9092\n"
                        "  consumer_config:\n    security.protocol: SSL\n"
                        "    enable.auto.commit: true\n")
    path, lines = validate(tmp_path, capsys, text + "        processor: json_rows\n")
    why = only(lines, path, "kafka.consumer_config['enable.auto.commit']", 6)
    assert why.startswith("key 'enable.auto.commit' is not supported by kstage's Kafka "
                          "client (supported: check.crcs, client.rack,")
    assert "security.protocol" in why and "ssl.ca.location" in why


@pytest.mark.parametrize("bootstrap", [
    "broker", "broker:0", "broker:65536", "broker:port", "k1:9092,", "k1:9092;k2:9092",
    "PLAINTEXT://k1:9092", "k 1:9092", "[::1]", ":9092",
])
def test_malformed_bootstrap(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             bootstrap: str) -> None:
    text = HEAD.replace("127.0.0.1:9092", f'"{bootstrap}"')
    path, lines = validate(tmp_path, capsys, text + "        processor: json_rows\n")
    assert "is not host:port (port 1-65535)" in only(lines, path, "kafka.bootstrap", 3)


@pytest.mark.parametrize("bootstrap", [
    "embedded", "k1:9092", "k1:9092, k2.example.com:19092", "10.0.0.1:1", "[::1]:65535",
])
def test_good_bootstrap(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                        bootstrap: str) -> None:
    path = tmp_path / "kstage.yml"
    path.write_text(HEAD.replace("127.0.0.1:9092", f'"{bootstrap}"')
                    + "        processor: json_rows\n", encoding="utf-8")
    assert main(["validate", "-c", str(path)]) == 0, capsys.readouterr().err


# --------------------------------------------------------------------------- groups


@pytest.mark.parametrize(("text", "line"), [
    ("name: t\ngroups: []\n", 2),
    ("name: t\n", 1),  # no groups key: the top of the file
])
def test_no_groups(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                   line: int) -> None:
    path, lines = validate(tmp_path, capsys, text)
    assert only(lines, path, "groups", line).startswith("no consumer groups")


# -------------------------------------------------------------------------- backoff


@pytest.mark.parametrize(("section", "key", "line", "why"), [
    ("supervisor:\n  min_backoff_s: 60\n  max_backoff_s: 5\n", "supervisor", 8,
     "max_backoff_s must be >= min_backoff_s"),
    ("schema_registry:\n  url: http://r:8081\n  min_backoff_s: 3\n  max_backoff_s: 1\n",
     "schema_registry", 8, "max_backoff_s must be >= min_backoff_s"),
    ("    failure: {mode: retry, min_backoff_ms: 500, max_backoff_ms: 100}\n",
     "groups[0].failure", 8, "max_backoff_ms must be >= min_backoff_ms"),
])
def test_min_backoff_above_max_backoff(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       section: str, key: str, line: int, why: str) -> None:
    path, lines = validate(tmp_path, capsys, HEAD + "        processor: json_rows\n" + section)
    assert only(lines, path, key, line) == why


def test_every_problem_is_reported_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = HEAD.replace("  bootstrap: 127.0.0.1:9092\n", "  bootstrap: 127.0.0.1:9092\n"
                        "  consumer_config: {fetch.wait.max.ms: 5}\n")
    path, lines = validate(tmp_path, capsys, text + """\
        processor: json_rows
        options: {colour: red}
      - topic: more
        processor: test_bad_table
""")
    assert all(line.startswith(f"kstage: {path}: ") for line in lines)
    assert [line.removeprefix(f"kstage: {path}: ").split(": ")[0] for line in lines] == [
        "kafka.consumer_config['fetch.wait.max.ms'] (line 4)",
        "groups[0].topics[0].options.colour (line 9)",
        "groups[0].topics[1].processor (line 11)",
    ]


# ------------------------------------------------------------------------------ run


def test_run_exits_2_on_options_the_processor_refuses_without_a_restart(
    tmp_path: Path
) -> None:
    """Before: the worker built the processor at start and crashed on the bad option; the
    supervisor restarted it until it escalated (exit 1, a traceback per restart)."""
    path = tmp_path / "kstage.yml"
    path.write_text("""\
name: run-bad-options
kafka: {bootstrap: "127.0.0.1:9"}
service: {http_port: 0}
supervisor: {max_restarts: 2, min_backoff_s: 0.05, max_backoff_s: 0.1}
groups:
  - topics:
      - topic: events
        processor: gobblin_compaction
        format: json
        options:
          clusters: [ltx1-holdem]
""", encoding="utf-8")
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "service", "run", "-c", str(path)], cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": CHILD_PATH},
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"kstage: {path}: groups[0].topics[0].options.clusters[0] (line 11): Input should be "
        "a valid dictionary or instance of Cluster"]
    assert time.monotonic() - started < 60  # no restart, no broker, no backoff


def test_serve_returns_2_when_a_processor_refuses_its_options(
    caplog: pytest.LogCaptureFixture
) -> None:
    """Settings built in code (the demo, embedders) skip the CLI's checks: ``serve``
    builds the processors before any worker and maps a refusal to exit code 2."""
    settings = Settings.model_validate({
        "name": "serve-bad-options", "service": {"http_port": 0},
        "groups": [{"topics": [{"topic": "t", "processor": "json_rows",
                                "options": {"colour": "red"}}]}]})
    assert asyncio.run(serve(settings, "127.0.0.1:9")) == 2
    assert [r.getMessage() for r in caplog.records if r.levelname == "CRITICAL"] == [
        "configuration: groups[0].topics[0].options.colour: unknown option of processor "
        "'json_rows' (options: fields)"]


# ---------------------------------------------------------------- topic filters


@pytest.mark.parametrize(("filter_yaml", "key", "line", "why"), [
    ("include:\n            a..b: [x]", "groups[0].topics[0].filter.include['a..b']", 10,
     "'a..b' is not a dotted path (an empty segment)"),
    ("exclude:\n            entityType: dataset", "groups[0].topics[0].filter.exclude.entityType",
     10, "Input should be a valid list"),
    ("include:\n            a: [{b: 1}]", "groups[0].topics[0].filter.include.a[0]", 10,
     "filter values are strings, numbers, booleans or null, not a dict"),
    ("include:\n            a: []", "groups[0].topics[0].filter.include.a", 10,
     "List should have at least 1 item"),
    ("includes: {a: [x]}", "groups[0].topics[0].filter.includes", 9, "Extra inputs"),
])
def test_malformed_topic_filter(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                filter_yaml: str, key: str, line: int, why: str) -> None:
    path, lines = validate(tmp_path, capsys, HEAD + f"""\
        processor: json_rows
        filter:
          {filter_yaml}
""")
    assert only(lines, path, key, line).startswith(why)


def test_validate_names_every_problem_in_one_pass_with_near_misses(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A wrong commit mode does not hide an unknown processor (both are named, with the
    sink type and the keys, in file order), and near misses say what was meant."""
    path, lines = validate(tmp_path, capsys, """\
groups:
  - group_id: g
    commit:
      mode: per_mesage
      max_in_flght: 10
    topics:
      - topic: t
        processor: json_row
        sink:
          type: jsnl
          path: out.jsonl
""")
    assert [line.split(": ", 3)[2] for line in lines] == [
        "groups[0].commit.mode (line 4)", "groups[0].commit.max_in_flght (line 5)",
        "groups[0].topics[0].processor (line 8)", "groups[0].topics[0].sink.type (line 10)"]
    assert all(line.startswith(f"kstage: {path}: ") for line in lines), lines
    assert [line.rsplit("; ", 1)[1] for line in lines] == [
        "did you mean 'per_message'?", "did you mean 'max_in_flight'?",
        "did you mean 'json_rows'?", "did you mean 'jsonl'?"]


def test_a_batch_cap_below_a_topics_message_cap_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, lines = validate(tmp_path, capsys, """\
name: validate-test
kafka:
  bootstrap: 127.0.0.1:9092
  max_batch_inflated_bytes: 1000000
groups:
  - topics:
      - topic: events
        processor: json_rows
        max_message_bytes: 2000000
""")
    assert len(lines) == 1, lines
    assert "kafka.max_batch_inflated_bytes (1000000) is less than groups[0].topics[0]." \
        "max_message_bytes (2000000)" in lines[0], lines
    assert str(path) in lines[0], lines
