"""``topics[].route``: refused by ``kstage validate`` with file, line and key; the table
of each message (:class:`actors.routing.Router`), and its poison."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.routing import ROUTE_FIELD, Router
from processors.base import Message
from processors.errors import PoisonMessage
from settings.models import Settings
from settings.routes import RouteSettings
from tests.validate_kit import assert_refused_at, topics_config

SINK = "  sink: {type: jsonl, path: 'out/{table}.jsonl'}\n"


def config(tmp_path: Path, entries: str) -> Path:
    """A config of one group; ``entries`` holds its topics (the first on line 4)."""
    return topics_config(tmp_path, entries, "routes")


@pytest.mark.parametrize(("entries", "key", "line", "why"), [
    ("- topic: a\n  processor: json_rows\n  route: {by: 'value', tables: {x: t}}\n" + SINK,
     "route.by", 6, "'value' is not a route: write value.PATH"),
    ("- topic: a\n  processor: json_rows\n  route: {by: key}\n" + SINK,
     "route.tables", 6, "a route names its tables"),
    ("- topic: a\n  processor: json_rows\n  route: {by: key, template: 'stg'}\n" + SINK,
     "route.template", 6, "'stg' holds no {value}"),
    ("- topic: a\n  processor: json_rows\n  route: {by: key, template: '9{value}'}\n" + SINK,
     "route.template", 6, "'9{value}' is not a SQL identifier"),
    ("- topic: a\n  processor: json_rows\n  route: {by: key, tables: {x: 'a b'}}\n" + SINK,
     "route.tables.x", 6, "'a b' is not a SQL identifier"),
    ("- topic: a\n  processor: json_rows\n"
     "  route: {by: key, tables: {x: t}, max_tables: 3}\n" + SINK,
     "route.max_tables", 6, "max_tables is for template"),
    ("- topic: a\n  processor: json_rows\n  route: {by: key, tables: {x: t}}\n"
     "  sink: {type: jsonl, path: out/a.jsonl}\n", "route", 6,
     "the topic is routed but sink names no {table} in its path"),
    ("- topic: a\n  processor: json_rows\n" + SINK, "sink", 6,
     "sink.path holds {table}, which stands for a route's table"),
])
def test_a_bad_route_is_refused_with_file_line_and_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], entries: str, key: str,
        line: int, why: str) -> None:
    assert_refused_at(tmp_path, capsys, entries, key, line, why)


def message(value: object, key: object = None,
            headers: tuple[tuple[str, bytes | None], ...] = ()) -> Message:
    return Message("t", 2, 7, 0, key, value, list(headers), b"")


def test_the_route_of_a_value_field_a_header_and_a_key() -> None:
    by_value = Router(RouteSettings(by="value.a.kind", tables={"1": "t_one"}, default="t_d"))
    assert by_value.table(message({"a": {"kind": 1}})) == "t_one"
    assert by_value.table(message({"a": {}})) == "t_d"
    by_header = Router(RouteSettings(by="header.k", template="t_{value}"))
    assert by_header.table(message({}, headers=(("x", b"1"), ("k", b"Web.Click"),
                                                ("k", b"no")))) == "t_web_click"
    with pytest.raises(PoisonMessage,
                       match=r"t\[2\]@7: route by header.k: value .*: header is not UTF-8"):
        by_header.table(message({}, headers=(("k", b"\xff"),)))
    with pytest.raises(PoisonMessage, match="no value: a template route needs one"):
        by_header.table(message({}))
    by_key = Router(RouteSettings(by="key", template="t_{value}", max_tables=1))
    rows: list[dict[str, object]] = [{"i": 1}, {"i": 2}]
    by_key.tag(rows, message({}, key="K"))
    assert [r[ROUTE_FIELD] for r in rows] == ["t_k", "t_k"]
    with pytest.raises(PoisonMessage, match=r"max_tables \(1\)"):
        by_key.table(message({}, key="other"))


@pytest.mark.parametrize("section", [{"merge": {"interval_s": 60}},
                                     {"spark": {"maintenance": {"every_s": 3600}}}])
def test_the_merge_and_maintenance_are_refused_over_a_routes_tables(
        section: dict[str, object]) -> None:
    """Neither plans a route's tables (known only to the running process): refused,
    rather than leaving them unmerged or unmaintained without a word."""
    entries = [{"topic": "gob", "processor": "gobblin_compaction",
                "route": {"by": "header.kind", "template": "stg_{value}"},
                "sink": {"type": "spark", "table": "{table}"}}]
    with pytest.raises(ValueError, match="the route of topic 'gob' feeds spark tables"):
        Settings.model_validate({"name": "g", "groups": [{"topics": entries}], **section})
    Settings.model_validate({"name": "g", "groups": [{"topics": entries}]})
