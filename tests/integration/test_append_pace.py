"""Staging appends that follow a slow REST catalog (``spark.freshness_target_s``,
``spark.max_commits_per_s``): ``kstage run`` (spark sink, ``appends: spark``) writes
through Project Nessie's Iceberg REST catalog (tests/rest_catalog.py) behind a proxy that
holds every table commit for 0.1 s, or 2.5 s (tests/catalog_proxy.py), while a topic is
fed at a steady rate. A second writer (pyiceberg, straight to Nessie, carrying the
table's Kafka offsets forward as kstage's appends do) commits rows of its own to the same
table right before some of kstage's commits reach the catalog, so those are answered 409
and retried.

Each case checks: every event in the table exactly once (and the second writer's rows
too), the catalog answered at least one 409, kstage's commits a second stay under
``max_commits_per_s`` (1 here: below what the appends' own latency would give at 0.1 s),
and the metrics: the latency the pace follows is at least the injected one, and the
interval it aims at is the rule's for that latency (read from ``/metrics`` as the appends
go, waiting for the values).

And a commit Iceberg retries after a 409 keeps the offsets another writer recorded in
between in the current snapshot (the fence makes them again on the retry's base; before,
it carried those of its first base): the second writer records offsets of its own.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from service.broker import free_port
from tests.catalog_proxy import CatalogProxy
from tests.fake_registry import FakeRegistry
from tests.integration.test_spark_exactly_once import TABLE, config, produce_events
from tests.kafkautil import KstageProcess, create_topic, status_port, unique, wait_until
from tests.rest_catalog import RestCatalog

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]

FRESHNESS_S, MAX_PER_S = 1.0, 1.0  # a cap below the appends' own pace at 0.1 s
RATE, FEED_S, PARTITIONS = 20, 20, 2  # events a second, for how long, partitions
FOREIGN = "second-writer"  # the _topic of the second writer's rows
SECOND_GROUP = "g-second"  # the group of its own offsets


@pytest.fixture(scope="module")
def rest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestCatalog]:
    with RestCatalog(tmp_path_factory.mktemp("rest")) as catalog:
        yield catalog


class SecondWriter:
    """Appends one row of its own right before some of kstage's commits are forwarded
    (the proxy's ``before_commit``): kstage's commit then finds the table moved (409).
    Its row is a copy of one of kstage's with another ``_topic`` and offset; its snapshot
    carries the table's ``kstage.offsets`` forward (Nessie serves the current snapshot
    only: a commit without them would hide kstage's offsets), and offsets of its own, as
    another kstage member's append records its partitions."""

    def __init__(self, rest: RestCatalog, name: str, appends: int) -> None:
        self.catalog, self.name, self.left = rest.reader(), name, appends
        self.seen = 0  # kstage's commits of the table so far
        self.rows = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, table: str | None) -> None:
        if table != TABLE:
            return
        with self._lock:
            self.seen += 1
            # every other commit from kstage's second on (its first finds no row to copy)
            if self.left <= 0 or self.seen < 2 or self.seen % 2:
                return
            self.left -= 1
            try:
                self._append()
            except Exception as exc:  # noqa: BLE001 - shown by the test's assertion
                self.errors.append(repr(exc))

    def _append(self) -> None:
        loaded = self.catalog.load_table(self.name)
        snapshot = loaded.current_snapshot()
        assert snapshot is not None
        row = loaded.scan(limit=1).to_arrow()
        row = row.set_column(row.schema.get_field_index("_topic"), "_topic",
                             pa.array([FOREIGN], row.schema.field("_topic").type))
        row = row.set_column(row.schema.get_field_index("_offset"), "_offset",
                             pa.array([10**6 + self.rows], pa.int64()))
        row = row.cast(loaded.schema().as_arrow())  # the table's required fields
        offsets = snapshot.summary.get("kstage.offsets") if snapshot.summary else None
        carried = {}
        if offsets is not None:  # and those of a kstage member of another group
            merged = json.loads(offsets)
            merged.setdefault(SECOND_GROUP, {})[FOREIGN] = {"0": self.rows + 1}
            carried = {"kstage.offsets": json.dumps(merged)}
        loaded.append(row, snapshot_properties=carried)
        self.rows += 1


