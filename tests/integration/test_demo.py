"""`kstage demo`: the main job on the embedded default lands rows in every staging table
(Spark, Iceberg in the embedded SQLite catalog) and merges each into its final table; the
summary shows each table's rows and snapshots; one topic's filter keeps some events from
its processor, and the summary counts them; one topic lands through ``schema_rows``, its
writer schema changing midway, and the summary shows its table and the new column."""

from __future__ import annotations

import json

import pytest

from service.cli import main
from service.dev.demo import DEAD_LETTER_TOPIC, FILTER_TOPIC
from service.dev.samples import SAMPLE_TOPICS, sample_records
from service.dev.schema_demo import NEW_COLUMN, SCHEMA_TABLE
from tests.iceberg_tables import reader, rows, summaries

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_demo_lands_and_merges_every_table_and_dead_letters_the_poison(tmp_path, capsys):
    assert main(["demo", "--dir", str(tmp_path), "--events", "40"]) == 0
    out = capsys.readouterr().out
    # the PlatformEvent_v1 topic's filter keeps documentation changes from its processor
    platform = next(t for t in SAMPLE_TOPICS if t.topic == FILTER_TOPIC)
    documentation = sum(json.loads(r["payload"]["value"])["category"] == "DOCUMENTATION"
                        for r in sample_records(platform, 40))
    assert 0 < documentation < 40
    line = next(line for line in out.splitlines() if line.strip().startswith("filtered"))
    assert int(line.split()[-1]) == documentation, line
    warehouse = tmp_path / "warehouse"
    for table in {t.table for t in SAMPLE_TOPICS}:
        line = next(line for line in out.splitlines() if line.strip().startswith(table))
        staging, snapshots, final, final_snapshots = (int(n) for n in line.split()[-4:])
        per_topic = sum(1 for t in SAMPLE_TOPICS if t.table == table)
        landed = 40 * per_topic - (documentation if table == platform.table else 0)
        assert staging == landed and 0 < final <= staging, line
        # what the summary says is what another engine (pyiceberg) reads in the catalog
        final_table = line.split()[2]
        held = reader(warehouse).coordinates(table)
        assert sum(held.values()) == staging and set(held.values()) == {1}  # each once
        assert len(rows(warehouse, final_table)) == final
        assert snapshots >= 1 and final_snapshots >= 1
        assert len(summaries(warehouse, table)) == snapshots
    dead = [json.loads(line) for line in (tmp_path / "failed_events.log").read_text().splitlines()]
    assert len(dead) == 6 and {d["topic"] for d in dead} == {"MetadataChangeLog_Versioned_v1"}
    line = next(line for line in out.splitlines()
                if line.strip().startswith(f"dead letters (topic {DEAD_LETTER_TOPIC})"))
    assert int(line.split()[-1]) == 6, line
    assert (warehouse / "catalog.db").is_file() and not (warehouse / "_merge_state").exists()
    # the schema-driven topic: one table made from the first writer schema, evolved once
    line = next(line for line in out.splitlines() if line.strip().startswith(SCHEMA_TABLE))
    assert line.split()[-2:] == ["40", str(len(summaries(warehouse, SCHEMA_TABLE)))], line
    line = next(line for line in out.splitlines()
                if line.strip().startswith(f"new column {NEW_COLUMN} "))
    assert "(writer schema v2, from event 20): filled in" in line and line.endswith(" 20"), line
    landed = sorted(rows(warehouse, SCHEMA_TABLE), key=lambda r: r["_offset"])
    assert [r[NEW_COLUMN] for r in landed] == [None] * 20 + ["2.0"] * 20
    assert [r["_offset"] for r in landed] == list(range(40))
