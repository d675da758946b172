"""`kstage demo`: the main job on the embedded default lands rows in every table."""

from __future__ import annotations

import json

import pytest

from service.cli import main
from service.samples import SAMPLE_TOPICS

pytestmark = pytest.mark.kafka


def test_demo_lands_every_table_and_dead_letters_the_poison(tmp_path, capsys):
    assert main(["demo", "--dir", str(tmp_path), "--events", "40"]) == 0
    out = capsys.readouterr().out
    for table in {t.table for t in SAMPLE_TOPICS}:
        line = next(line for line in out.splitlines() if line.strip().startswith(table))
        assert int(line.split()[-1]) > 0, line
    dead = [json.loads(line) for line in (tmp_path / "failed_events.log").read_text().splitlines()]
    assert len(dead) == 6 and {d["topic"] for d in dead} == {"MetadataChangeLog_Versioned_v1"}
    mcl = (tmp_path / "staging" / "stg_datahub_mcl" / "MetadataChangeLog_Versioned_v1.jsonl")
    assert len(mcl.read_text().splitlines()) == 40
