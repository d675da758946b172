"""How long each test file took in a full run: the slowest files start first.

pytest-xdist's ``--dist=loadfile`` hands whole files to its workers in the order of the
collection; by default it first reorders them by their number of tests, so a file of a
few slow tests (an S3 outage, a SIGKILL loop) used to start last and set the suite's
tail. ``tests/conftest.py`` orders the files by the seconds below, longest first (those
not listed keep their order, after), the files that start Spark JVMs alternating with
the others (so the two workers per core do not all start JVMs at once), and
``--no-loadscope-reorder`` keeps that order: the longest-processing-time-first schedule.

The seconds are from a full ``make test`` run on the 2-core machine; refresh them now
and then from the JUnit report ``make test`` writes::

    .venv/bin/python -m tests.file_durations out/junit.xml > /tmp/durations.txt

and paste the lines into :data:`SECONDS`. A stale or missing entry costs time, never
a result.

The seconds below are of a run with the suite's JVM options (C1, SerialGC and class-data
archives: tests/spark_jvm.py, tests/kafka_jvm.py), which shortened the Spark files:
``pytest -n 0 -p no:randomly tests/integration/test_spark_sink.py``, before (A) and
after (B), interleaved on 2026-11-29 at a changing load: A 398 s (1 test past its
180 s timeout), B 261 s; A 611 s (3 past it), B 106 s; A 210 s, B 106 s (all passed).
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter

SECONDS: dict[str, float] = {
    # from the profiled `make test` of 2026-12-01 17:38 UTC (ef703fa, a fresh clone, 4
    # workers on the 2-core machine: 2519 passed, 2 skipped in 1614 s, the cores 89% busy)
    'tests/integration/test_spark_exactly_once.py': 240,
    'tests/integration/test_chaos.py': 205,
    'tests/integration/test_compat_matrix.py': 201,
    'tests/integration/test_debezium_schema.py': 196,
    'tests/integration/test_pyiceberg_appends.py': 193,
    'tests/integration/test_final_deletions.py': 185,
    'tests/integration/test_lake_s3.py': 183,
    'tests/integration/test_rest_catalog_oauth.py': 169,
    'tests/integration/test_spark_jvm_death.py': 157,
    'tests/integration/test_peer_benches.py': 153,
    'tests/integration/test_append_pace.py': 138,
    'tests/integration/test_rest_catalog.py': 138,
    'tests/behaviour/test_worker_behaviour.py': 137,
    'tests/integration/test_cluster_faults.py': 132,
    'tests/integration/test_merge_faults.py': 124,
    'tests/integration/test_merge.py': 117,
    'tests/integration/test_maintenance_owner.py': 93,
    'tests/integration/test_group_processes.py': 92,
    'tests/integration/test_avro_pipeline.py': 92,
    'tests/integration/test_tables_maintain.py': 89,
    'tests/integration/test_pyiceberg_fold.py': 86,
    'tests/integration/test_control_api.py': 86,
    'tests/integration/test_backlog_appends.py': 83,
    'tests/integration/test_kafka_auth.py': 82,
    'tests/integration/test_jdbc_sink.py': 75,
    'tests/integration/test_sink_health.py': 74,
    'tests/integration/test_spark_benches.py': 74,
    'tests/integration/test_schema_rows_bench.py': 70,
    'tests/integration/test_broker_restart.py': 69,
    'tests/integration/test_deletes.py': 69,
    'tests/integration/test_schema_rows.py': 67,
    'tests/integration/test_pyiceberg_no_jvm.py': 67,
    'tests/integration/test_lake_catalogs.py': 65,
    'tests/integration/test_schema_rows_keys.py': 64,
    'tests/integration/test_slow_sink_kill.py': 63,
    'tests/integration/test_routes_iceberg.py': 60,
    'tests/integration/test_tables_scheduled.py': 59,
    'tests/integration/test_partition_spec.py': 57,
    'tests/integration/test_ops_tools.py': 57,
    'tests/integration/test_commit_modes.py': 56,
    'tests/integration/test_spark_cluster.py': 55,
    'tests/integration/test_change_order.py': 53,
    'tests/integration/test_record_columns.py': 53,
    'tests/integration/test_routes.py': 53,
    'tests/integration/test_demo.py': 53,
    'tests/integration/test_dead_letter_topic.py': 51,
    'tests/integration/test_stop.py': 49,
    'tests/unit/test_jars_fetch.py': 49,
    'tests/integration/test_schema_rows_formats.py': 48,
    'tests/integration/test_partition_retries.py': 48,
    'tests/integration/test_latency_bench.py': 47,
    'tests/integration/test_tables_migrate.py': 46,
    'tests/integration/test_spark_pipeline.py': 46,
    'tests/integration/test_registry_formats_tables.py': 45,
    'tests/integration/test_jdbc_exactly_once.py': 45,
    'tests/integration/test_topic_recreated.py': 44,
    'tests/integration/test_registry_404.py': 43,
    'tests/integration/test_http_pipeline.py': 40,
    'tests/integration/test_revoke_fence.py': 36,
    'tests/integration/test_failure_modes.py': 35,
    'tests/integration/test_batch_bomb.py': 33,
    'tests/integration/test_jsonl_torn_write.py': 33,
    'tests/integration/test_start_from.py': 32,
    'tests/integration/test_pyiceberg_expiry.py': 27,
    'tests/integration/test_topic_patterns.py': 27,
    'tests/integration/test_kafka_security.py': 27,
    'tests/unit/test_hostile_bench.py': 26,
    'tests/integration/test_lag_definition.py': 25,
    'tests/integration/test_schema_rows_nested.py': 23,
    'tests/integration/test_hostile_values.py': 23,
    'tests/integration/test_registry_formats.py': 23,
    'tests/integration/test_nested_types.py': 23,
    'tests/integration/test_topic_pattern_listing.py': 22,
    'tests/integration/test_plugin_kit.py': 21,
    'tests/unit/test_jsonfast.py': 21,
    'tests/integration/test_fanout.py': 20,
    'tests/unit/test_sandbox.py': 20,
    'tests/integration/test_spark_sink.py': 19,
    'tests/integration/test_tracing.py': 19,
    'tests/integration/test_catalog_tls.py': 19,
    'tests/integration/test_spark_fence.py': 19,
    'tests/integration/test_jdbc_upsert.py': 18,
    'tests/integration/test_tracing_events.py': 16,
    'tests/integration/test_translated_configs_run.py': 16,
    'tests/unit/test_helm_chart.py': 15,
    'tests/unit/test_hostile_bytes.py': 14,
    'tests/integration/test_dead_letter_disk_full.py': 13,
    'tests/integration/test_spark_jvm_archive.py': 13,
    'tests/actors/test_lost_membership.py': 10,
    'tests/integration/test_tracing_bench.py': 10,
    'tests/unit/test_fuzz.py': 9,
    'tests/integration/test_filters.py': 8,
    'tests/integration/test_oidc_tokens.py': 8,
    'tests/integration/test_bench_datahub.py': 8,
    'tests/unit/test_pyiceberg_transaction.py': 8,
    'tests/integration/test_status.py': 7,
    'tests/integration/test_merge_staged_nullability.py': 7,
    'tests/integration/test_topic_created_late.py': 7,
    'tests/integration/test_kafka_semantics.py': 7,
    'tests/unit/test_status_server.py': 7,
    'tests/integration/test_kafka_cluster_ports.py': 6,
    'tests/integration/test_dlq_replay_sinks.py': 6,
    'tests/unit/test_table_flush.py': 6,
    'tests/integration/test_pyiceberg_tables.py': 6,
    'tests/integration/test_three_lines.py': 5,
    'tests/integration/test_datahub_mcp_pipeline.py': 5,
    'tests/integration/test_read_only_root.py': 4,
    'tests/integration/test_catalog_identity_provider.py': 4,
    'tests/unit/test_validate_partition_schema.py': 4,
    'tests/unit/test_schema_registry.py': 4,
    'tests/integration/test_kafka_jvm_archive.py': 3,
    'tests/unit/test_broker_matrix.py': 3,
    'tests/unit/test_validate_sinks.py': 3,
    'tests/actors/test_start_outages.py': 3,
    'tests/integration/test_staging_fence.py': 3,
    'tests/unit/test_spark_lost_lookup.py': 2,
    'tests/unit/test_http_sink_statuses.py': 2,
    'tests/unit/test_http_sink.py': 2,
    'tests/unit/test_package_edges.py': 2,
    'tests/unit/test_avro_fast.py': 2,
    'tests/unit/test_docs.py': 2,
    'tests/unit/test_fuzz_control.py': 2,
    'tests/unit/test_protobuf_format.py': 2,
    'tests/integration/test_pyiceberg_fold_write.py': 2,
    'tests/unit/test_quick_start.py': 2,
    'tests/unit/test_datahub_mcl_usual_row.py': 2,
    'tests/unit/test_table_jobs_edges.py': 2,
    'tests/unit/test_type_tree.py': 2,
    'tests/unit/test_registry_compat.py': 2,
    'tests/unit/test_worker_owners.py': 2,
    'tests/actors/test_fanout_worker.py': 2,
    'tests/unit/test_validate_imports.py': 2,
    'tests/actors/test_worker_security.py': 2,
    'tests/unit/test_http_sink_security.py': 1,
    'tests/unit/test_deadletter.py': 1,
    'tests/unit/test_schema_registry_security.py': 1,
    'tests/integration/test_fault_watch.py': 1,
    'tests/unit/test_plugin_kit.py': 1,
    'tests/unit/test_json_schema_format.py': 1,
    'tests/unit/test_debezium.py': 1,
    'tests/unit/test_avro_not_found.py': 1,
    'tests/unit/test_wait_helpers.py': 1,
    'tests/unit/test_fuzz_formats.py': 1,
    'tests/unit/test_cli.py': 1,
    'tests/unit/test_validate.py': 1,
    'tests/unit/test_dlq_replay_order.py': 1,
    'tests/actors/test_drain_empty_assignment.py': 1,
    'tests/unit/test_samples.py': 1,
}


def file_of(classname: str) -> str:
    """``tests.integration.test_x`` (or ``...test_x.TestClass``) -> its file's path."""
    parts = classname.split(".")
    last = max((i for i, part in enumerate(parts) if part.startswith("test_")), default=-1)
    return "/".join(parts[:last + 1]) + ".py"


def from_junit(path: str) -> Counter[str]:
    """Seconds per test file in a JUnit report (setup, call and teardown)."""
    seconds: Counter[str] = Counter()
    for case in ET.parse(path).iter("testcase"):  # noqa: S314 - our own report
        seconds[file_of(case.get("classname", ""))] += float(case.get("time", 0))
    return seconds


def main(argv: list[str]) -> int:
    for name, total in from_junit(argv[1]).most_common():
        if total >= 1:
            sys.stdout.write(f"    {name!r}: {total:.0f},\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