def table_rows(rest: RestCatalog, name: str) -> Counter[tuple[str, int, int]]:
    catalog = rest.reader()
    if not catalog.table_exists(name):
        return Counter()
    rows = catalog.load_table(name).scan(
        selected_fields=("_topic", "_kafka_partition", "_offset")).to_arrow().to_pylist()
    return Counter((r["_topic"], r["_kafka_partition"], r["_offset"]) for r in rows)


async def scrape(base: str) -> dict[str, float]:
    """The staging table's pace metrics (sample name -> value), {} while none."""
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            text = (await client.get(f"{base}/metrics")).text
    except httpx.TransportError:
        return {}
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in ("kstage_table_commit_latency_seconds",
                               "kstage_table_append_interval_seconds",
                               "kstage_table_commit_seconds_count") \
                    and sample.labels.get("table", "").endswith(TABLE):
                found[sample.name] = sample.value
    return found


async def feed(broker: str, registry: FakeRegistry, topic: str, start: int,
               seconds: float) -> int:
    """RATE events a second for ``seconds``, numbered from ``start`` (even), four at a
    time (event i in partition i % 2, as the first ones)."""
    step, sent = 4, 0
    began = time.monotonic()
    while sent < RATE * seconds:
        await produce_events(broker, registry, topic, start + sent, step, PARTITIONS)
        sent += step
        await asyncio.sleep(max(0.0, began + sent / RATE - time.monotonic()))
    return sent


@dataclass
class Case:
    """What one run saw: the events fed (numbered from 0), the table's rows, the proxy,
    the second writer, the window of the feed and the pace metrics scraped meanwhile."""

    topic: str
    name: str
    events: int
    rows: Counter[tuple[str, int, int]]
    proxy: CatalogProxy
    second: SecondWriter
    fed: tuple[float, float]
    seen: list[dict[str, float]]


async def run_case(broker: str, tmp_path: Path, kstage: type[KstageProcess],
                   rest: RestCatalog, latency_s: float, *, feed_s: float) -> Case:
    """``kstage run`` through the proxy at ``latency_s``, fed ``feed_s`` seconds, the
    second writer appending before its 2nd, 4th and 6th commits; ended once every event is
    in the table."""
    topic, group, namespace = unique("pace"), unique("g-pace"), unique("pace").replace("-", "_")
    name = f"{namespace}.{TABLE}"
    with FakeRegistry() as registry, CatalogProxy(rest.uri, latency_s) as proxy:
        second = SecondWriter(rest, name, appends=3)
        proxy.before_commit = second
        await create_topic(broker, topic, partitions=PARTITIONS)
        cfg = config(tmp_path, broker, group, topic, registry, tmp_path / "unused",
                     flush_rows=10_000, merge_s=None)
        data = yaml.safe_load(cfg.read_text())
        # the proxy counts every commit of the table: the appends' alone here (no fold
        # of their small files: test_maintenance_owner)
        spark: dict[str, Any] = rest.spark(freshness_target_s=FRESHNESS_S,
                                           max_commits_per_s=MAX_PER_S,
                                           maintenance={"fold_files": None})
        spark["catalog"] |= {"uri": proxy.uri, "namespace": namespace}
        data["spark"] = spark
        data["service"] |= {"http_port": free_port(), "http_host": "127.0.0.1"}
        cfg.write_text(yaml.safe_dump(data))
        run = kstage(cfg)
        base = f"http://127.0.0.1:{await status_port(run)}"
        # the first events make the table (its creation is no commit the proxy holds)
        await produce_events(broker, registry, topic, 0, PARTITIONS, PARTITIONS)
        await wait_until(lambda: run.proc.poll() is not None or table_rows(rest, name),
                         timeout=120, what="the staging table's first rows")
        assert run.proc.poll() is None, run.output()

        seen: list[dict[str, float]] = []

        async def watch() -> None:
            while True:
                found = await scrape(base)
                if "kstage_table_append_interval_seconds" in found:
                    seen.append(found)
                await asyncio.sleep(0.5)

        watcher = asyncio.ensure_future(watch())
        fed_from = time.monotonic()
        events = PARTITIONS + await feed(broker, registry, topic, PARTITIONS, feed_s)
        await wait_until(
            lambda: run.proc.poll() is not None
            or sum(n for (t, _, _), n in table_rows(rest, name).items() if t == topic)
            >= events, timeout=60, what="every event in the staging table")
        fed_until = time.monotonic()

        def counted() -> bool:
            """A scrape counts every append the catalog accepted (the counter, not a
            sample of a moment: kstage counts an append once the catalog answered)."""
            landed = sum(1 for c in proxy.table_commits(TABLE) if c.status == 200)
            return len(seen) >= 3 and \
                seen[-1].get("kstage_table_commit_seconds_count", 0) >= landed

        await wait_until(counted, timeout=30, what="a scrape counting every landed append")
        watcher.cancel()
        assert run.proc.poll() is None, run.output()
        run.kill()
    return Case(topic, name, events, table_rows(rest, name), proxy, second,
                (fed_from, fed_until), seen)


