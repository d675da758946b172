"""The brokers of the suite and which tests run on which: one suite, two brokers.

Every test that talks to a broker asks for the fixture ``broker`` (the bootstrap address
of a shared broker) or ``broker_kind`` (to start a broker of its own with
:func:`dedicated_broker`). Both are parametrized here, in one place:

- ``tansu``: the embedded default (Tansu), one per pytest process.
- ``kafka``: Apache Kafka 4.x (KRaft, one node) from its Maven jars, one JVM shared by
  every pytest process of the session, stopped by the session's main process at its end.

Every such test runs on both brokers unless :data:`TANSU_ONLY` names its module (or the
test itself, ``module::test``), with the reason; :data:`ALSO_ON_KAFKA` names the tests of
such a module that run on both all the same. The rule:

- A test runs on both brokers when the broker takes part in what it proves: offsets
  committed or held back, a rebalance or a revoke, a group of processes, a broker or
  network fault, fetch and produce behaviour (what the broker stamps or carries, writes
  to a dead-letter topic, transactions), and every test of a row of the fault table
  (docs/operations.md) whose brokers are named there.
- A test runs on Tansu only when the broker merely feeds it the records: decoding,
  schemas, table types and their evolution, the merge, maintenance, the plugin kit,
  tracing's spans, sink-side retries whose commit path other tests prove on both. Its
  entry says why, and names the test that proves its broker part on both when there is
  one. Only the Apache Kafka run goes: every test runs on Tansu.

tests/unit/test_broker_matrix.py keeps the rule from rotting: the fault table's tests, the
commit and failure modes and every rebalance and revoke test run on both; every entry
names a broker test and says why; every test a reason names exists and runs on both.

A matrix of broker x format x append path runs pairwise (:data:`PAIRWISE`): each of its
cases once, the brokers alternating, so every format and every append path still runs on
both. Tests on Apache Kafka carry the marker ``apache_kafka``: ``pytest -m "not
apache_kafka"`` runs the suite on Tansu alone, ``pytest -m apache_kafka`` the Apache
Kafka half.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from service.broker import EmbeddedBroker
from tests.apache_kafka import KafkaCluster
from tests.file_lock import locked
from tests.s3_server import S3Server

TANSU, KAFKA = "tansu", "kafka"
BROKER_KINDS = (TANSU, KAFKA)

# Broker tests that run on Tansu only, and why (the rule: this module's docstring): Spark's
# own guarantees, where the broker only feeds a JVM that costs a minute or more per test on
# this 2-core machine, and kstage's own work on records the broker merely feeds. Everything
# else that asks for ``broker`` or ``broker_kind`` runs on both.
# tests/unit/test_broker_matrix.py checks that every test the fault table names, and the
# commit and failure mode modules, run on Apache Kafka, and that each test a reason below
# names runs on both.
_SPARK = "Spark's staging and merge; the broker only feeds the JVM"
TANSU_ONLY: dict[str, str] = {
    "test_spark_exactly_once": f"{_SPARK} (exactly-once merge after SIGKILL)",
    "test_spark_pipeline": f"{_SPARK} (real schemas into staging tables)",
    "test_spark_cluster": f"{_SPARK} (a standalone Spark cluster)",
    "test_spark_jvm_death::test_jvm_death_beyond_max_session_restarts_exits_1":
        f"{_SPARK} (the restart limit; the JVM death itself runs on both)",
    "test_lake_s3": f"{_SPARK} (an S3 warehouse, its server down or slow)",
    "test_lake_catalogs": f"{_SPARK} (a PostgreSQL catalog shared or down)",
    "test_rest_catalog": f"{_SPARK} (an Iceberg REST catalog)",
    "test_append_pace": f"{_SPARK} (the appends' pace before a slow REST catalog)",
    "test_catalog_tls": f"{_SPARK} (the catalog's TLS on both append paths)",
    "test_merge": f"{_SPARK} (the merge into final tables)",
    "test_tables_maintain": f"{_SPARK} (table maintenance and its output)",
    # the tables' own work (types, specs, keys, deletes, pyiceberg's appends): the
    # broker only feeds them; their group and commit faults run on both (test_*_exactly_
    # once, test_pyiceberg_appends' kills and outages, the fault table's rows)
    "test_partition_spec": "the table's partition spec and properties as configured, "
    "refused or kept (its create and the first append); the broker only feeds it (the "
    "spec of a new table runs on both: PAIRWISE)",
    "test_nested_types": "the table sinks' nested types (Spark, pyiceberg, PostgreSQL) "
    "from a plugin's columns; the broker only feeds them (the writer schemas' type map "
    "runs on both: test_schema_rows_formats, PAIRWISE)",
    "test_record_columns::test_record_columns_and_money_land_typed_in_every_sink":
        "the record columns' and decimals' types in every sink; the broker only feeds "
        "them (what the broker stamps runs on both: the timestamp type's test)",
    "test_record_columns::test_an_avro_key_lands_as_its_json_text_and_a_bad_one_is_"
    "poison": "kstage's decoding of an Avro key; the broker hands the key's bytes over",
    "test_jdbc_upsert": "the JDBC upsert's newest row per key; the broker only feeds it "
    "(a SIGKILL after a table commit runs on both: test_jdbc_exactly_once)",
    "test_three_lines": "the docs' three-line configuration landing a topic; the broker "
    "only feeds the table (schema_rows runs on both: PAIRWISE)",
    "test_rest_catalog_oauth::test_refused_credentials_at_start_exit_2_and_an_outage_at_"
    "start_is_waited_out": "the REST catalog's login asked before any worker starts; the "
    "broker only feeds the appends after it (the login failing mid-run runs on both: "
    "PAIRWISE)",
    "test_pyiceberg_appends::test_drain_lands_every_event_once_and_merges":
        "pyiceberg's append and the merge of a drain; the broker only feeds them (its "
        "kills, races and catalog outages run on both)",
    "test_pyiceberg_appends::test_drain_to_an_s3_warehouse":
        "pyiceberg's append to an S3 warehouse; the broker only feeds it",
    "test_schema_rows::test_a_recursive_schema_is_refused_at_start_with_the_cycle":
        "a writer schema refused at start, before anything is read from the broker",
    "test_schema_rows::test_the_table_is_made_at_start_from_the_subjects_latest_schema":
        "the table made from the registry's latest schema at start, before any message",
    "test_control_api::test_a_write_that_hangs_with_lag_behind_it_fails_liveness_until_it_moves":
        "kstage's own stall watch over a hanging HTTP write; the broker only feeds it",
    "test_control_api::test_a_fresh_groups_first_write_that_hangs_fails_liveness_until_it_"
    "moves": "kstage's own stall watch over a hanging first HTTP write; the broker only "
    "feeds it (the worker's part runs on both: test_worker_behaviour)",
    # kstage's own work on records the broker merely feeds (issue 36: the Apache Kafka
    # runs of these took 153 s of the fresh-clone run's 1268 s on Apache Kafka)
    "test_pyiceberg_no_jvm::test_a_run_starts_no_jvm_resumes_after_sigkill_and_its_table_"
    "merges": "a run without a JVM (pyiceberg's appends, then the merge of the table); the "
    "broker only feeds it (resuming where the table holds each partition after a SIGKILL "
    "runs on both: test_pyiceberg_appends::test_sigkill_after_the_table_commit_resumes_"
    "from_the_table; the catalog down at start: test_pyiceberg_no_jvm::test_catalog_down_"
    "when_the_run_starts_is_retried_and_shown_in_readyz)",
    "test_pyiceberg_fold::test_a_fold_beside_pyiceberg_appends_carries_the_offsets_and_"
    "a_kill_resumes_once": "the fold of a table pyiceberg appends to, and the resume "
    "after a SIGKILL; the broker only feeds it (resuming where the table holds each "
    "partition after a SIGKILL runs on both: test_pyiceberg_appends::test_sigkill_after_"
    "the_table_commit_resumes_from_the_table)",
    "test_pyiceberg_fold::test_pyiceberg_folds_without_a_jvm_into_a_replace_that_carries_"
    "the_offsets": "pyiceberg's fold of a table pyiceberg appends to, and the resume "
    "after a SIGKILL; the broker only feeds it (a process killed mid-fold resumes on "
    "both: test_pyiceberg_fold::test_a_process_killed_while_its_fold_reads_commits_none_"
    "of_it_and_lands_once)",
    "test_deletes::test_kstage_run_lands_deletes_from_the_broker_in_every_sink":
        "Debezium's deletes and tombstones as deletions in every sink; the broker only "
        "feeds them (a tombstone from either broker deletes in the final merge: "
        "test_schema_rows_keys::test_the_final_merge_keeps_the_newest_row_per_key_and_"
        "tombstones_delete, PAIRWISE)",
    "test_avro_pipeline::test_every_builtin_event_type_lands_as_its_rows":
        "the built-in processors' rows of each Avro event type; the broker only feeds "
        "them (the registry's outage, nothing committed, runs on both: test_avro_pipeline::"
        "test_bad_input_is_dead_lettered_and_registry_outage_is_not)",
    "test_avro_pipeline::test_wherehows_16_byte_ids_and_an_evolved_writer_schema":
        "WhereHows' 16-byte schema ids and an evolved writer schema, decoded; the broker "
        "only feeds them",
    "test_routes::test_a_message_with_no_route_or_past_max_tables_is_poison":
        "kstage's route refusing a message (poison, to the dead-letter file); the broker "
        "only feeds it (a routed topic's commits run on both: test_routes_iceberg)",
    "test_plugin_kit": "the plugin kit (run_pipeline, a scaffolded plugin installed, "
    "listed and run); the broker only feeds it",
    "test_control_api::test_a_token_from_a_secret_file_with_its_newline_opens_the_control_"
    "api": "the control API's token read from a secret file; the broker only feeds the "
    "running service",
    "test_tracing::test_tracing_on_from_the_environment_over_http":
        "kstage's spans and their OTLP exporter; the broker only carries the producer's "
        "traceparent header (a trace through the dead-letter topic runs on both: "
        "test_tracing::test_spans_follow_the_producers_trace_to_the_api_and_the_dead_letter)",
    "test_tracing::test_tracing_over_grpc": "kstage's spans over OTLP/gRPC; the broker only "
    "carries the traceparent header (test_tracing::test_spans_follow_the_producers_trace_"
    "to_the_api_and_the_dead_letter runs on both)",
    "test_tracing::test_tracing_off_kstage_run_imports_no_opentelemetry":
        "which modules kstage imports with tracing off; the broker only feeds the run",
    "test_tracing_events": "the spans of each HTTP request and of each event; the broker "
    "only carries the traceparent headers (test_tracing::test_spans_follow_the_producers_"
    "trace_to_the_api_and_the_dead_letter runs on both)",
    "test_translated_configs_run": "a configuration translated from DataHub Actions' or "
    "WhereHows' runs; the broker only feeds it",
    "test_datahub_mcp_pipeline": "DataHub's proposals decoded into their table, poison to "
    "the dead-letter file; the broker only feeds them",
    "test_read_only_root": "kstage on a read-only root filesystem (it writes only where "
    "it is told); the broker only feeds it",
    "test_filters": "the topic filter's choice of rows; the broker only feeds it (filtered "
    "offsets committed on both: test_worker_behaviour::test_the_topic_filter_commits_what_"
    "it_filters_and_only_matching_rows_land)",
    "test_http_pipeline::test_5xx_retried_400_dead_lettered_timeout_retried_retry_after_"
    "honoured": "the HTTP sink's retries, waits and dead letters; the broker only feeds it "
    "(the commit held back while an API fails runs on both: test_sink_health)",
}

# Tests of the modules above that run on both brokers all the same: each covers a row of
# the fault table (docs/operations.md) with a broker in it (a Kafka commit after the
# table's, a group of two processes, the group's offsets read by maintenance, Kafka
# commits held back while S3 or the catalog is down).
ALSO_ON_KAFKA: frozenset[str] = frozenset({
    "test_spark_exactly_once::test_sigkill_between_the_table_commit_and_the_kafka_commit_"
    "writes_nothing_twice",
    "test_spark_exactly_once::test_two_processes_in_one_group_append_to_one_table_"
    "exactly_once",
    "test_lake_s3::test_s3_down_during_appends_is_retried_and_loses_nothing",
    "test_lake_s3::test_s3_slow_slows_appends_with_backpressure_and_loses_nothing",
    "test_lake_catalogs::test_postgres_catalog_down_during_appends_is_retried_and_loses_"
    "nothing",
    "test_tables_maintain::test_kafka_unreadable_expires_nothing_and_says_why",
    "test_tables_maintain::test_maintenance_while_another_session_appends_loses_nothing",
})



@dataclass(frozen=True)
class Pairwise:
    """A test's matrix run pairwise: its axes (parameter names, beside ``broker_kind``)
    and its cases, each the broker first, then a value per axis."""

    axes: tuple[str, ...]
    cases: tuple[tuple[str, ...], ...]


# Matrices of broker x format x append path, run pairwise instead of as their product.
# The broker only feeds these tests (kstage's schema_rows, its type map and its two
# append paths are what they prove); what the broker does differently (its record
# batches, offsets, headers, timestamps) reaches the table the same way whichever format
# or path follows. So each case (a format on an append path) runs once, and the brokers
# alternate over the cases so that each format, and each append path, runs on both
# brokers: the compatibility matrix "passes on both brokers" (issue 34) cell by cell of
# the docs' table (a format's column), and a broker-specific fault in either path would
# still show. Full product: 12 runs of the compatibility matrix, 4 of each single-format
# test; pairwise: 6 and 2. tests/unit/test_broker_matrix.py checks the coverage.
_PATHS = Pairwise(("appends",), ((TANSU, "pyiceberg"), (KAFKA, "spark")))
_PATHS_SWAPPED = Pairwise(("appends",), ((KAFKA, "pyiceberg"), (TANSU, "spark")))
PAIRWISE: dict[str, Pairwise] = {
    # a covering array of strength 2 over (broker, format, append path): every pair of
    # values of two axes runs, in 6 runs
    "test_compat_matrix::test_compatibility_matrix": Pairwise(("fmt", "appends"), (
        (TANSU, "avro", "pyiceberg"), (KAFKA, "avro", "spark"),
        (KAFKA, "protobuf", "pyiceberg"), (TANSU, "protobuf", "spark"),
        (TANSU, "json_schema", "pyiceberg"), (KAFKA, "json_schema", "spark"))),
    # the type map of each format: the two tests together are the same covering array
    # (Protobuf's and JSON Schema's on both brokers, each path on both)
    "test_schema_rows_formats::test_a_protobuf_topic_lands_by_configuration": _PATHS,
    "test_schema_rows_formats::test_a_json_schema_topic_lands_by_configuration":
        _PATHS_SWAPPED,
    # Avro's schema evolution, by configuration and after a restart; nested; merge keys;
    # a partition spec: one format each, each path once, each broker once
    "test_schema_rows::test_avro_topics_land_and_evolve_by_configuration": _PATHS,
    "test_schema_rows::test_after_a_restart_writer_schemas_are_judged_against_the_table_"
    "as_it_is": _PATHS_SWAPPED,
    "test_schema_rows_nested::test_nested_avro_lands_and_evolves_inside_structs": _PATHS,
    "test_schema_rows_keys::test_the_final_merge_keeps_the_newest_row_per_key_and_"
    "tombstones_delete": _PATHS_SWAPPED,
    "test_partition_spec::test_the_table_is_created_with_the_configured_spec_and_"
    "properties": _PATHS,
    # a Debezium source's column added midway, on each append path once: Spark's on
    # Tansu, pyiceberg's (no JVM: its appends, its evolution, the merge) on Apache Kafka
    "test_debezium_schema::test_a_source_column_added_midway_reaches_staging_and_final_"
    "tables": _PATHS_SWAPPED,
    # a REST catalog's OAuth2 login on both append paths: the token's refresh and the
    # identity provider's outage, each path once, each broker once per path
    "test_rest_catalog_oauth::test_tokens_expire_and_are_refreshed_while_appends_land_"
    "once": _PATHS,
    "test_rest_catalog_oauth::test_the_identity_provider_down_is_named_retried_and_"
    "recovered": _PATHS_SWAPPED,
}

# The environment variable naming the directory the session's processes share (made by
# the main process in pytest_configure; xdist workers inherit it).
SHARED_DIR_ENV = "PYTEST_KSTAGE_SHARED_DIR"
_STATE = "apache-kafka.json"
# The shared node this process started: referenced until the process ends, so its Popen
# is never collected (ResourceWarning: still running) while other processes use it.
_OWNED: list[KafkaCluster] = []


def kinds_for(module: str, test: str) -> tuple[str, ...]:
    """The brokers test ``test`` (its function name) of ``module`` (its base name) runs
    on."""
    key = f"{module}::{test}"
    if key in ALSO_ON_KAFKA or key in PAIRWISE:
        return BROKER_KINDS
    only = module in TANSU_ONLY or key in TANSU_ONLY
    return (TANSU,) if only else BROKER_KINDS


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def shared_apache_kafka(shared: Path) -> str:
    """The bootstrap address of the session's one Apache Kafka node, started by the first
    process that asks (under a lock); :func:`stop_shared` ends it."""
    with locked(shared / "apache-kafka.lock"):
        state = shared / _STATE
        if state.exists():
            known = json.loads(state.read_text())
            if all(_alive(pid) for pid in known["pids"]):
                return str(known["bootstrap"])
        cluster = KafkaCluster(Path(tempfile.mkdtemp(prefix="apache-kafka-", dir=shared)),
                               size=1, heap_mb=384).start()
        _OWNED.append(cluster)
        state.write_text(json.dumps({"bootstrap": cluster.bootstrap,
                                     "pids": [n.pid for n in cluster.nodes],
                                     "directory": str(cluster.directory)}))
        return cluster.bootstrap


def stop_shared(shared: Path) -> None:
    """Kill the shared node (if one was started) and remove the shared directory."""
    for cluster in _OWNED:
        cluster.kill()
    state = shared / _STATE
    if state.exists():
        for pid in json.loads(state.read_text())["pids"]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    shutil.rmtree(shared, ignore_errors=True)


class Restartable(Protocol):
    """A broker a test owns: killed (SIGKILL) and started again on the same address."""

    @property
    def bootstrap(self) -> str: ...

    @property
    def pid(self) -> int | None: ...

    def start(self) -> object: ...

    def stop(self) -> None: ...


class _KafkaNodeBroker:
    """A one-node cluster seen as a :class:`Restartable` (its data survives a restart)."""

    def __init__(self, cluster: KafkaCluster) -> None:
        self._cluster = cluster
        self._node = cluster.nodes[0]

    @property
    def bootstrap(self) -> str:
        return self._node.bootstrap

    @property
    def pid(self) -> int | None:
        return self._node.pid

    def start(self) -> _KafkaNodeBroker:
        self._node.start()
        self._node.wait_listening()
        return self

    def stop(self) -> None:
        self._node.kill()


@contextlib.contextmanager
def dedicated_broker(kind: str, directory: Path, *, persistent: bool = False
                     ) -> Iterator[Restartable]:
    """A broker of ``kind`` for one test, killed at exit. ``persistent``: topics, records
    and committed offsets survive :meth:`Restartable.stop` and ``start`` (Tansu on a
    local S3 server; Apache Kafka always keeps its log directory)."""
    directory.mkdir(parents=True, exist_ok=True)
    if kind == KAFKA:
        with KafkaCluster(directory / "apache-kafka", size=1) as cluster:
            yield _KafkaNodeBroker(cluster)
    elif persistent:
        with (S3Server(directory / "s3.log") as s3,
              EmbeddedBroker(log_path=directory / "broker.log", storage_engine="s3://tansu/",
                             env=s3.broker_env) as tansu):
            yield tansu
    else:
        with EmbeddedBroker(log_path=directory / "broker.log") as tansu:
            yield tansu
