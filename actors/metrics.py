"""Prometheus metrics of the actors.

Latency and size distributions are observed where they happen (histograms, thread-safe);
counters and per-partition gauges are not kept twice: they are read from the workers'
own state at scrape time (:meth:`Worker.snapshot`), on the event loop, so no actor
shares mutable state with the HTTP thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from actors.worker_status import PARTITION_STATES, WorkerStatus

_LABELS = ("group", "topic")
_COUNTERS = {
    # snapshot stat -> (metric name, help)
    "consumed": ("kstage_messages_consumed", "Messages fetched from Kafka."),
    "processed": ("kstage_messages_processed", "Messages processed by the processor."),
    "failed": ("kstage_messages_failed", "Messages whose processing or sink write failed."),
    "retried": ("kstage_messages_retried", "Retries of failed messages."),
    "dead_lettered": ("kstage_messages_dead_lettered", "Messages written to the dead-letter file."),
    "filtered": ("kstage_messages_filtered", "Messages the topic's filter kept from the "
                 "processor (committed as done; also counted in processed)."),
    "as_columns": ("kstage_messages_as_columns", "Messages decoded and mapped as columns, a "
                   "whole batch at once (also counted in processed)."),
    "committed": ("kstage_commits", "Successful offset commits."),
    "paused": ("kstage_pauses", "Times the worker paused its partitions (backpressure)."),
}


class Metrics:
    """The process's metrics registry and the histograms actors observe into."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.batch_size = Histogram(
            "kstage_batch_size", "Messages per fetched partition batch.", _LABELS,
            buckets=(1, 10, 50, 100, 250, 500, 1000, 5000), registry=self.registry)
        self.sink_write_seconds = Histogram(
            "kstage_sink_write_seconds", "Duration of durable sink writes (flushes).",
            (*_LABELS, "sink"), registry=self.registry)
        self.commit_seconds = Histogram(
            "kstage_commit_seconds", "Duration of offset commits.", _LABELS,
            registry=self.registry)

        self.merge_seconds = Histogram(
            "kstage_merge_seconds", "Duration of merges of a staging into its final table.",
            ("table",), buckets=(1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800),
            registry=self.registry)
        self.merge_failures = Counter(
            "kstage_merge_failures", "Merges that failed (retried at the next interval).",
            ("table",), registry=self.registry)
        self.merge_last_success = Gauge(
            "kstage_merge_last_success_timestamp_seconds",
            "Unix time of the last successful merge of the table.", ("table",),
            registry=self.registry)
        self.merge_final_rows = Gauge(
            "kstage_merge_final_rows", "Rows of the final table after the last merge.",
            ("table",), registry=self.registry)
        self.fenced_appends = Counter(
            "kstage_fenced_appends", "Staging appends the commit-time fence refused: "
            "another writer had appended their partitions since this writer's position "
            "(nothing of them written; retried from the table's offsets).", ("table",),
            registry=self.registry)
        self.table_commit_seconds = Histogram(
            "kstage_table_commit_seconds", "Duration of each staging append of the table "
            "that landed (its files and its Iceberg commit, retries after a conflict "
            "included), caught up or a backlog's.", ("table",),
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64), registry=self.registry)
        self.table_commit_latency = Gauge(
            "kstage_table_commit_latency_seconds", "The latency of the table's appends of "
            "caught-up rows that the pace of its appends follows (a moving average of "
            "their durations, weighted toward the newest).", ("table",),
            registry=self.registry)
        self.table_append_interval = Gauge(
            "kstage_table_append_interval_seconds", "The time between the starts of the "
            "table's appends of caught-up rows that the writer aims at: the latency and "
            "the rest that keeps a row's wait near spark.freshness_target_s, at least "
            "1/spark.max_commits_per_s.", ("table",), registry=self.registry)
        self.maintenance_failures = Counter(
            "kstage_maintenance_failures", "Scheduled table maintenance runs that failed "
            "(retried at the next interval).", ("table",), registry=self.registry)
        self.table_data_files = Gauge(
            "kstage_table_data_files", "Data files in the current snapshot of a staging "
            "table this process maintains (read every 5 s by the background fold).",
            ("table",), registry=self.registry)
        self.table_folds = Counter(
            "kstage_table_folds", "Background folds of a staging table's small data files "
            "into target-size files.", ("table",), registry=self.registry)
        self.maintenance_last_success = Gauge(
            "kstage_maintenance_last_success_timestamp_seconds",
            "Unix time of the last successful maintenance of the table.", ("table",),
            registry=self.registry)

    def watch(self, snapshot: Callable[[], list[WorkerStatus]]) -> None:
        """Expose counters and gauges computed from ``snapshot()`` at each scrape."""
        self.registry.register(_SnapshotCollector(snapshot))


