"""``kstage offsets reset``: move a consumer group's committed offsets.

Targets (``--to``), applied to every partition of every topic the configuration gives
the group:

* ``earliest``: the log start offset (ListOffsets earliest);
* ``latest``: the **fetch** high-water mark (see :mod:`service.ops.lag`), not ListOffsets
  latest, which some brokers answer wrongly for batched produce;
* an ISO-8601 time (``2026-11-22T06:00:00Z``; without a zone it is UTC): the first
  offset whose record timestamp is at or after that time, or the high-water mark when
  there is none. It is found by a binary search over fetched record timestamps
  (``log2(n)`` one-record fetches per partition) rather than ListOffsets by timestamp
  (``offsets_for_times``), because brokers differ in how faithfully they answer that
  (Tansu 0.6 always answers offset 0 with its own append time). The search assumes
  timestamps do not decrease along a partition (producer CreateTime of well-behaved
  producers, or LogAppendTime), which is also what a time index assumes;
* an integer: that offset on every partition; it must lie within
  ``[log start, high-water]`` of each partition, else nothing is committed.

The reset refuses while the group has members (DescribeGroups): offsets committed under
a live member would be overwritten by its next commit, and the broker would reject them
anyway. The new offsets are committed by a consumer in the group that ``assign()``-s the
partitions (a commit outside any generation, which brokers accept only for an empty
group), then read back. ``dry_run`` computes and reports, and commits nothing.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

from service.ops.lag import (
    OpsError,
    admin_client,
    committed_offsets,
    describe_group,
    high_waters,
    plain_consumer,
    topic_partitions,
)
from settings.models import Settings

logger = logging.getLogger(__name__)

_PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed ``--to``: kind is earliest, latest, time (``value`` in ms) or offset."""

    kind: str
    value: int = 0

    def __str__(self) -> str:
        if self.kind == "time":
            when = datetime.fromtimestamp(self.value / 1000, UTC)
            return f"time {when.isoformat(timespec='milliseconds').replace('+00:00', 'Z')}"
        return f"offset {self.value}" if self.kind == "offset" else self.kind