@pytest.mark.parametrize("latency_s", [0.1, 2.5])
async def test_appends_follow_a_slow_catalog_exactly_once_under_the_cap(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], rest: RestCatalog,
        latency_s: float) -> None:
    case = await run_case(broker, tmp_path, kstage, rest, latency_s, feed_s=FEED_S)
    mine = Counter({(p, o): n for (t, p, o), n in case.rows.items() if t == case.topic})
    assert sum(mine.values()) == case.events and max(mine.values()) == 1  # none lost, twice
    assert sorted(mine) == sorted((i % PARTITIONS, i // PARTITIONS)
                                  for i in range(case.events))
    second = case.second
    assert second.errors == [], second.errors[:1]
    assert second.rows == 3
    assert sum(n for (t, _, _), n in case.rows.items() if t == FOREIGN) == second.rows

    commits = case.proxy.table_commits(TABLE)
    assert case.proxy.conflicts(TABLE) >= 1, commits  # the second writer's commits came first
    # The second writer recorded offsets of its own (as another kstage member's append
    # does for its partitions) right before kstage's commits, which were then answered
    # 409 and retried: the current snapshot must still hold them.
    current = rest.reader().load_table(case.name).current_snapshot()
    assert current is not None and current.summary is not None
    recorded = json.loads(current.summary.get("kstage.offsets") or "{}")
    assert recorded.get(SECOND_GROUP, {}).get(FOREIGN, {}).get("0") == second.rows, \
        recorded
    landed = [c.at for c in commits if c.status == 200 and case.fed[0] <= c.at <= case.fed[1]]
    assert len(landed) >= 2, commits
    # under the cap (one commit of slack: the window starts and ends on a commit)
    assert len(landed) - 1 <= MAX_PER_S * (landed[-1] - landed[0]) + 1, commits

    last = case.seen[-1]
    latency = last["kstage_table_commit_latency_seconds"]
    aimed = last["kstage_table_append_interval_seconds"]
    assert latency >= latency_s  # every append waited the catalog's latency at least
    # the rule, for the latency it measured: the target's rest, at least 1/cap
    assert aimed == pytest.approx(max(FRESHNESS_S - latency, latency, 1 / MAX_PER_S))
    assert last["kstage_table_commit_seconds_count"] >= len(landed)
    if latency_s > FRESHNESS_S / 2:
        assert aimed >= latency_s  # back to back: the interval follows the latency
