"""The final merge's plan over a configuration with a ``schema_rows`` topic: its table's
columns come from the writer schemas while kstage runs (none are declared) and it has
no key, so it is a staging table only, left out of the plan (said once, at INFO); the
other topics' tables are planned as before, and a service with ``merge.interval_s``
starts rather than refusing the whole configuration."""

from __future__ import annotations

import logging

import pytest

from actors.preflight import resolve_processors
from actors.tables.merge import plan
from settings.models import Settings


def settings() -> Settings:
    return Settings(groups=[{"topics": [
        {"topic": "GobblinTrackingEvent_compaction", "processor": "gobblin_compaction",
         "format": "avro", "sink": {"type": "spark"}},
        {"topic": "orders", "processor": "schema_rows", "format": "avro",
         "sink": {"type": "spark", "table": "stg_orders"}}]}],
        schema_registry={"url": "http://127.0.0.1:1"}, merge={"interval_s": 60})


def test_a_schema_rows_table_is_staging_only_and_the_rest_is_planned(
        caplog: pytest.LogCaptureFixture) -> None:
    config = settings()
    with caplog.at_level(logging.INFO, logger="actors.tables.merge"):
        planned = plan(config, resolve_processors(config))
    assert [p.table for p in planned] == ["stg_kafka_gobblin_compaction"]
    assert ("merge: table stg_orders (topic orders, processor 'schema_rows') is staging "
            "only: its columns come from the writer schemas and it has no key") in caplog.text
