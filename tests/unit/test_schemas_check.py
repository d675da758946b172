"""`kstage schemas check` against the fake registry (no broker needed)."""

from __future__ import annotations

import json
from pathlib import Path

from processors import SCHEMA_DIR
from service.cli import main
from tests.fake_registry import FakeRegistry

GOBBLIN = json.loads((SCHEMA_DIR / "wherehows/GobblinTrackingEvent.avsc").read_text())


def config(tmp_path: Path, url: str, topics: list[str]) -> Path:
    lines = ["name: check", "kafka: {bootstrap: 127.0.0.1:1}",
             f"schema_registry: {{url: '{url}'}}", "groups:", "  - topics:"]
    lines += [f"      - {{topic: {t}, processor: gobblin_compaction, format: avro}}"
              for t in topics]
    path = tmp_path / "kstage.yml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_compatible_evolution_passes_and_incompatible_fails(tmp_path, capsys):
    added = {**GOBBLIN, "fields": [*GOBBLIN["fields"],
                                   {"name": "producer", "type": "string", "default": "g"}]}
    retyped = {**GOBBLIN, "fields": [{**f, "type": "string", "default": "0"}
                                     if f["name"] == "timestamp" else f
                                     for f in GOBBLIN["fields"]]}
    with FakeRegistry() as reg:
        reg.register("same-value", json.dumps(GOBBLIN))
        reg.register("added-value", json.dumps(added))
        reg.register("retyped-value", json.dumps(retyped))
        code = main(["schemas", "check", "-c",
                     str(config(tmp_path, reg.url, ["same", "added", "retyped", "missing"]))])
    out = capsys.readouterr().out
    assert code == 1, out
    lines = {line.split()[1]: line for line in out.splitlines()}
    assert lines["check/same"].startswith("OK ")
    assert lines["check/added"].startswith("OK ")
    assert lines["check/retyped"].startswith("BAD") and "NOT readable" in lines["check/retyped"]
    assert lines["check/missing"].startswith("BAD") and "cannot fetch" in lines["check/missing"]


def test_all_compatible_exits_zero(tmp_path, capsys):
    with FakeRegistry() as reg:
        reg.register("same-value", json.dumps(GOBBLIN))
        assert main(["schemas", "check", "-c", str(config(tmp_path, reg.url, ["same"]))]) == 0
    assert "readable with wherehows/GobblinTrackingEvent.avsc" in capsys.readouterr().out
