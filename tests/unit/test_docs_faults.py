"""docs/operations.md's fault table names, for each fault, the tests that inject it."""

from __future__ import annotations

import re

from tests.kafkautil import ROOT


def test_every_test_the_fault_table_names_exists() -> None:
    doc = (ROOT / "docs/operations.md").read_text(encoding="utf-8")
    section = doc.split("## What kstage guarantees under faults", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][2:]
    assert len(rows) >= 15, "the fault table lost rows"
    files = {path.stem for path in (ROOT / "tests").rglob("test_*.py")}
    for row in rows:
        named = re.findall(r"`(test_\w+)`", row.rsplit("|", 2)[-2])
        assert named, f"a fault without a test: {row}"
        missing = [name for name in named if name not in files]
        assert not missing, f"docs/operations.md names tests that do not exist: {missing} in {row}"