def parse_target(text: str) -> Target:
    """``earliest``, ``latest``, a non-negative integer offset, or an ISO-8601 time."""
    value = text.strip()
    if value.lower() in ("earliest", "latest"):
        return Target(value.lower())
    if re.fullmatch(r"[+-]?\d+", value):
        offset = int(value)
        if offset < 0:
            raise OpsError(f"--to {text}: an offset must be >= 0")
        return Target("offset", offset)
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise OpsError(f"--to {text!r}: expected earliest, latest, an offset or an ISO-8601 "
                       "time such as 2026-11-22T06:00:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return Target("time", int(when.timestamp() * 1000))


@dataclass(frozen=True, slots=True)
class Move:
    """One partition's reset: committed offset before (None: none) and after."""

    topic: str
    partition: int
    before: int | None
    after: int
    log_start: int
    high_water: int


@dataclass(frozen=True, slots=True)
class ResetResult:
    group: str
    target: Target
    moves: list[Move]
    committed: bool


async def _first_at(consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int,
                    high_water: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at or after ``offset``; None if none."""
    consumer.seek(tp, offset)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _PROBE_TIMEOUT_S
    while loop.time() < deadline:
        records = (await consumer.getmany(tp, timeout_ms=500, max_records=1)).get(tp, [])
        if records:
            return int(records[0].offset), int(records[0].timestamp)
        if await consumer.position(tp) >= high_water:
            return None  # only gaps (e.g. transaction markers) up to the high-water mark
    raise OpsError(f"{tp.topic}[{tp.partition}]: no record fetched at offset {offset} "
                   f"within {_PROBE_TIMEOUT_S:g}s")


async def offset_for_time(consumer: AIOKafkaConsumer, tp: TopicPartition, when_ms: int,
                          log_start: int, high_water: int) -> int:
    """First offset in ``[log_start, high_water)`` whose record timestamp is >= ``when_ms``
    (``high_water`` if none): a binary search over fetched records."""
    consumer.assign([tp])
    lo, hi = log_start, high_water
    while lo < hi:
        mid = (lo + hi) // 2
        found = await _first_at(consumer, tp, mid, high_water)
        if found is None or found[1] >= when_ms:
            hi = mid  # the answer is at or before the first record at/after mid
        else:
            lo = found[0] + 1  # everything up to that record is too old
    return lo


async def _targets(settings: Settings, tps: Sequence[TopicPartition], target: Target,
                   ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int],
                              dict[TopicPartition, int]]:
    """(new offsets, log starts, high-water marks) per partition."""
    async with plain_consumer(settings) as consumer:
        hws = await high_waters(consumer, tps)
        starts = {tp: int(o) for tp, o in (await consumer.beginning_offsets(list(tps))).items()}
        if target.kind == "earliest":
            new = dict(starts)
        elif target.kind == "latest":
            new = dict(hws)
        elif target.kind == "offset":
            bad = [f"{tp.topic}[{tp.partition}] [{starts[tp]}, {hws[tp]}]" for tp in tps
                   if not starts[tp] <= target.value <= hws[tp]]
            if bad:
                raise OpsError(f"offset {target.value} is outside the valid range "
                               f"[log start, high-water] of {', '.join(bad)}; nothing "
                               "committed")
            new = {tp: target.value for tp in tps}
        else:
            new = {tp: await offset_for_time(consumer, tp, target.value, starts[tp], hws[tp])
                   for tp in tps}
    return new, starts, hws


async def _commit(settings: Settings, group: str, offsets: dict[TopicPartition, int]) -> None:
    """Commit as a consumer of ``group`` that assign()-s the partitions (no generation)."""
    async with plain_consumer(settings, group_id=group) as consumer:
        consumer.assign(list(offsets))
        try:
            await consumer.commit(offsets)
        except CommitFailedError as exc:
            raise OpsError(f"the broker refused the commit for group {group!r}: a member "
                           "joined while resetting? nothing was changed by this run "
                           f"({exc.__class__.__name__})") from exc


async def reset_offsets(settings: Settings, group: str, to: str, *,
                        dry_run: bool = False) -> ResetResult:
    """Reset ``group``'s offsets on all its configured topics to ``to``."""
    target = parse_target(to)
    groups = {settings.group_id(g): g for g in settings.groups}
    if group not in groups:
        raise OpsError(f"group {group!r} is not in the configuration "
                       f"(groups: {', '.join(sorted(groups)) or 'none'})")
    topics = [t.topic for t in groups[group].topics]
    async with admin_client(settings) as admin:
        state = await describe_group(admin, group)
        if state.members:
            raise OpsError(
                f"group {group!r} has {len(state.members)} live member(s) "
                f"(state {state.state}): stop its consumers (and wait for their session "
                "to expire if they crashed) before resetting offsets")
        partitions = await topic_partitions(admin, topics)
        tps = [tp for t in topics for tp in partitions[t]]
        before = await committed_offsets(admin, group, tps)
        new, starts, hws = await _targets(settings, tps, target)
        if not dry_run:
            # Check again right before committing: the search may have taken a while.
            state = await describe_group(admin, group)
            if state.members:
                raise OpsError(f"group {group!r} got {len(state.members)} live member(s) "
                               "while resetting; nothing committed")
            try:
                await _commit(settings, group, new)
            except KafkaError as exc:
                raise OpsError(f"commit for group {group!r} failed: {exc}") from exc
            after = await committed_offsets(admin, group, tps)
            wrong = [tp for tp in tps if after[tp] != new[tp]]
            if wrong:
                raise OpsError("the committed offsets read back differ from the ones "
                               "committed for " + ", ".join(
                                   f"{tp.topic}[{tp.partition}]: {after[tp]} != {new[tp]}"
                                   for tp in wrong))
    moves = [Move(tp.topic, tp.partition, before[tp], new[tp], starts[tp], hws[tp])
             for tp in tps]
    for m in moves:
        logger.info("%s %s[%d]: %s -> %d%s", group, m.topic, m.partition, m.before, m.after,
                    " (dry run)" if dry_run else "")
    return ResetResult(group, target, moves, committed=not dry_run)


def render(result: ResetResult) -> str:
    """Before/after per partition, and what happened."""
    head = ("TOPIC", "PARTITION", "BEFORE", "AFTER", "LOG-START", "HIGH-WATER")
    body = [(m.topic, str(m.partition), "none" if m.before is None else str(m.before),
             str(m.after), str(m.log_start), str(m.high_water)) for m in result.moves]
    widths = [max(len(cells[i]) for cells in (head, *body)) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()
             for cells in (head, *body)]
    verdict = ("committed" if result.committed
               else "dry run: nothing committed")
    lines.append(f"group {result.group} reset to {result.target}: {verdict}")
    return "\n".join(lines)


def reset(settings: Settings, group: str, to: str, dry_run: bool = False) -> ResetResult:
    """Synchronous entry point for the CLI."""
    return asyncio.run(reset_offsets(settings, group, to, dry_run=dry_run))
