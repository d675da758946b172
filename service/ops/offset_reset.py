"""``kstage tables reset-offsets``: move the Kafka offset a staging table holds for a
consumer group's partition, the way out when a worker refuses a partition whose table
holds it past its high-water mark (a topic deleted and re-created, a group moved to a
mirrored cluster: :mod:`actors.worker.sink_offsets`).

For ``--group`` and ``--topic`` (and ``--partition``, else every partition of the topic
the table records), in every staging table of the configuration's spark sinks that
records them (or only ``--table``): the offset becomes ``--to N``, by default the
partition's current log start (read from the brokers, with its high-water mark, by a
fetch: :mod:`actors.log_bounds`). Without ``--partition`` nor ``--to``, a partition whose
offset lies within its log (between the log start and the high-water mark) is kept, and
said so: only the partitions a worker would refuse move. A dry run by default: it prints each change
(``TABLE: group G TOPIC[P]: 500 -> 0``); ``--yes`` records them, one snapshot of no data
per table (:mod:`actors.tables.offset_resets`: through pyiceberg on a ``jdbc``
catalog, no JVM; through the Spark session on a ``rest`` one), then reads the offsets
back and fails when a reset did not stand (an append of a kstage still running carried
the old offset over it: stop kstage and run the command again).

Run it while the partition is refused or kstage stopped; a running worker reads the
table's offsets at assignment, so restart kstage (or its worker) after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aiokafka import TopicPartition

from actors.log_bounds import Bounds, FetchedBounds
from actors.sinks.spark.catalog import dotted
from actors.sinks.spark.ledger import Stream
from actors.tables import TableOffsets, plan
from processors.base import Processor
from service.ops.lag import OpsError, bootstrap_of
from settings.models import Settings


@dataclass(frozen=True, slots=True)
class Change:
    """One partition's offset in one table, before and after the reset."""

    table: str
    stream: Stream
    before: int
    after: int
    bounds: Bounds | None = None

    @property
    def kept(self) -> bool:
        """Nothing to change: the offset stays."""
        return self.after == self.before

    def line(self, settings: Settings) -> str:
        group, topic, partition = self.stream
        log = ("" if self.bounds is None else f" (log start {self.bounds.log_start}, "
               f"high-water mark {self.bounds.high_water})")
        head = f"{dotted(settings.spark, self.table)}: group {group} {topic}[{partition}]: "
        if self.kept:
            return (f"{head}{self.before} kept{log}: within the log (--partition "
                    f"{partition} --to N moves it anyway)")
        return f"{head}{self.before} -> {self.after}{log}"


async def plan_resets(settings: Settings, processors: Mapping[str, type[Processor]],
                      tables: TableOffsets, *, group: str, topic: str,
                      partition: int | None = None, to: int | None = None,
                      table: str | None = None) -> list[Change]:
    """The changes of a reset (see the module docstring); OpsError when no table records
    the group's topic (or partition)."""
    if to is not None and to < 0:
        raise OpsError(f"--to {to}: an offset is 0 or more")
    found: dict[str, dict[Stream, int]] = {}
    recorded: set[tuple[str, str]] = set()
    for item in plan(settings, processors, table):
        if not await tables.exists(item.table):
            continue
        offsets = await tables.offsets(item.table)
        recorded |= {(g, t) for g, t, _ in offsets}
        mine = {s: o for s, o in offsets.items() if s[0] == group and s[1] == topic
                and (partition is None or s[2] == partition)}
        if mine:
            found[item.table] = mine
    if not found:
        which = f"{topic}[{partition}]" if partition is not None else f"topic {topic}"
        seen = ", ".join(f"group {g} topic {t}" for g, t in sorted(recorded)) or "none"
        raise OpsError(f"no staging table{'' if table is None else f' {table!r}'} records "
                       f"offsets of group {group} {which} (recorded: {seen})")
    bounds: dict[TopicPartition, Bounds] = {}
    if to is None:
        parts = sorted({TopicPartition(t, p) for held in found.values() for _, t, p in held},
                       key=lambda tp: tp.partition)
        reader = FetchedBounds(bootstrap_of(settings), settings.kafka.consumer_config,
                               f"{settings.kafka.client_id}-ops")
        try:
            bounds = await reader.log_bounds(parts)
        except Exception as exc:  # a broker out of reach: said in one line, with --to
            raise OpsError(f"cannot read the log start of {topic} from the brokers ({exc}); "
                           "give the offset with --to N") from exc
    changes = []
    for name, held in sorted(found.items()):
        for stream, before in sorted(held.items()):
            log = bounds.get(TopicPartition(stream[1], stream[2]))
            after = to if to is not None else log.log_start if log is not None else 0
            if (to is None and partition is None and log is not None
                    and log.log_start <= before <= log.high_water):
                after = before  # a partition of the topic that is fine: never lowered
            changes.append(Change(name, stream, before, after, log))
    return changes


async def apply_resets(tables: TableOffsets, changes: list[Change]) -> dict[str, int]:
    """Record ``changes``: one reset snapshot per table; their ids by table. OpsError
    when a reset read back does not stand."""
    done: dict[str, int] = {}
    by_table: dict[str, dict[Stream, int]] = {}
    for change in changes:
        if not change.kept:
            by_table.setdefault(change.table, {})[change.stream] = change.after
    for name, resets in sorted(by_table.items()):
        done[name] = await tables.reset(name, resets)
        now = await tables.offsets(name)
        moved = {s: now.get(s) for s, o in resets.items() if now.get(s) != o}
        if moved:
            raise OpsError(f"table {name}: after the reset (snapshot {done[name]}) the table "
                           f"holds {moved}, not {resets}: an append of a running kstage "
                           "carried the old offsets over it; stop kstage and run this again")
    return done


__all__ = ["Change", "apply_resets", "plan_resets"]
