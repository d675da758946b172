"""``topics[].topic_pattern``: checked by ``kstage validate`` with file, line and key; the
table (or file) template ``{topic}``; which topics a pattern entry claims
(:class:`actors.topic_patterns.PatternWatch`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors.topic_patterns import PatternWatch
from service.cli import main
from settings import load_settings
from settings.identifiers import table_part
from settings.models import Settings
from tests.validate_kit import assert_refused_at, topics_config


def config(tmp_path: Path, entries: str) -> Path:
    """A config of one group; ``entries`` holds its topics (the first on line 4)."""
    return topics_config(tmp_path, entries, "patterns")


@pytest.mark.parametrize(("entries", "key", "line", "why"), [
    ("- topic_pattern: 'dbz\\.(public'\n  processor: json_rows\n", "topic_pattern", 4,
     "'dbz\\\\.(public' is not a regular expression: missing ), unterminated subpattern"),
    ("- topic: a\n  topic_pattern: 'a.*'\n  processor: json_rows\n", "topic_pattern", 5,
     "topic and topic_pattern are exclusive"),
    ("- processor: json_rows\n", "topic", 4, "topic (or topic_pattern)"),
    ("- topic_pattern: 'a.*'\n  processor: json_rows\n  sink: {type: spark, table: '9{topic}'}\n",
     "sink.table", 6, "'9{topic}' is not a SQL identifier"),
])
def test_a_bad_pattern_is_refused_with_file_line_and_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], entries: str, key: str,
        line: int, why: str) -> None:
    assert_refused_at(tmp_path, capsys, entries, key, line, why)


def test_topic_names_are_made_safe_and_lower_cased() -> None:
    assert table_part("dbz.public.Orders-2") == "dbz_public_orders_2"
    assert table_part("a_b9") == "a_b9"


def test_a_fixed_topic_fills_its_own_name_in() -> None:
    settings = load_settings_from({"topic": "Web.Clicks", "processor": "json_rows",
                                   "sink": {"type": "spark", "table": "stg_{topic}"}})
    [topic] = settings.groups[0].topics
    assert topic.sink is not None and topic.sink.destination() == "spark table stg_web_clicks"


def load_settings_from(*entries: dict[str, object]) -> Settings:
    return Settings.model_validate({"name": "g", "groups": [{"topics": list(entries)}]})


def watch(settings: Settings) -> PatternWatch:
    return PatternWatch([(settings.group_id(g), g) for g in settings.groups])


def test_each_matching_topic_gets_its_table_and_explicit_entries_win() -> None:
    settings = Settings.model_validate({"name": "g", "groups": [{
        "failure": {"dead_letter_topic": "dbz.public.dlq"},
        "topics": [
            {"topic_pattern": r"dbz\.public\..*", "processor": "json_rows",
             "sink": {"type": "spark", "table": "stg_{topic}"}},
            {"topic": "dbz.public.special", "processor": "json_rows"},
            {"topic_pattern": r"dbz\..*", "processor": "json_rows"}]}]})
    patterns = watch(settings)
    changes = patterns.update({"dbz.public.a", "dbz.public.B", "dbz.public.special",
                               "dbz.public.dlq", "dbz.other", "__consumer_offsets", "x"})
    started = {t.topic: t.sink.destination() if t.sink else None for _, t in changes.started}
    assert started == {"dbz.public.a": "spark table stg_dbz_public_a",
                       "dbz.public.B": "spark table stg_dbz_public_b",
                       "dbz.other": "null sink {\"type\":\"null\"}"}
    assert patterns.status("g")[0] == {"pattern": r"dbz\.public\..*", "count": 2,
                                       "topics": ["dbz.public.B", "dbz.public.a"],
                                       "refused": []}
    # Listing again starts nothing; a deleted topic is gone, a new one started.
    assert patterns.update({"dbz.public.a", "dbz.public.B", "dbz.other"}).started == []
    changes = patterns.update({"dbz.public.a", "dbz.public.c", "dbz.other"})
    assert [t.topic for _, t in changes.started] == ["dbz.public.c"]
    assert changes.gone == ["g/dbz.public.B"]


def test_two_topics_mapping_to_one_table_are_refused_naming_both() -> None:
    settings = load_settings_from({"topic_pattern": "a.*", "processor": "json_rows",
                                   "sink": {"type": "spark", "table": "stg_{topic}"}},
                                  {"topic_pattern": "9.*", "processor": "json_rows",
                                   "sink": {"type": "spark", "table": "{topic}"}})
    patterns = watch(settings)
    changes = patterns.update({"a.b", "a_b", "9lives"})
    assert [t.topic for _, t in changes.started] == ["a.b"]
    [first, second] = patterns.status("g")
    assert first["refused"] == ["a_b: topics 'a.b' and 'a_b' both map to spark table stg_a_b; "
                                "rename one, or give it an entry of its own"]
    assert second["count"] == 0 and "'9lives' is not a SQL identifier" in str(
        second["refused"])


def test_a_pattern_matching_nothing_is_no_error(tmp_path: Path) -> None:
    settings = load_settings(config(tmp_path, "- topic_pattern: 'nothing\\..*'\n"
                                    "  processor: json_rows\n"))
    patterns = watch(settings)
    assert patterns.update({"x"}).started == []
    assert patterns.status("patterns") == [
        {"pattern": "nothing\\..*", "topics": [], "count": 0, "refused": []}]


def test_pattern_entries_validate_with_their_table_templates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The sinks of a pattern entry are checked as a matching topic's would be (the
    template filled in), and two pattern entries of other processors claim no topic."""
    path = config(tmp_path, """\
        - topic_pattern: 'gob\\..*'
          processor: gobblin_compaction
          sink: {type: spark, table: 'stg_{topic}'}
        - topic_pattern: 'pg\\..*'
          processor: gobblin_compaction
          sinks:
            - {type: jdbc, url: 'jdbc:postgresql://h/db', table: 's.stg_{topic}'}
            - {type: jsonl, path: 'out/{topic}.jsonl'}
        - topic_pattern: 'raw\\..*'
          processor: json_rows
          sink: {type: jsonl, path: 'out/raw_{topic}.jsonl'}
        """)
    code = main(["validate", "-c", str(path)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert out.strip() == f"{path}: OK (1 group(s), 0 topic(s), 3 pattern(s))", out + err


def test_dlq_replay_finds_the_pattern_entry_of_a_dead_letter(tmp_path: Path) -> None:
    """A dead letter of a topic a pattern ran is replayed into that topic's own file;
    one of a topic no entry matches is not (the topic is not in the configuration)."""
    from actors.deadletters.file import dead_letter_line
    from service.ops import dlq

    dead = tmp_path / "dead.jsonl"
    cfg = tmp_path / "kstage.yml"
    cfg.write_text(json.dumps({"groups": [{
        "group_id": "g", "failure": {"dead_letter_path": str(dead)},
        "topics": [{"topic_pattern": r"a\..*", "processor": "json_rows",
                    "sink": {"type": "jsonl", "path": str(tmp_path / "{topic}.jsonl")}}]}]}))
    dead.write_text("".join(dead_letter_line(
        group="g", topic=topic, partition=0, offset=o, timestamp=0, key=None,
        value=json.dumps({"i": o}).encode(), headers=(), processor="json_rows",
        exc=RuntimeError("sink down"), attempts=1) + "\n"
        for o, topic in enumerate(["a.x", "a.Y", "b", "a.x"])))
    result = dlq.replay(load_settings(cfg))
    assert (len(result.replayed), len(result.skipped), len(result.failed)) == (3, 1, 0), \
        dlq.render_replay(result)
    assert "topic not in the configuration" in dlq.render_replay(result)
    assert [json.loads(x)["i"] for x in (tmp_path / "a_x.jsonl").read_text().splitlines()] \
        == [0, 3]
    assert [json.loads(x)["i"] for x in (tmp_path / "a_y.jsonl").read_text().splitlines()] \
        == [1]


@pytest.mark.parametrize("section", [{"merge": {"interval_s": 60}},
                                     {"spark": {"maintenance": {"every_s": 3600}}}])
def test_the_merge_and_maintenance_are_refused_over_a_patterns_tables(
        section: dict[str, object]) -> None:
    """Neither plans a pattern's tables (known only to the running process): refused,
    rather than leaving those tables unmerged or unmaintained without a word."""
    entries = [{"topic_pattern": r"gob\..*", "processor": "gobblin_compaction",
                "sink": {"type": "spark", "table": "stg_{topic}"}}]
    with pytest.raises(ValueError, match="do not cover yet"):
        Settings.model_validate({"name": "g", "groups": [{"topics": entries}], **section})
    Settings.model_validate({"name": "g", "groups": [{"topics": entries}]})
