"""The pace of a table's appends (``spark.freshness_target_s``, ``spark.max_commits_per_s``,
the rule in actors/sinks/table/batching.py): between flushes of caught-up rows that take L
seconds the writer rests ``freshness - 2 L`` (none once L passes half the target), and no
flush starts less than 1/``max_per_s`` after the previous one.

A writer whose every flush takes a latency the test sets (``asyncio.sleep``) is fed one
caught-up row every 50 ms; each row carries the time it came, each flush notes when it
started and ended. The loop runs on a virtual clock (tests/virtual_time.py): the sleeps
take no wall time and every duration read from the loop is exact, so the assertions
(each row's wait, the flushes' count and spacing) hold on any machine, however loaded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import ValidationError

from actors.metrics import Metrics
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.staging import StagingWriter, flush_limits, pace
from actors.sinks.table.batching import LATENCY_WEIGHT, Pending, TableWriter, interval, rest
from processors.base import Row
from settings import SparkSettings
from tests.virtual_time import run

EVERY_S = 0.05  # a row every 50 ms
EPS = 1e-6  # float sums of the virtual clock


@dataclass
class At:
    """A worker's batch position, as far as the writer reads it: behind, by default by a
    backlog larger than any append."""

    behind: bool
    lag: int = 1_000_000


@dataclass
class Flush:
    started: float
    ended: float
    arrivals: list[float]  # when each of its rows came

    @property
    def waits(self) -> list[float]:
        return [self.ended - at for at in self.arrivals]


class PacedWriter(TableWriter):
    """A writer whose flushes take :attr:`latency_s` (set by the test as it goes)."""

    def __init__(self, latency_s: float = 0.1, **limits: Any) -> None:
        limits = {"max_rows": 10**6, "min_rows": 1, "max_interval_s": 30.0} | limits
        TableWriter.__init__(self, "t", (), **limits)
        self.latency_s = latency_s
        self.log: list[Flush] = []

    def convert(self, rows: Sequence[Row]) -> tuple[Any, list[tuple[Row, str]]]:
        return list(rows), []

    async def register(self) -> None:
        return None

    async def _flush(self, batch: list[Pending]) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.sleep(self.latency_s)
        self.log.append(Flush(started, loop.time(),
                              [row["at"] for item in batch for row in item.part]))
        for item in batch:
            item.future.set_result(None)

    def between(self, start: float, end: float) -> list[Flush]:
        """The flushes that started in [start, end)."""
        return [f for f in self.log if start <= f.started < end]


async def feed(writer: TableWriter, seconds: float, *, behind: bool = False,
               every: float = EVERY_S) -> list[float]:
    """A row every ``every`` seconds for ``seconds``, each written by its own task (as
    the workers' batches are); returns the rows' arrival times once all are written."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    writes, arrivals = [], []
    while loop.time() < end - EPS:
        arrivals.append(loop.time())
        writes.append(asyncio.ensure_future(
            writer.write([{"at": loop.time()}], batch=At(behind), stream="s")))
        await asyncio.sleep(every)
    await asyncio.gather(*writes)
    return arrivals


def landed_once(writer: PacedWriter, arrivals: list[float]) -> None:
    """Every row fed is in exactly one flush."""
    flushed = sorted(at for f in writer.log for at in f.arrivals)
    assert flushed == sorted(arrivals)


def test_the_rule() -> None:
    # target 1 s: fast appends rest so that a row waits about the target...
    assert rest(0.1, 1.0) == pytest.approx(0.8)
    assert interval(0.1, 1.0, max_per_s=2) == pytest.approx(0.9)
    # ... and go back to back once the latency passes half of it
    assert rest(0.5, 1.0) == 0 and rest(3.0, 1.0) == 0
    assert interval(3.0, 1.0, max_per_s=2) == 3.0
    # the cap: never more than max_per_s a second
    assert interval(0.05, 0.2, max_per_s=2) == 0.5
    # the ratio: a rest of at least that many times the latency
    assert rest(0.8, 1.0, rest_ratio=1.0) == 0.8 and rest(0.1, 1.0, rest_ratio=1.0) == 0.8
    # no target: the ratio alone (the JDBC writer: none)
    assert rest(0.3, None) == 0 and rest(0.3, None, 2.0) == pytest.approx(0.6)
    # the ratio counts the CPU a flush costs when measured, not its wait on the catalog
    assert rest(1.2, 1.0, rest_ratio=1.0, cpu=0.05) == pytest.approx(0.05)
    assert interval(1.2, 1.0, rest_ratio=1.0, cpu=0.05) == pytest.approx(1.25)
    assert rest(0.1, 1.0, rest_ratio=1.0, cpu=0.09) == pytest.approx(0.8)  # the target's
    # flushes whose duration varies rest for the slow ones: L + 2 spreads
    assert rest(0.1, 1.0, spread=0.05) == pytest.approx(0.6)
    assert rest(0.3, 1.0, spread=0.1) == 0
    assert interval(0.1, 1.0, max_per_s=2, spread=0.05) == pytest.approx(0.7)


class UnevenWriter(PacedWriter):
    """Flushes that take, in turn, each of :attr:`pattern`'s durations."""

    pattern = (0.1, 0.1, 0.4, 0.4)

    async def _flush(self, batch: list[Pending]) -> None:
        self.latency_s = self.pattern[len(self.log) % len(self.pattern)]
        await super()._flush(batch)


@pytest.mark.parametrize("spread_weight", [2.0, 0.0])
def test_flushes_whose_duration_varies_keep_the_worst_wait_within_the_target(
        monkeypatch: pytest.MonkeyPatch, spread_weight: float) -> None:
    """Flushes of 0.1, 0.1, 0.4, 0.4 s in turn (0.25 s on average): resting the target
    minus two average latencies (0.5 s) lets a row that came as a slow flush began wait
    for it, the rest and another slow one: 1.3 s. Resting for the latency plus two spreads
    keeps every row within the target; without the spread (its weight 0) the target is
    missed, which is what the spread is for."""
    from actors.sinks.table import batching

    monkeypatch.setattr(batching, "SPREAD_WEIGHT", spread_weight)

    async def main() -> None:
        writer = UnevenWriter(freshness_s=1.0, max_per_s=2)
        arrivals = await feed(writer, 30)
        landed_once(writer, arrivals)
        worst = max(w for f in writer.log[8:] for w in f.waits)  # once measured
        if spread_weight:
            assert worst <= 1.0 + EPS, worst
            assert writer.spread > 0.1, writer.spread
        else:
            assert worst > 1.1, worst
    run(main())


class CpuPacedWriter(PacedWriter):
    """A :class:`PacedWriter` that measures its flushes itself, as the staging writer
    does, each costing the process :attr:`cpu_s` of CPU (the rest of it a wait)."""

    times_flushes = False

    def __init__(self, latency_s: float, cpu_s: float, **limits: Any) -> None:
        super().__init__(latency_s, **limits)
        self.cpu_s = cpu_s

    async def _flush(self, batch: list[Pending]) -> None:
        await super()._flush(batch)
        flush = self.log[-1]
        self.took(flush.ended - flush.started, False, self.cpu_s)


def test_appends_that_wait_on_a_remote_catalog_rest_for_their_cpu_not_their_wait() -> None:
    """pyiceberg's appends (a rest of at least their cost, ``flush_rest_ratio`` 1) through
    a catalog whose commits take 1.2 s, 0.05 s of it the process's CPU: back to back
    (a rest of 0.05 s), a row waits at most about two appends (2.5 s), not three (the
    rest of a whole latency would add 1.2 s)."""
    async def main() -> None:
        writer = CpuPacedWriter(1.2, 0.05, freshness_s=1.0, max_per_s=2, rest_ratio=1.0)
        arrivals = await feed(writer, 30)
        landed_once(writer, arrivals)
        starts = [f.started for f in writer.log]
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        assert all(g <= 1.25 + EPS for g in gaps), gaps
        assert max(w for f in writer.log for w in f.waits) <= 2 * 1.2 + 0.05 + EPS
        assert writer.cpu == pytest.approx(0.05)
        assert writer.interval == pytest.approx(1.25)
    run(main())


def test_a_fast_catalog_gets_one_append_per_target_and_no_row_waits_longer() -> None:
    """Appends of 0.1 s, target 1 s: after the first (at once), one every 0.9 s (the
    latency and a rest of 0.8 s), each row written within the target."""
    async def main() -> None:
        writer = PacedWriter(0.1, freshness_s=1.0, max_per_s=2)
        arrivals = await feed(writer, 20)
        landed_once(writer, arrivals)
        starts = [f.started for f in writer.log]
        assert starts[0] == 0  # the first row goes at once
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        assert all(g == pytest.approx(0.9) for g in gaps[:-1]), gaps  # the last: the end
        assert 20 / 0.9 <= len(writer.log) <= 20 / 0.9 + 2  # not one per row (400)
        assert max(w for f in writer.log for w in f.waits) <= 1.0 + EPS
        assert writer.latency == pytest.approx(0.1)
        assert writer.interval == pytest.approx(0.9)
    run(main())


def test_a_slow_catalog_gets_appends_back_to_back_and_rows_wait_two_latencies() -> None:
    """Appends of 2 s, target 1 s: back to back (no rest), a row waits at most the
    append running when it came and its own (4 s), one append per 2 s."""
    async def main() -> None:
        writer = PacedWriter(2.0, freshness_s=1.0, max_per_s=2)
        arrivals = await feed(writer, 30)
        landed_once(writer, arrivals)
        starts = [f.started for f in writer.log]
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        assert all(g == pytest.approx(2.0) for g in gaps), gaps
        waits = [w for f in writer.log for w in f.waits]
        assert max(waits) <= 4.0 + EPS and max(waits) >= 3.9  # 2 L, reached
        assert writer.interval == pytest.approx(2.0)
    run(main())


def test_freshness_degrades_smoothly_as_the_latency_grows_and_recovers() -> None:
    """The latency steps from 0.1 s to 3 s and back, 30 s at each step: in every step,
    once the measured latency settled (after 10 s), the worst wait of a row is the target or
    two latencies, whichever is more; the appends never start closer than 1/max_per_s (no
    storm, also while the latency moves), each row lands once; the interval the writer
    aims at follows the latency."""
    steps = [0.1, 0.3, 0.5, 1.0, 2.0, 3.0, 1.0, 0.1]

    async def main() -> None:
        writer = PacedWriter(steps[0], freshness_s=1.0, max_per_s=2)
        loop = asyncio.get_running_loop()
        arrivals: list[float] = []
        seen: list[tuple[float, float, float]] = []  # (latency, worst wait, interval)
        for latency in steps:
            writer.latency_s = latency
            begun = loop.time()
            arrivals += await feed(writer, 30)
            settled = writer.between(begun + 10, loop.time())
            assert settled, latency
            # a flush that started in the step has the step's latency
            worst = max(w for f in settled for w in f.waits)
            assert worst <= max(1.0, 2 * latency) + EPS, (latency, worst)
            assert writer.latency == pytest.approx(latency, rel=0.01)
            seen.append((latency, worst, writer.interval or 0))
        landed_once(writer, arrivals)
        starts = [f.started for f in writer.log]
        assert min(b - a for a, b in zip(starts, starts[1:], strict=False)) >= 0.5 - EPS
        # the interval aimed at: the target minus the latency, then the latency
        assert [i for _, _, i in seen] == pytest.approx(
            [interval(latency, 1.0, max_per_s=2) for latency in steps], rel=0.01)
        # smooth: the worst wait is the target, then two latencies (within a row's gap)
        for latency, worst, _ in seen:
            assert worst >= max(1.0, 2 * latency) - EVERY_S - EPS, (latency, worst)
    run(main())


def test_the_cap_spaces_appends_a_low_target_would_bunch() -> None:
    """Target 0.2 s, appends of 50 ms, at most 2 a second: one append per 0.5 s (the
    target alone would rest 0.1 s: one per 0.15 s)."""
    async def main() -> None:
        writer = PacedWriter(0.05, freshness_s=0.2, max_per_s=2)
        arrivals = await feed(writer, 10)
        landed_once(writer, arrivals)
        starts = [f.started for f in writer.log]
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        assert all(g == pytest.approx(0.5) for g in gaps[:-1]), gaps
        assert max(w for f in writer.log for w in f.waits) <= 0.55 + EPS
        assert writer.interval == pytest.approx(0.5)
    run(main())


def test_the_cap_holds_the_appends_a_timer_starts() -> None:
    """Rows behind, 100 a second, flushed by ``max_interval_s`` (0.1 s) alone: at most
    2 a second, each with what gathered meanwhile."""
    async def main() -> None:
        writer = PacedWriter(0.05, max_interval_s=0.1, freshness_s=0.1, max_per_s=2)
        arrivals = await feed(writer, 5, behind=True, every=0.01)
        landed_once(writer, arrivals)
        starts = [f.started for f in writer.log]
        assert min(b - a for a, b in zip(starts, starts[1:], strict=False)) >= 0.5 - EPS
        assert len(writer.log) <= 5 * 2 + 1
        assert writer.latency is None  # a backlog's appends are not the latency
    run(main())


def test_full_appends_are_not_held_by_the_cap() -> None:
    """Rows behind, 100 a second, ``max_rows`` 10: an append of 10 rows every 0.1 s
    (each taking 0.3 s, several at once), not held by the cap of 2 a second: held, it
    would grow past ``max_rows``. A full window (flush_soon) is not held either."""
    async def main() -> None:
        writer = PacedWriter(0.3, max_rows=10, freshness_s=1.0, max_per_s=2)
        arrivals = await feed(writer, 5, behind=True, every=0.01)
        landed_once(writer, arrivals)
        assert [len(f.arrivals) for f in writer.log] == [10] * 50
        loop = asyncio.get_running_loop()
        write = asyncio.ensure_future(writer.write([{"at": loop.time()}], batch=At(True),
                                                   stream="s"))
        await asyncio.sleep(0.1)
        writer.flush_soon()
        await write
        assert writer.log[-1].started == pytest.approx(writer.log[-1].arrivals[0] + 0.1)
        # less than 1/max_per_s after the one before: the cap would have held it
        assert writer.log[-1].started - writer.log[-2].started < 0.5
    run(main())


def test_a_quiet_table_and_the_rows_after_a_backlog_go_at_once() -> None:
    """No rest on a quiet table (a row long after the last append waits its own append
    only) nor after a backlog's append."""
    async def main() -> None:
        writer = PacedWriter(0.1, freshness_s=1.0, max_per_s=2)
        loop = asyncio.get_running_loop()
        await writer.write([{"at": loop.time()}], batch=At(False), stream="s")
        await asyncio.sleep(10)
        await writer.write([{"at": loop.time()}], batch=At(False), stream="s")
        await writer.write([{"at": loop.time()}], batch=At(True), stream="s")  # interval
        await asyncio.sleep(0.5)  # the cap: 0.5 s after the backlog's append started
        await writer.write([{"at": loop.time()}], batch=At(False), stream="s")
        assert [f.waits for f in writer.log] == [
            [pytest.approx(0.1)], [pytest.approx(0.1)], [pytest.approx(30.1)],
            [pytest.approx(0.1)]]
    run(main())


def test_an_idle_s_set_below_the_target_ends_the_rest() -> None:
    """Target 4 s (a rest of 3.8 s after 0.1 s appends), ``idle_s`` 0.5: a row that
    comes after an append waits 0.5 s, not the rest."""
    async def main() -> None:
        writer = PacedWriter(0.1, freshness_s=4.0, idle_s=0.5, max_per_s=2,
                             max_interval_s=10.0)
        loop = asyncio.get_running_loop()
        await writer.write([{"at": loop.time()}], batch=At(False), stream="s")
        await asyncio.sleep(0.1)
        await writer.write([{"at": loop.time()}], batch=At(False), stream="s")
        assert writer.log[1].waits == [pytest.approx(0.6)]  # idle_s, then its append
    run(main())


def test_the_latency_is_a_moving_average_of_the_caught_up_appends() -> None:
    async def main() -> None:
        writer = PacedWriter(1.0, freshness_s=1.0)
        loop = asyncio.get_running_loop()

        async def append(behind: bool = False) -> None:
            await writer.write([{"at": loop.time()}], batch=At(behind), stream="s")
            await asyncio.sleep(0.01)  # the flush's end is noted after its rows' futures

        await append()
        assert writer.latency == 1.0
        writer.latency_s = 2.0
        await append()
        assert writer.latency == pytest.approx(1 + LATENCY_WEIGHT)
        await append(behind=True)  # a backlog's
        assert writer.latency == pytest.approx(1 + LATENCY_WEIGHT)
    run(main())


def test_the_staging_writer_shows_its_latency_and_interval(tmp_path: Any) -> None:
    actor = SparkActor(SparkSettings(warehouse=str(tmp_path)))  # no session is started
    actor.metrics = metrics = Metrics()
    writer = StagingWriter(actor, "stg_pace", ())
    writer.took(0.3, False)
    writer.took(8.0, True)  # a backlog's append: in the histogram, not in the latency

    def value(name: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"table": writer.name})

    assert value("kstage_table_commit_seconds_count") == 2
    assert value("kstage_table_commit_seconds_sum") == pytest.approx(8.3)
    assert value("kstage_table_commit_latency_seconds") == pytest.approx(0.3)
    assert value("kstage_table_append_interval_seconds") == pytest.approx(0.7)


def test_the_settings() -> None:
    settings = SparkSettings()
    assert (settings.freshness_target_s, settings.max_commits_per_s) == (1, 2)
    assert pace(settings) == {"freshness_s": 1, "max_per_s": 2, "rest_ratio": 0.0}
    assert pace(SparkSettings(appends="pyiceberg"))["rest_ratio"] == 1.0
    assert flush_limits(settings)["idle_s"] == 1  # flush_idle_s unset: the target
    assert flush_limits(SparkSettings(freshness_target_s=3))["idle_s"] == 3
    assert flush_limits(SparkSettings(freshness_target_s=3, flush_idle_s=0.5))["idle_s"] == 0.5
    # an interval set below the default target lowers it; a target set above is refused
    assert SparkSettings(flush_max_interval_s=0.5).freshness_s == 0.5
    with pytest.raises(ValidationError, match=r"spark.freshness_target_s \(8\) is above "
                       r"spark.flush_max_interval_s \(5\)"):
        SparkSettings(freshness_target_s=8)
    with pytest.raises(ValidationError):
        SparkSettings(max_commits_per_s=0)
