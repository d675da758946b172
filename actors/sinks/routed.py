"""The sink of a routed topic (``route:``, :mod:`settings.routes`): one inner sink per
table, made on first use from the topic's sink settings with ``{table}`` filled in (and
so its table created on first sight, as that sink creates any table), each bound as the
topic's sink with a label and dead letters naming its table.

The worker tags each row with its table (:data:`actors.routing.ROUTE_FIELD`, stripped
here). A batch is split by table and written to each of its tables at once; it is
accepted (and its offsets committable) only once every table it touched accepted its
rows. A table that fails is retried alone: a retry of the batch writes only the tables
that have not accepted their rows yet, so the others are never written twice. A row a
table refuses for good is dead-lettered by that table's sink (naming the table, the row
tagged with it again so that ``kstage dlq replay`` writes it to that table), which then
accepts the rest: the other tables are not held back by it. A table that cannot
take the topic's rows at all (its sink refuses to open it with a
:class:`~actors.errors.FatalError`, e.g. an existing table whose column types conflict
with the rows') refuses every row routed to it, each dead-lettered naming the table and
why, for the rest of the run; an ERROR line says so once. A table that fails for a while
(its catalog down: :class:`~actors.errors.SinkError`) is retried, never dead-lettered.

Offsets (sinks that ``stores_offsets``, the Iceberg staging tables): the routed sink
declares what its inner sinks declare, tells every inner sink of the partitions assigned
and revoked, tells a table made mid-run of the partitions held now before its first
write, and hands each table the batch's position; a table a batch did not touch keeps
its old offset. It reports no offsets of its own at assignment (the partitions resume at
Kafka's committed offset, every table dropping the rows it holds already): a table not
yet written in this run is not known then.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from actors.errors import FatalError, SinkError
from actors.routing import ROUTE_FIELD
from actors.sinks.base import Position, Problem, Sink, SinkContext
from processors.base import Row
from settings.models import SinkSettings

logger = logging.getLogger(__name__)


@dataclasses.dataclass(slots=True, eq=False)
class _Split:
    """A batch being written: its rows, its position, and its rows by the table that
    has still to accept them."""

    rows: Sequence[Row]
    position: Position | None
    left: dict[str, list[Row]]


class RoutedSink(Sink):
    """One inner sink per table (see the module docstring).

    Args:
        settings: the topic's sink settings, ``{table}`` in its table or path.
        build: makes a sink from settings (:func:`~actors.sinks.build_sink`).
    """

    type: ClassVar[str] = "routed"

    def __init__(self, settings: SinkSettings, build: Callable[[SinkSettings], Sink]) -> None:
        self._settings = settings
        self._build = build
        self._probe = build(settings.for_table("routed"))  # what every table's sink is
        # As its tables' sinks: a pipelined one (spark, jdbc) gets every batch at once,
        # each table's writes joining that table's micro-batch.
        self.capabilities = self._probe.capabilities
        self.tables: dict[str, Sink] = {}
        self.refused: dict[str, str] = {}  # table -> why it takes no row
        self._opening: dict[str, asyncio.Task[Sink]] = {}
        self._held: list[tuple[str, int]] = []  # the partitions assigned now
        # The batches being written (by the id of their row list) and what of each every
        # table has still to accept: a retry passes the same list, and only the tables
        # that failed are written again.
        self._batches: dict[int, _Split] = {}

    def bind(self, context: SinkContext) -> None:
        super().bind(context)
        self._probe.bind(context)

    def check(self) -> list[Problem]:
        return self._probe.check()

    def offsets_holder(self) -> str:
        return f"the tables of the route of topic {self.context.topic!r}"

    async def _sink(self, table: str) -> Sink:
        """The sink of ``table``, made, bound and opened on first use (one at a time per
        table; a failed opening is tried again at the next write)."""
        sink = self.tables.get(table)
        if sink is not None:
            return sink
        task = self._opening.get(table)
        if task is None:
            task = self._opening[table] = asyncio.ensure_future(self._open(table))
        try:
            sink = await asyncio.shield(task)
        finally:
            if task.done():
                self._opening.pop(table, None)
        return sink

    async def _open(self, table: str) -> Sink:
        sink = self._build(self._settings.for_table(table))
        outer = self.context.refuse

        def refuse(rows: list[Row], status: int, reason: str) -> Any:
            return None if outer is None else outer(_tagged(rows, table), status,
                                                    f"table {table}: {reason}")

        sink.bind(dataclasses.replace(
            self.context, label=f"{self.context.label} table {table!r}",
            refuse=None if outer is None else refuse))
        await sink.open()
        if self.capabilities.stores_offsets and self._held:
            try:
                await sink.assigned(self._held)
            except BaseException:
                await sink.close()
                raise
        self.tables[table] = sink
        return sink

    async def write(self, rows: Sequence[Row]) -> None:
        await self._write(rows, None)

    async def write_at(self, rows: Sequence[Row], position: Position) -> None:
        await self._write(rows, position)

    async def _write(self, rows: Sequence[Row], position: Position | None) -> None:
        split = self._batches.get(id(rows))
        if split is None or split.rows is not rows:
            split = self._batches[id(rows)] = _Split(rows, position, self._split(rows))
        left = split.left
        tables = list(left)
        try:
            results = await asyncio.gather(
                *(self._one(t, left[t], position) for t in tables), return_exceptions=True)
        finally:
            self._forget_cancelled()
        failed = []
        for table, result in zip(tables, results, strict=True):
            if isinstance(result, BaseException):
                failed.append((table, result))
            else:
                del left[table]
        if failed:
            for _, exc in failed:
                if not isinstance(exc, SinkError | OSError):
                    self._batches.pop(id(rows), None)
                    raise exc
            raise SinkError("; ".join(f"table {t}: {e}" for t, e in failed))
        self._batches.pop(id(rows), None)

    def _split(self, rows: Sequence[Row]) -> dict[str, list[Row]]:
        """``rows`` by their table, the tag taken off."""
        split: dict[str, list[Row]] = {}
        for row in rows:
            table = row.pop(ROUTE_FIELD, None)
            if not isinstance(table, str):
                raise SinkError(f"{self.context.label}: a row reached the routed sink "
                                "without its table (the worker routes every row)")
            split.setdefault(table, []).append(row)
        return split

    def _forget_cancelled(self) -> None:
        """Drop the batches of revoked partitions (never written again)."""
        for key in [k for k, b in self._batches.items()
                    if b.position is not None and b.position.cancelled]:
            del self._batches[key]

    async def _one(self, table: str, rows: list[Row], position: Position | None) -> None:
        why = self.refused.get(table)
        if why is None:
            try:
                sink = await self._sink(table)
            except FatalError as exc:
                why = self._refuse_table(table, exc)
        if why is not None:
            await self.refuse(_tagged(rows, table), 0,
                              f"table {table} refuses the rows routed to it: {why}")
            return
        if position is None:
            await sink.write(rows)
        else:
            await sink.write_at(rows, position)

    def _refuse_table(self, table: str, exc: FatalError) -> str:
        """Why ``table`` takes no row, said once (batches written at once share the
        failed opening)."""
        why = self.refused.get(table)
        if why is None:
            why = self.refused[table] = str(exc)
            logger.error("%s: table %s refuses the topic's rows: every row routed to it is "
                         "dead-lettered (the other tables flow on): %s", self.context.label,
                         table, why)
        return why

    async def assigned(self, partitions: Sequence[tuple[str, int]]
                       ) -> dict[tuple[str, int], int]:
        self._held = sorted({*self._held, *partitions})
        for sink in list(self.tables.values()):
            await sink.assigned(partitions)
        return {}

    async def revoked(self, partitions: Sequence[tuple[str, int]], timeout_s: float) -> None:
        gone = set(partitions)
        self._held = [p for p in self._held if p not in gone]
        self._forget_cancelled()
        await asyncio.gather(*(s.revoked(partitions, timeout_s)
                               for s in list(self.tables.values())))

    def flush_soon(self) -> None:
        for sink in self.tables.values():
            sink.flush_soon()

    def hold_flushes(self) -> None:
        for sink in self.tables.values():
            sink.hold_flushes()

    def release_flushes(self) -> None:
        for sink in self.tables.values():
            sink.release_flushes()

    async def close(self) -> None:
        for task in self._opening.values():
            task.cancel()
        errors = []
        for sink in self.tables.values():
            try:
                await sink.close()
            except Exception as exc:  # noqa: BLE001 - close every table, then raise
                errors.append(exc)
        self.tables.clear()
        if errors:
            raise errors[0]


def _tagged(rows: list[Row], table: str) -> list[Row]:
    """``rows`` tagged with their table again, for their dead letters: ``kstage dlq
    replay`` offers such a row to the routed sink, which writes it to that table."""
    for row in rows:
        row[ROUTE_FIELD] = table
    return rows


__all__ = ["RoutedSink"]
