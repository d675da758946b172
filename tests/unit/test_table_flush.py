"""TableWriter's flush policy: the idle flush (``spark.flush_idle_s``) of a quiet table.

A writer whose flushes are recorded and held open by the test (no Spark): each flush
notes the loop time it started and the rows it took, and returns when the test lets it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from actors.sinks.spark.staging import flush_limits, rest_ratio
from actors.sinks.table.batching import Pending, TableWriter
from processors.base import Row
from settings.models import SparkSettings

WAIT_S = 30.0  # generous: only a flush that never comes hits it


class RecordingWriter(TableWriter):
    """Flushes are recorded as (loop time, rows); each waits for :attr:`release`."""

    def __init__(self, **limits: Any) -> None:
        super().__init__("t", (), **limits)
        self.started: list[tuple[float, int]] = []
        self.flushed = asyncio.Event()
        self.release = asyncio.Event()
        self.release.set()

    def convert(self, rows: Sequence[Row]) -> tuple[Any, list[tuple[Row, str]]]:
        return list(rows), []

    async def register(self) -> None:
        return None

    async def _flush(self, batch: list[Pending]) -> None:
        self.started.append((asyncio.get_running_loop().time(),
                             sum(len(item.part) for item in batch)))
        self.flushed.set()
        await self.release.wait()
        for item in batch:
            item.future.set_result(None)


def rows(n: int) -> list[Row]:
    return [{"i": i} for i in range(n)]


async def test_with_the_default_settings_a_caught_up_row_is_flushed_at_once() -> None:
    """10 rows on an idle writer whose partitions are not behind: written at once
    (flush_min_rows 1), not after flush_idle_s nor flush_max_interval_s."""
    settings = SparkSettings()
    writer = RecordingWriter(**flush_limits(settings))
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.wait_for(writer.write(rows(10), batch=At(behind=False), stream="s"),
                           WAIT_S)
    (at, count), = writer.started
    assert count == 10
    assert at - start < settings.idle_s


async def test_with_a_higher_min_rows_a_quiet_table_is_flushed_after_idle_s() -> None:
    """10 rows, below a flush_min_rows set by hand, on an idle writer: written after about
    flush_idle_s (1 s), not after flush_max_interval_s (5 s)."""
    settings = SparkSettings(flush_min_rows=1000)
    writer = RecordingWriter(**flush_limits(settings))
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.wait_for(writer.write(rows(10)), WAIT_S)
    (at, count), = writer.started
    assert count == 10
    assert at - start < settings.flush_max_interval_s  # before: the interval's flush
    assert at - start >= settings.idle_s - 0.01  # a timer may fire a tick early


@dataclass
class At:
    """A worker's batch position, as far as the writer reads it: behind, by default by a
    backlog larger than any append."""

    behind: bool
    lag: int = 1_000_000


async def test_while_behind_rows_gather_until_the_backlog_size_then_caught_up_at_once() -> None:
    """Parts whose partition is behind are not flushed at min_rows nor idle_s: they gather
    until max_rows; a part that caught up flushes what waits at once."""
    writer = RecordingWriter(max_rows=1000, min_rows=1, max_interval_s=WAIT_S, idle_s=0.05)
    loop = asyncio.get_running_loop()
    writes = [asyncio.ensure_future(writer.write(rows(300), batch=At(True), stream="a"))
              for _ in range(3)]
    waited_from = loop.time()
    while loop.time() - waited_from < 0.3:  # six times idle_s
        await asyncio.sleep(0.05)
    assert writer.started == []  # 900 rows behind: below the backlog size
    writes.append(asyncio.ensure_future(writer.write(rows(300), batch=At(True), stream="a")))
    await asyncio.wait_for(writer.flushed.wait(), WAIT_S)
    assert [count for _, count in writer.started] == [1200]  # at max_rows
    writes.append(asyncio.ensure_future(writer.write(rows(5), batch=At(True), stream="a")))
    writes.append(asyncio.ensure_future(writer.write(rows(5), batch=At(True), stream="b")))
    await asyncio.sleep(0.1)
    assert len(writer.started) == 1
    writes.append(asyncio.ensure_future(writer.write(rows(5), batch=At(False), stream="a")))
    await asyncio.sleep(0.1)
    assert len(writer.started) == 1  # partition b is still behind
    writes.append(asyncio.ensure_future(writer.write(rows(5), batch=At(False), stream="b")))
    await asyncio.wait_for(asyncio.gather(*writes), WAIT_S)
    assert [count for _, count in writer.started] == [1200, 20]


class SizedWriter(RecordingWriter):
    def part_bytes(self, part: Any) -> int:
        return 100 * len(part)  # 100 bytes a row


async def test_while_behind_the_bytes_bound_cuts_an_append() -> None:
    writer = SizedWriter(max_rows=10**6, min_rows=1, max_interval_s=WAIT_S, max_bytes=50_000)
    writes = [asyncio.ensure_future(writer.write(rows(200), batch=At(True), stream="a"))
              for _ in range(3)]
    await asyncio.wait_for(writer.flushed.wait(), WAIT_S)
    assert [count for _, count in writer.started] == [600]  # 60 000 bytes >= 50 000
    await asyncio.wait_for(asyncio.gather(*writes), WAIT_S)


async def test_behind_by_less_than_an_append_the_rows_go_as_caught_up() -> None:
    """A partition behind by 400 offsets with 300 rows pending cannot fill an append of
    1 000 rows: its rows go at once (the process fell a moment behind, a stall or a
    fold beside it: no backlog's wait of ``max_interval_s``, here ten times the test's)."""
    writer = RecordingWriter(max_rows=1000, min_rows=1, max_interval_s=WAIT_S * 10)
    await asyncio.wait_for(writer.write(rows(300), batch=At(True, lag=400), stream="a"),
                           WAIT_S)
    assert [count for _, count in writer.started] == [300]


async def test_behind_by_what_fills_an_append_with_the_pending_rows_they_gather() -> None:
    """Partition a behind by 400 offsets, nothing pending: its 300 rows go at once. While
    that append runs, b and a come, each 400 behind: 600 rows pending and 800 behind
    make more than ``max_rows`` 1 000: once the append ended they gather (no flush) until
    the rows reach 1 000."""
    writer = RecordingWriter(max_rows=1000, min_rows=1, max_interval_s=WAIT_S * 10)
    writer.release.clear()
    writes = [asyncio.ensure_future(writer.write(rows(300), batch=At(True, lag=400),
                                                 stream="a"))]
    await asyncio.wait_for(writer.flushed.wait(), WAIT_S)
    writer.flushed.clear()
    for stream in ("b", "a"):
        writes.append(asyncio.ensure_future(writer.write(rows(300),
                                                         batch=At(True, lag=400),
                                                         stream=stream)))
    await asyncio.sleep(0)
    writer.release.set()
    await asyncio.wait_for(writes[0], WAIT_S)
    for _ in range(5):
        await asyncio.sleep(0)
    assert [count for _, count in writer.started] == [300]  # gathering
    writes.append(asyncio.ensure_future(writer.write(rows(400), batch=At(True, lag=100),
                                                     stream="b")))
    await asyncio.wait_for(asyncio.gather(*writes), WAIT_S)
    assert [count for _, count in writer.started] == [300, 1000]  # at max_rows


async def test_behind_by_rows_whose_bytes_fill_an_append_they_gather() -> None:
    """100 bytes a row, ``max_bytes`` 50 000: 100 rows pending and 300 offsets behind
    (at the pending rows' size, 40 000 bytes) go at once; 100 rows and 450 offsets
    (55 000 bytes) gather, far below ``max_rows``, until the worker's window is full."""
    at_once = SizedWriter(max_rows=10**6, min_rows=1, max_interval_s=WAIT_S * 10,
                          max_bytes=50_000)
    await asyncio.wait_for(at_once.write(rows(100), batch=At(True, lag=300), stream="a"),
                           WAIT_S)
    assert [count for _, count in at_once.started] == [100]
    gathering = SizedWriter(max_rows=10**6, min_rows=1, max_interval_s=WAIT_S * 10,
                            max_bytes=50_000)
    write = asyncio.ensure_future(gathering.write(rows(100), batch=At(True, lag=450),
                                                  stream="a"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert gathering.started == []
    gathering.flush_soon()
    await asyncio.wait_for(write, WAIT_S)
    assert [count for _, count in gathering.started] == [100]


async def test_while_behind_the_interval_still_flushes() -> None:
    writer = RecordingWriter(max_rows=10**6, min_rows=1, max_interval_s=0.2, idle_s=0.05)
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.wait_for(writer.write(rows(3), batch=At(True), stream="a"), WAIT_S)
    assert writer.started[0][0] - start >= 0.2 - 0.01  # the interval, not idle_s
    assert [count for _, count in writer.started] == [3]


async def test_while_behind_a_full_window_still_flushes() -> None:
    """The worker's window is full (flush_soon): the rows behind go before the interval,
    which is here ten times the test's wait, so only flush_soon can release them."""
    writer = RecordingWriter(max_rows=10**6, min_rows=1, max_interval_s=WAIT_S * 10,
                             idle_s=0.05)
    write = asyncio.ensure_future(writer.write(rows(3), batch=At(True), stream="a"))
    await asyncio.sleep(0)
    writer.flush_soon()  # the worker's window is full
    await asyncio.wait_for(write, WAIT_S)
    assert [count for _, count in writer.started] == [3]


async def test_a_partition_caught_up_without_rows_for_the_table_releases_the_others() -> None:
    """Partition a's last batch up to its high-water mark has no rows for this table
    (filtered, dead-lettered): it caught up all the same, and b's caught-up rows that
    waited for it go at once, not after the interval (here far past the test's wait)."""
    writer = RecordingWriter(max_rows=10**6, min_rows=1, max_interval_s=WAIT_S * 10)
    first = asyncio.ensure_future(writer.write(rows(3), batch=At(True), stream="a"))
    second = asyncio.ensure_future(writer.write(rows(2), batch=At(False), stream="b"))
    await asyncio.sleep(0)
    assert writer.started == []  # a is behind: b's rows wait for it
    await writer.write(rows(0), batch=At(False), stream="a")
    await asyncio.wait_for(asyncio.gather(first, second), WAIT_S)
    assert [count for _, count in writer.started] == [5]


async def test_no_rest_after_a_backlog_flush_a_caught_up_row_goes_at_once() -> None:
    """``rest_ratio`` 1000 after a backlog's flush that took 0.2 s (a rest of 200 s,
    past the test's wait, were it taken): the first caught-up row is flushed at once.
    A backlog's flushes take long for their size, not for a commit's fixed cost."""
    writer = RecordingWriter(max_rows=1000, min_rows=1, max_interval_s=WAIT_S * 10,
                             rest_ratio=1000.0)
    writer.release.clear()
    backlog = [asyncio.ensure_future(writer.write(rows(500), batch=At(True), stream="a"))
               for _ in range(2)]
    await asyncio.wait_for(writer.flushed.wait(), WAIT_S)  # at max_rows
    await asyncio.sleep(0.2)  # the backlog's append takes 0.2 s
    writer.release.set()
    await asyncio.wait_for(asyncio.gather(*backlog), WAIT_S)
    await asyncio.wait_for(writer.write(rows(1), batch=At(False), stream="a"), WAIT_S)
    assert [count for _, count in writer.started] == [1000, 1]


async def test_held_flushes_gather_parts_without_positions_into_one() -> None:
    """kstage dlq replay: parts without positions, handed over while held, are one flush
    when released."""
    writer = RecordingWriter(max_rows=10**6, min_rows=1, max_interval_s=WAIT_S, idle_s=0.05)
    writer.hold_flushes()
    writes = [asyncio.ensure_future(writer.write(rows(1))) for _ in range(20)]
    loop = asyncio.get_running_loop()
    waited_from = loop.time()
    while loop.time() - waited_from < 0.3:
        await asyncio.sleep(0.05)
    assert writer.started == []
    writer.release_flushes()
    await asyncio.wait_for(asyncio.gather(*writes), WAIT_S)
    assert [count for _, count in writer.started] == [20]


async def test_no_idle_flush_while_a_flush_runs_then_the_waiting_rows_go_at_once() -> None:
    writer = RecordingWriter(max_rows=100_000, min_rows=100, max_interval_s=WAIT_S,
                             idle_s=0.05)
    loop = asyncio.get_running_loop()
    writer.release.clear()
    first = asyncio.ensure_future(writer.write(rows(100)))  # min_rows: flushes at once
    await asyncio.wait_for(writer.flushed.wait(), WAIT_S)
    writer.flushed.clear()
    second = asyncio.ensure_future(writer.write(rows(5)))
    waited_from = loop.time()
    while loop.time() - waited_from < 0.3:  # six times idle_s, the first flush still runs
        await asyncio.sleep(0.05)
    assert [count for _, count in writer.started] == [100]
    writer.release.set()
    await asyncio.wait_for(asyncio.gather(first, second), WAIT_S)
    assert [count for _, count in writer.started] == [100, 5]


async def test_rows_that_arrived_during_a_flush_wait_out_idle_s_from_their_arrival() -> None:
    """The idle flush counts from the oldest waiting row, not from the end of the flush:
    a busy writer's small rest is not written the moment the flush ends."""
    writer = RecordingWriter(max_rows=100_000, min_rows=100, max_interval_s=WAIT_S,
                             idle_s=0.5)
    loop = asyncio.get_running_loop()
    writer.release.clear()
    first = asyncio.ensure_future(writer.write(rows(100)))
    await asyncio.wait_for(writer.flushed.wait(), WAIT_S)
    arrived = loop.time()
    second = asyncio.ensure_future(writer.write(rows(5)))
    await asyncio.sleep(0)
    writer.release.set()
    await asyncio.wait_for(asyncio.gather(first, second), WAIT_S)
    at, count = writer.started[1]
    assert count == 5
    assert at - arrived >= 0.5 - 0.01  # the loop's timers may fire a clock tick early


async def test_min_rows_still_flushes_at_once_and_idle_s_at_the_interval_turns_it_off() -> None:
    writer = RecordingWriter(max_rows=100_000, min_rows=10, max_interval_s=0.2, idle_s=0.2)
    assert writer.idle_s is None
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.wait_for(writer.write(rows(10)), WAIT_S)
    assert writer.started[0][0] - start < 0.2  # min_rows, no timer
    start = loop.time()
    await asyncio.wait_for(writer.write(rows(3)), WAIT_S)
    assert writer.started[1][0] - start >= 0.2 - 0.01  # the interval's timer


async def test_after_a_flush_the_min_rows_flush_rests_as_long_as_the_flush_took() -> None:
    """``rest_ratio`` 1: rows that reach ``min_rows`` while the writer rests after a
    0.3 s flush wait until 0.3 s after it ended, and go in one flush; ``max_rows`` does
    not wait."""
    writer = RecordingWriter(max_rows=1000, min_rows=10, max_interval_s=WAIT_S,
                             rest_ratio=1.0)
    loop = asyncio.get_running_loop()
    writer.release.clear()
    first = asyncio.ensure_future(writer.write(rows(10)))  # min_rows: at once
    await asyncio.wait_for(writer.flushed.wait(), WAIT_S)
    await asyncio.sleep(0.3)
    writer.release.set()
    await asyncio.wait_for(first, WAIT_S)
    ended = loop.time()
    writer.flushed.clear()
    writer.release.clear()  # the second flush takes 1 s: a rest of 1 s follows it
    second = [asyncio.ensure_future(writer.write(rows(10))) for _ in range(3)]
    await asyncio.wait_for(writer.flushed.wait(), WAIT_S)
    await asyncio.sleep(1.0)
    writer.release.set()
    await asyncio.wait_for(asyncio.gather(*second), WAIT_S)
    rested_from = loop.time()
    (busy_from, _), (at, count) = writer.started
    assert count == 30  # one flush, after the rest
    assert at - ended >= (ended - busy_from) - 0.02  # a timer may fire a tick early
    rest = rested_from - at  # as long as the second flush took
    await asyncio.wait_for(writer.write(rows(1000)), WAIT_S)  # max_rows: at once
    assert writer.started[2][1] == 1000
    # Within the rest, not after it (half of it: a loaded machine delays the loop by a
    # tenth of a second, never by the rest's 1 s).
    assert writer.started[2][0] - rested_from < rest / 2, (writer.started, rest)


async def test_the_rest_never_holds_a_row_longer_than_idle_s() -> None:
    """A long rest (``rest_ratio`` 10 after a 0.2 s flush) still lets the rows that
    waited ``idle_s`` (0.4 s) go."""
    writer = RecordingWriter(max_rows=1000, min_rows=10, max_interval_s=WAIT_S,
                             idle_s=0.4, rest_ratio=10.0)
    loop = asyncio.get_running_loop()
    writer.release.clear()
    first = asyncio.ensure_future(writer.write(rows(10)))
    await asyncio.wait_for(writer.flushed.wait(), WAIT_S)
    arrived = loop.time()
    second = asyncio.ensure_future(writer.write(rows(10)))  # min_rows, during the flush
    await asyncio.sleep(0.2)
    writer.release.set()
    await asyncio.wait_for(asyncio.gather(first, second), WAIT_S)
    at, count = writer.started[1]
    assert count == 10
    assert 0.4 - 0.02 <= at - arrived < 1.0  # idle_s from its arrival, not the 2 s rest


async def test_the_rest_defaults_to_one_with_pyiceberg_and_none_with_spark() -> None:
    assert rest_ratio(SparkSettings(appends="pyiceberg")) == 1.0
    assert rest_ratio(SparkSettings()) == 0.0
    assert rest_ratio(SparkSettings(flush_rest_ratio=0)) == 0.0
    assert rest_ratio(SparkSettings(appends="pyiceberg", flush_rest_ratio=3)) == 3.0


class HoldingWriter(RecordingWriter):
    """Holds every part back (as the staging writer holds a batch whose partition's
    earlier batch is not in the table) while :attr:`hold` is set."""

    def __init__(self, **limits: Any) -> None:
        super().__init__(**limits)
        self.hold = True
        self.looked = 0  # how often a flush looked at the pending parts

    def _take(self) -> list[Pending]:
        self.looked += 1
        return [] if self.hold else super()._take()


async def test_parts_held_back_are_looked_at_again_after_the_interval_without_a_write() -> None:
    """A held-back part is flushed once what held it back is gone, even when no write
    comes after it to trigger a flush (the hang of a staging write waiting for a batch
    its partition's earlier owner never finished)."""
    writer = HoldingWriter(max_rows=1, min_rows=1, max_interval_s=0.1)
    write = asyncio.ensure_future(writer.write(rows(3)))  # max_rows: a flush at once
    loop = asyncio.get_running_loop()
    waited_from = loop.time()
    while loop.time() - waited_from < 0.35:
        await asyncio.sleep(0.05)
    assert not write.done() and writer.started == []
    assert writer.looked >= 3  # at once, then every interval
    writer.hold = False  # no write, no flush_soon: only the writer's own timer
    await asyncio.wait_for(write, WAIT_S)
    assert [count for _, count in writer.started] == [3]
