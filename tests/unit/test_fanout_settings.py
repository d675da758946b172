"""``topics[].sinks``: fan-out settings, checked by ``kstage validate`` with file and line.

``sink:`` (one sink) and ``sinks:`` (a list) are exclusive; each entry of ``sinks`` is
validated by its own type's model at ``sinks.K.<key>``; sinks have unique names (``name``,
default the type, ``TYPE#K`` when the type repeats) and distinct destinations; what a
sink would refuse at open is found at ``sinks.K.<key>`` too. A topic with ``sink:`` is a
fan-out of one.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from service.cli import main
from settings import load_settings

TYPED = "gobblin_compaction"  # a processor with columns and a table


def config(tmp_path: Path, topic: str) -> Path:
    """A config of one topic; ``topic`` holds the topic's keys (its first on line 5)."""
    path = tmp_path / "kstage.yml"
    path.write_text("name: sinks\ngroups:\n  - topics:\n      - topic: events\n"
                    + textwrap.indent(textwrap.dedent(topic), "        "), encoding="utf-8")
    return path


def validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(["validate", "-c", str(path)])
    out, err = capsys.readouterr()
    return code, (out + err).splitlines()


@pytest.mark.parametrize(("topic", "key", "line", "why"), [
    # each entry by its own type's model
    ("processor: json_rows\nsinks:\n  - {type: jsonl, path: a.jsonl}\n"
     "  - {type: http, url: 'http://127.0.0.1/x', timeout_s: soon}\n",
     "sinks[1].timeout_s", 8, "Input should be a valid number"),
    ("processor: json_rows\nsinks:\n  - type: jsonl\n    path: a.jsonl\n"
     "  - type: jsonl\n    path: b.jsonl\n    fsynk: true\n", "sinks[1].fsynk", 11,
     "Extra inputs are not permitted"),
    ("processor: json_rows\nsinks:\n  - {type: jsonl, path: a.jsonl}\n  - {type: sparkk}\n",
     "sinks[1].type", 8, "unknown sink type 'sparkk'"),
    # exclusive forms, non-empty list
    ("processor: json_rows\nsink: {type: jsonl, path: a.jsonl}\nsinks:\n"
     "  - {type: jsonl, path: b.jsonl}\n", "sinks", 7, "sink and sinks are exclusive"),
    ("processor: json_rows\nsinks: []\n", "sinks", 6, "List should have at least 1 item"),
    # names: unique, plain
    ("processor: json_rows\nsinks:\n  - {type: jsonl, path: a.jsonl, name: out}\n"
     "  - {type: http, url: 'http://127.0.0.1/x', name: out}\n", "sinks[1].name", 8,
     "sinks[0] is named 'out' too; give each sink a unique name"),
    ("processor: json_rows\nsinks:\n  - {type: jsonl, path: a.jsonl, name: 'my sink'}\n",
     "sinks[0].name", 7, "String should match pattern"),
    # one destination written twice
    ("processor: json_rows\nsinks:\n  - {type: jsonl, path: out/a.jsonl}\n"
     "  - {type: jsonl, path: ./out/a.jsonl, name: again}\n", "sinks[1]", 8,
     "sinks[0] writes the same destination (jsonl file out/a.jsonl): every row would be "
     "written twice"),
    (f"processor: {TYPED}\nsinks:\n  - {{type: spark}}\n  - {{type: spark, name: b}}\n",
     "sinks[1]", 8, "sinks[0] writes the same destination (spark table (the processor's))"),
    # what a sink would refuse at open: at its own key, or at the processor it needs
    ("processor: test_unkeyed\nsinks:\n  - {type: jsonl, path: a.jsonl}\n"
     "  - {type: jdbc, url: 'jdbc:postgresql://h/db', mode: upsert}\n",
     "sinks[1].mode", 8, "jdbc sink stg_unkeyed: mode upsert needs a natural key"),
    ("processor: json_rows\nsinks:\n  - {type: jsonl, path: a.jsonl}\n"
     "  - {type: spark, table: stg_x}\n", "processor", 5,
     "spark sink: processor 'json_rows' declares no columns"),
])
def test_each_sink_of_a_fan_out_is_checked_at_its_own_key_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], topic: str, key: str, line: int,
        why: str | None) -> None:
    path = config(tmp_path, topic)
    code, lines = validate(path, capsys)
    assert code == 2, lines
    prefix = f"kstage: {path}: groups[0].topics[0].{key} (line {line}): "
    assert len(lines) == 1 and lines[0].startswith(prefix), lines
    if why is not None:
        assert why in lines[0], lines


def test_names_default_to_the_type_and_one_sink_is_a_fan_out_of_one(tmp_path: Path) -> None:
    fan = load_settings(config(tmp_path, """\
        processor: json_rows
        sinks:
          - {type: jsonl, path: a.jsonl}
          - {type: jsonl, path: b.jsonl}
          - {type: http, url: 'http://127.0.0.1/x'}
          - {type: 'null', name: dry-run}
        """)).groups[0].topics[0]
    assert fan.sink is None
    assert [(s.name, s.path) for s in fan.named_sinks()] == [
        ("jsonl#0", ("sinks", 0)), ("jsonl#1", ("sinks", 1)), ("http", ("sinks", 2)),
        ("dry-run", ("sinks", 3))]
    one = load_settings(config(tmp_path, "processor: json_rows\n"
                               "sink: {type: jsonl, path: a.jsonl}\n")).groups[0].topics[0]
    assert [(s.name, s.settings.type, s.path) for s in one.named_sinks()] == [
        ("jsonl", "jsonl", ("sink",))]
    assert one.sink is not None and one.sinks is None
