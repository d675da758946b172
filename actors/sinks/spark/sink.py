"""The Spark sink: rows land in Apache Iceberg staging tables, exactly once per message.

Settings: a topic's ``sink: {type: spark, table: NAME}`` (:class:`SparkSinkSettings`,
validated when the configuration is loaded) and the process-wide ``spark:`` section
(:class:`~settings.models.SparkSettings`, its ``catalog`` the Iceberg catalog).

* :class:`SparkTableSink`: a table sink whose writes run on the process's
  :class:`~actors.sinks.spark.actor.SparkActor` (the Spark and the JDBC sinks).
* :class:`SparkSink` is one worker's handle on a staging table. ``write_at(rows,
  position)`` checks the rows on the event loop and turns those that fit into one Arrow
  record batch (:mod:`actors.sinks.table.rows`; a row with a wrong type or a missing NOT
  NULL value is dead-lettered through the worker's permanent-failure hook), hands it to
  the table's shared :class:`~actors.sinks.spark.staging.StagingWriter` and returns once
  the Iceberg commit holding it is done (durable): the worker then commits their offsets.
  It ``stores_offsets``: every commit records how far each Kafka partition is in the
  table, a worker assigned a partition resumes there, and rows of messages the table
  already holds are dropped (see :mod:`actors.sinks.spark.staging`).

pyspark is imported only inside functions: importing this module does not load it.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, field_validator

from actors.column_rows import rows_from
from actors.errors import FatalError, SinkError
from actors.resources import Resources
from actors.sinks.base import Position, Problem, SinkCapabilities, SinkContext, SinkSettingsBase
from actors.sinks.spark import found_columns, iceberg, partitioning
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.ledger import Stream
from actors.sinks.spark.staging import StagingWriter
from actors.sinks.table.columns import COORDINATES, INGESTED_AT
from actors.sinks.table.exactly_once import ExactlyOnceWriter
from actors.sinks.table.live_follow import ColumnsFollower
from actors.sinks.table.sink import TableSink
from processors.base import Column, Row
from settings.identifiers import TableTemplate, sql_identifier

logger = logging.getLogger(__name__)


def _transform(text: str) -> str:
    partitioning.parse(text)
    return text


class SparkSinkSettings(SinkSettingsBase):
    """Options of ``sink: {type: spark, table: NAME}``."""

    type: Literal["spark"] = Field("spark", description="Sink type.")
    table: TableTemplate | None = Field(
        None, description="Staging table, a SQL identifier (default: the processor's); "
        "{topic} in it stands for the topic's name made safe (see topic_pattern).")
    partition_by: list[Annotated[str, AfterValidator(_transform)]] = Field(
        default_factory=list, description="The table's Iceberg partition transforms, applied "
        "when kstage creates it: col, year/month/day/hour(col), bucket(N, col), truncate(W, "
        "col) (default: day(_ingested_at)); see docs/configuration.md.")
    table_properties: dict[str, str] = Field(
        default_factory=dict, description="Iceberg table properties set when kstage creates "
        "the table (besides its own, which cannot be overridden).")
    topic_templates: ClassVar[tuple[str, ...]] = ("table",)

    @field_validator("partition_by")
    @classmethod
    def _not_redundant(cls, value: list[str]) -> list[str]:
        partitioning.parse_all(value)
        return value

    @field_validator("table_properties", mode="before")
    @classmethod
    def _properties(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        own = sorted(k for k in value if k in iceberg.STAGING_PROPERTIES)
        if own:
            raise ValueError(f"{', '.join(own)}: kstage sets these properties of its staging "
                             "tables (exactly-once appends rely on them); leave them out")
        return {k: (str(v).lower() if isinstance(v, bool) else v if isinstance(v, str)
                    else str(v) if isinstance(v, int | float) else v)
                for k, v in value.items()}

    def layout(self) -> partitioning.Layout:
        """``partition_by`` parsed, with ``table_properties``."""
        return partitioning.Layout(partitioning.parse_all(self.partition_by),
                                   tuple(sorted(self.table_properties.items())))

    def destination(self) -> str:
        table = self.table or "(the processor's)"
        return f"spark table {table}"


class SparkTableSink(TableSink):
    """A table sink whose writes run on the process's :class:`SparkActor` (the Spark and
    the JDBC sinks): the actor passed in, or the one of the process's resources given at
    :meth:`bind`."""

    def __init__(self, settings: Any, actor: SparkActor | None = None,
                 columns: Sequence[Column] = (), table: str | None = None) -> None:
        super().__init__(settings, columns, table)
        self._actor = actor
        self._resources: Resources | None = None
        # Columns from writer schemas (context.live): the sink's own columns added to
        # the processor's, and the version of the processor's columns the table has.
        self._extras: tuple[Column, ...] = ()
        self._following = ColumnsFollower()

    def bind(self, context: SinkContext) -> None:
        """Also take the process's resources (their SparkActor, when none was passed)."""
        super().bind(context)
        self._resources = context.resources

    def _spark(self) -> SparkActor:
        """The actor passed in, or the process's one (from the resources at bind)."""
        if self._actor is None:
            if self._resources is None:
                raise FatalError(f"{self.type} sink: no SparkActor: pass one, or bind the "
                                 "sink with the process's resources (SinkContext.resources)")
            self._actor = self._resources.spark()
        return self._actor

    async def _follow_schema(self) -> None:
        """A processor whose columns come from writer schemas changed them since the
        last write: create or evolve the table (committed) before its rows are written."""
        await self._following.follow(self.context.live, self._evolve)

    @abc.abstractmethod
    async def _evolve(self, live: tuple[Column, ...]) -> None:
        """Create (first) or evolve the table to the processor's ``live`` columns (with
        the sink's own, ``_extras``), committed before it returns."""

    def _stream(self, topic: str, partition: int) -> Stream:
        return (self.context.group, topic, partition)

    async def _write_after_floor(self, writer: ExactlyOnceWriter, rows: Sequence[Row],
                                 position: Position) -> None:
        """Write the rows of one batch through ``writer``, which stores its offsets:
        rows of messages the table already holds (before its offset for the partition)
        are dropped."""
        stream = self._stream(position.tp.topic, position.tp.partition)
        writer.register_batch(stream, position)  # first: writes start in offset order
        floor = writer.floor(stream)
        if floor is None:
            floor = (await writer.load_floors([stream])).get(stream, 0)
        if floor and rows:
            # In place: a retry of this batch passes the same rows (see TableSink.write).
            rows = rows_from(rows, floor)
        if not await self._write(rows, position, stream):
            writer.finished(position)

    async def _assign_to(self, writer: ExactlyOnceWriter,
                         partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Forget the partitions' batches of an earlier ownership, then read the table's
        offsets of them through ``writer``."""
        streams = [self._stream(t, p) for t, p in partitions]
        writer.forget(streams)
        floors = await writer.load_floors(streams)
        return {(topic, partition): offset for (_, topic, partition), offset in floors.items()}

    async def _revoke_from(self, writer: ExactlyOnceWriter,
                           partitions: Sequence[tuple[str, int]], timeout_s: float) -> int:
        """Wait (up to ``timeout_s``) for ``writer``'s running appends of the
        partitions, then forget them; how many still ran after the wait."""
        streams = [self._stream(t, p) for t, p in partitions]
        still = 0
        if not await writer.wait_appends(streams, timeout_s):
            still = writer.running(streams)
        writer.forget(streams)
        return still


class SparkSink(SparkTableSink):
    """One worker's handle on an Iceberg staging table (see the module docstring)."""

    type = "spark"
    settings_model = SparkSinkSettings
    requires = {"pyspark": "kstage[spark]", "pyarrow": "kstage[spark]"}
    capabilities = SinkCapabilities(pipelined=True, needs_columns=True, refuses_rows=True,
                                    stores_offsets=True, deletes=True, evolves_columns=True,
                                    arrow_rows=True)
    settings: SparkSinkSettings
    _writer: StagingWriter | None

    def check(self) -> list[Problem]:
        """The table name must be a plain identifier; the processor must declare
        columns, none named like the sink's own (coordinates, ``_ingested_at``) nor like
        Iceberg's metadata columns."""
        problems: list[Problem] = []
        try:
            sql_identifier(self.table)
        except ValueError as exc:
            problems.append((("sink", "table"), f"spark sink: table name of {self._what()}: "
                             f"{exc}; set sink.table"))
        problems += self._column_problems(
            {*(x.name for x in COORDINATES), "_ingested_at", *iceberg.RESERVED,
             *iceberg.RENAMED.values()})
        if self.columns and not self.context.columns_from_schema:
            # declared columns: the spec is checked now (from writer schemas: kstage
            # validate checks it against the registry's latest, the create in any case)
            problems += [(("sink", "partition_by", i), f"spark sink {self.table}: {why}")
                         for i, why in partitioning.problems(
                             self.settings.layout().transforms, iceberg.table_columns(
                                 (*self.columns, *COORDINATES, INGESTED_AT)))]
        return problems

    async def open(self) -> None:
        self._refuse_problems()
        if self.context.live is not None:
            # Columns from writer schemas: the table is made (or evolved) with the first
            # ones the processor knows, before the rows of that shape (write_at).
            self._extras = self.columns
            found = await self._found_columns()
            if found is not None:  # a restart: writer schemas judged against the table
                self.context.live.table_found(found)
            await self._follow_schema()  # columns known at start: the table made now
            return
        self._writer = self._staging()
        await self._writer.register()

    async def _found_columns(self) -> list[Column] | None:
        """The processor's columns the table already has (None: not made yet)."""
        actor, extras = self._spark(), self._extras
        settings = actor.settings
        try:
            if settings.appends == "pyiceberg":
                lake = actor.lake()
                return await lake.call(lambda: found_columns.through_pyiceberg(
                    lake.catalog(), settings, self.table, extras))

            def run(spark: Any) -> list[Column] | None:
                actor.warm_up(spark)
                return found_columns.through_spark(spark, settings, self.table, extras)
            return await actor.call(run)
        except Exception as exc:  # any catalog failure is a retriable sink error
            raise SinkError(f"spark sink: table {self.table}: cannot read its columns: "
                            f"{exc}") from exc

    async def _evolve(self, live: tuple[Column, ...]) -> None:
        columns = (*live, *self._extras)
        if self._writer is None:
            self.columns = columns
            self._writer = self._staging()
        await self._writer.evolve(columns)
        self.columns = columns

    def _staging(self) -> StagingWriter:
        """The process's writer of this sink's table (created on first use)."""
        actor = self._spark()
        tracked = actor.tracked(self.table)
        if tracked is None:
            tracked = actor.track(StagingWriter(actor, self.table, self.columns,
                                                self.settings.layout()))
        if not isinstance(tracked, StagingWriter):
            raise FatalError(f"spark sink: table {self.table!r} is written by another sink "
                             "type in this process")
        if tracked.layout != self.settings.layout():
            raise FatalError(f"spark sink: table {self.table!r} is written with two "
                             "different partition_by or table_properties in this process")
        if tracked.columns != self.columns and self.context.live is None:
            raise FatalError(f"spark sink: table {self.table!r} is written with two "
                             "different column lists in this process")
        return tracked

    async def write_at(self, rows: Sequence[Row], position: Position) -> None:
        """Write the rows of one batch (see :meth:`TableSink.write`); rows of messages
        the table already holds (before its offset for the partition) are dropped."""
        await self._follow_schema()
        writer = self._writer
        if writer is None:
            if self.context.live is not None and not rows:
                return  # nothing known of the schema, nothing to write
            raise SinkError("spark sink: write before open")
        await self._write_after_floor(writer, rows, position)

    async def assigned(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Read the table's offsets of the assigned partitions (SinkError when it cannot
        be read now: the first write of each partition reads them again).

        An assignment starts the partitions anew: batches of an earlier ownership that
        never finished (a write refused before the revoke, a worker that crashed and was
        restarted) are forgotten first, or the writes from the new position would wait
        for them forever."""
        writer = self._writer
        if writer is None:
            return {}
        return await self._assign_to(writer, partitions)

    async def revoked(self, partitions: Sequence[tuple[str, int]], timeout_s: float) -> None:
        """Wait (up to ``timeout_s``) for running appends of the partitions, then forget
        them: an append of them that has not started writing refuses to (its batches are
        cancelled or its partitions no longer this writer's). One still in its commit
        past the wait (a slow catalog, a wait of 0 on a lost membership) is said; it
        commits only if the table still holds its partitions where it continues from
        (the commit-time fence, :mod:`actors.sinks.spark.iceberg`): the new owner's
        appends and this late one cannot both land the same offsets."""
        writer = self._writer
        if writer is None:
            return
        still = await self._revoke_from(writer, partitions, timeout_s)
        if still:
            logger.warning("spark sink: table %s: %d append(s) of revoked partitions %s "
                           "still running after %.1fs; each commits only if no other "
                           "writer appended its partitions meanwhile (the fence)",
                           writer.name, still, sorted(partitions), timeout_s)


__all__ = ["SparkSink", "SparkSinkSettings", "SparkTableSink"]