class _SnapshotCollector(Collector):
    def __init__(self, snapshot: Callable[[], list[WorkerStatus]]) -> None:
        self._snapshot = snapshot

    def describe(self) -> Iterable[Any]:
        return []  # names are dynamic: never collect at registration (it runs a snapshot)

    def collect(self) -> Iterable[Any]:
        workers = self._snapshot()
        counters = {k: CounterMetricFamily(n, h, labels=_LABELS) for k, (n, h) in
                    _COUNTERS.items()}
        restarts = CounterMetricFamily("kstage_worker_restarts", "Worker restarts.",
                                       labels=_LABELS)
        part = (*_LABELS, "partition")
        committed = GaugeMetricFamily("kstage_committed_offset",
                                      "Last committed offset (next to read).", labels=part)
        high_water = GaugeMetricFamily("kstage_high_water",
                                       "Fetch high-water mark of the partition.", labels=part)
        lag = GaugeMetricFamily("kstage_lag", "High-water mark minus the committable offset "
                                "(else the committed one), as `kstage lag` computes it.",
                                labels=part)
        paused = GaugeMetricFamily("kstage_paused_partitions",
                                   "Partitions currently paused.", labels=_LABELS)
        in_flight = GaugeMetricFamily("kstage_in_flight_messages",
                                      "Messages fetched but not yet durable.", labels=_LABELS)
        topic_paused = GaugeMetricFamily(
            "kstage_topic_paused", "1 while an operator has the topic paused (the control "
            "API), else 0.", labels=_LABELS)
        stalled = GaugeMetricFamily(
            "kstage_stalled_partitions", "Partitions with lag whose offset has not moved for "
            "service.stall_after_s, neither paused nor retrying (/healthz 503).",
            labels=_LABELS)
        states = GaugeMetricFamily(
            "kstage_partitions", "Assigned partitions in each state of /status (running, "
            "retrying, no_leader: no broker leads it, paused, refused); every state is "
            "shown, 0 included.", labels=(*_LABELS, "state"))
        for w in workers:
            labels = [w["group"], w["topic"]]
            counted = dict.fromkeys(PARTITION_STATES, 0)
            for p in w["partitions"]:
                counted[p["state"]] = counted.get(p["state"], 0) + 1
            for state, count in counted.items():
                states.add_metric([*labels, state], count)
            for key, family in counters.items():
                family.add_metric(labels, w["stats"].get(key, 0))
            restarts.add_metric(labels, w["restarts"])
            paused.add_metric(labels, w["paused_partitions"])
            in_flight.add_metric(labels, w["in_flight"])
            topic_paused.add_metric(labels, 1 if w.get("paused") else 0)
            stalled.add_metric(labels, w.get("stalled_partitions", 0))
            for p in w["partitions"]:
                plabels = [*labels, str(p["partition"])]
                if p["committed"] is not None:
                    committed.add_metric(plabels, p["committed"])
                if p["high_water"] is not None:
                    high_water.add_metric(plabels, p["high_water"])
                if p["lag"] is not None:  # unknown (no offset yet) is not shown as a backlog
                    lag.add_metric(plabels, p["lag"])
        yield from counters.values()
        yield from (restarts, committed, high_water, lag, paused, in_flight, topic_paused,
                    stalled, states)
