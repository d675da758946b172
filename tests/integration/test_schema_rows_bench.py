"""``bench/schema_rows.py``'s short variant runs to its last line (no figure is asserted:
they depend on the machine's load), and what it checks holds: on the real broker and
Iceberg tables (both append paths), ``gobblin_compaction`` and ``schema_rows`` each land
every Gobblin event once, and a schema change while kstage runs (a new writer schema
version adding an optional field, registered by the producer midway) evolves the table
once, without a restart, its new column filled from the new version on.

It reads kstage's own log lines (assignment, commits, the table's registration, the
evolution) and its tables: a change to either that the benchmark no longer understands
fails here, not in the next long run.
"""

from __future__ import annotations

import re

import pytest

from tests.integration.test_spark_benches import _run
from tests.kafkautil import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # six kstage runs, four JVMs

EVENTS = 3000
CHANGE_RATE, CHANGE_S = 500, 4  # 2000 events, the schema changing at event 1000


async def test_the_short_schema_rows_run_lands_every_event_once_and_applies_the_change(
        ) -> None:
    text = await _run(str(ROOT / "bench" / "schema_rows.py"), "--messages", str(EVENTS),
                      "--flush-rows", "500", "--change-rate", str(CHANGE_RATE),
                      "--change-seconds", str(CHANGE_S), timeout_s=840)
    lines = text.strip().splitlines()
    assert re.fullmatch(r"ratio=\d+\.\d\d spark=\d+\.\d\d pyiceberg=\d+\.\d\d", lines[-1]), text
    for path in ("spark", "pyiceberg"):
        for processor, table in (("gobblin_compaction", "stg_kafka_gobblin_compaction"),
                                 ("schema_rows", "stg_gobblin_schema_rows")):
            assert re.search(
                rf"^{path} round 1: {processor} +\d+ events/s .*; table {table} read back: "
                rf"{EVENTS} rows, offsets 0\.\.{EVENTS - 1} once each\)$",
                text, re.MULTILINE), text
        half = CHANGE_RATE * CHANGE_S // 2
        assert (f"{path}: schema change at event {half} of {2 * half} ({CHANGE_RATE} "
                f"events/s): one table schema commit (added tracking_version") in text, text
        assert (f"no restart (1 assignment, exit 0 after SIGTERM); tracking_version filled "
                f"in the {half} rows of id 2, NULL in the {half} of id 1") in text, text
        assert re.search(rf"^{path}: freshness \(produce -> visible\) .* within 5 s of it: "
                         r"max \d+ ms", text, re.MULTILINE), text
