"""One worker's handle on a table written by a shared, micro-batching
:class:`~actors.sinks.table.batching.TableWriter`: :class:`TableSink`, the base of the
table sinks (Spark staging tables, JDBC).

What it does for them: it takes the processor's typed columns and default table at
:meth:`~TableSink.bind`; it checks what ``open`` would refuse (no columns, column names
that are not identifiers or are the sink's own); its writes are ``pipelined`` (they join
the table's shared micro-batch, so the sink loop hands batches over without waiting); a
row that does not fit its declared types, or that the table refuses for good, is
dead-lettered through the worker's handler, once, even when the batch is retried.
A subclass checks its table name, opens its writer in ``open`` and declares its
settings model.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Protocol

from actors.errors import FatalError, SinkError
from actors.sinks.base import Problem, Sink, SinkCapabilities, SinkContext
from actors.sinks.table.batching import RowsRefused, TableWriter
from processors.base import Column, Row
from settings.identifiers import IDENTIFIER


class _TableSettings(Protocol):
    """What :class:`TableSink` reads of a sink's settings."""

    @property
    def table(self) -> str | None: ...


class TableSink(Sink):
    """One worker's handle on a table written by a shared :class:`TableWriter` (the
    Spark and the JDBC sinks): binding, pipelined writes, refused rows, retries.
    Subclasses open their writer in :meth:`open`."""

    # Writes join a shared micro-batch: the sink loop does not wait for one to return.
    capabilities = SinkCapabilities(pipelined=True, needs_columns=True, refuses_rows=True,
                                    deletes=True)

    def __init__(self, settings: _TableSettings, columns: Sequence[Column] = (),
                 table: str | None = None) -> None:
        self.settings = settings
        self._table_setting = settings.table
        self.columns: tuple[Column, ...] = tuple(columns)
        self.table = settings.table or table or ""
        self.processor = ""
        self._writer: TableWriter | None = None
        # Batches whose append failed, with their rows that fit: a retry of the same batch
        # does not dead-letter its refused rows again.
        self._failed: dict[int, tuple[Sequence[Row], Any]] = {}

    def bind(self, context: SinkContext) -> None:
        """Take the processor's columns and table. Called before :meth:`open`."""
        super().bind(context)
        self.columns = tuple(context.columns)
        self.table = self._table_setting or context.table or self.table
        self.processor = context.processor

    def offsets_holder(self) -> str:
        return f"{self.type} table {self.table!r}"

    def _what(self) -> str:
        return f"processor {self.processor!r}" if self.processor else "the processor"

    def _column_problems(self, reserved: Collection[str]) -> list[Problem]:
        """The processor's columns: none declared, or names that are not plain
        identifiers or are ``reserved`` (the sink's own columns)."""
        if self.context.columns_from_schema and not self.capabilities.evolves_columns:
            return [(("processor",), f"{self.type} sink: {self._what()} takes its columns "
                     f"from the writer schemas and a {self.type} sink cannot evolve table "
                     f"{self.table!r} with them yet; use a spark or jdbc sink")]
        if not self.columns and not self.context.columns_from_schema:
            return [(("processor",), f"{self.type} sink: {self._what()} declares no columns "
                     f"for table {self.table!r}; a {self.type} sink needs a typed schema")]
        declared = self.context.record_columns
        bad = [c.name for c in self.columns
               if not IDENTIFIER.match(c.name) or c.name in reserved]
        own = [name for name in bad if name not in declared]
        problems: list[Problem] = []
        if own:
            problems.append((("processor",), f"{self.type} sink {self.table}: bad or reserved "
                             f"column names {own} (of {self._what()})"))
        problems += [(("columns", declared.index(name), "name"), f"{self.type} sink "
                      f"{self.table}: column name {name!r} is reserved by the sink; choose "
                      "another name") for name in bad if name in declared]
        return problems

    def _refuse_problems(self) -> None:
        """FatalError naming the first problem :meth:`check` finds (``open`` of a sink
        that ``kstage validate`` or the start of ``run`` did not check)."""
        problems = self.check()
        if problems:
            raise FatalError(problems[0][1])

    def flush_soon(self) -> None:
        """The worker cannot send more rows: flush the table's pending rows early."""
        if self._writer is not None:
            self._writer.flush_soon()

    def hold_flushes(self) -> None:
        """Gather the rows handed over without positions into one append (see
        :meth:`TableWriter.hold_flushes`)."""
        if self._writer is not None:
            self._writer.hold_flushes()

    def release_flushes(self) -> None:
        if self._writer is not None:
            self._writer.release_flushes()

    async def write(self, rows: Sequence[Row]) -> None:
        await self._write(rows)

    async def _write(self, rows: Sequence[Row], batch: Any = None, stream: Any = None,
                     ) -> int:
        """Convert ``rows`` (dead-lettering those that do not fit), hand the rest to the
        table's writer with the worker's ``batch`` and ``stream``, and wait until they are
        written; returns how many rows were written."""
        if self._writer is None:
            raise SinkError(f"{self.type} sink: write before open")
        failed = self._failed.get(id(rows))
        if failed is not None and failed[0] is rows:
            good = failed[1]  # the worker retries the batch: refused rows are done
        else:
            good, rejected = self._writer.convert(rows)
            for row, reason in rejected:
                # A row that does not fit its declared types never will: dead-letter it
                # (the worker's handler) instead of retrying the batch forever.
                await self.refuse([row], 0, reason)
            if isinstance(rows, list):
                # The sink owns the batch's rows now (the worker never reads them back):
                # drop the dicts while the converted rows wait for their flush. A retry
                # passes this same, emptied list and finds the converted rows in _failed.
                rows.clear()
        try:
            while True:  # each round takes at least one refused row off ``good``
                try:
                    await self._writer.write(good, batch=batch, stream=stream)
                except RowsRefused:
                    self._failed[id(rows)] = (rows, good)
                    await self._report_refused(self._writer, good)
                    continue
                break
        except SinkError:
            self._failed[id(rows)] = (rows, good)  # kept for the retry of this batch
            await self._report_refused(self._writer, good)
            raise
        except BaseException:
            self._failed.pop(id(rows), None)
            raise
        self._failed[id(rows)] = (rows, good)  # a failed dead-letter write is retried
        await self._report_refused(self._writer, good)
        self._failed.pop(id(rows), None)
        return len(good)

    async def _report_refused(self, writer: TableWriter, part: Any) -> None:
        """Dead-letter the rows the table refused while ``part`` was written (e.g. a
        PostgreSQL constraint), each once: a row leaves the list once reported."""
        refused = writer.refused(part)
        while refused:
            row, reason = refused[0]
            await self.refuse([row], 0, reason)
            refused.pop(0)
