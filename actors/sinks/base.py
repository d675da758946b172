"""The sink contract: what a sink is, what it declares, what it is given.

A sink durably accepts batches of rows: when :meth:`Sink.write` returns, the rows are
safe and their offsets may be committed. Everything else the worker and the sink loop
(:func:`actors.sinks.runner.run_sink`) need to know about a sink is *declared*, never
discovered:

- :attr:`Sink.settings_model`: the pydantic model of the topic's ``sink:`` mapping
  (``type`` plus the sink's own keys; unknown keys are refused);
- :attr:`Sink.capabilities` (:class:`SinkCapabilities`): whether writes may overlap
  (``pipelined``), how many may run at once (``max_concurrency``), whether the sink needs
  the processor's typed columns (``needs_columns``) and whether it reports rows it
  refuses for good (``refuses_rows``);
- :meth:`Sink.bind` hands the sink a :class:`SinkContext` before :meth:`Sink.open`: the
  processor's columns and table, the process settings, the worker's
  :class:`~actors.sink_health.SinkHealth` and the dead-letter handler for refused rows;
- a sink that keeps the Kafka offsets of what it holds in its own commits (an Iceberg
  staging table) declares ``stores_offsets``: the worker then hands it each batch's
  position (:meth:`Sink.write_at`), tells it of assigned and revoked partitions
  (:meth:`Sink.assigned`, :meth:`Sink.revoked`), and resumes a partition where every such
  sink of the topic holds it, when that is ahead of Kafka's committed offset.

Sinks are found by name in the entry-point group ``kstage.sinks``
(:mod:`actors.sinks.registry`); the built-in ones are registered there too.
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

from actors.errors import SinkError
from processors.base import Column, LiveColumns, Row
from settings.models import SinkSettings

if TYPE_CHECKING:
    from actors.resources import Resources
    from actors.sink_health import SinkHealth
    from settings.models import Settings

Problem = tuple[tuple[str | int, ...], str]
"""``(key, why)``: a setting a sink refuses (see :meth:`Sink.check`)."""

RefuseRows = Callable[[list[Row], int, str], Awaitable[None] | None]
"""``(rows, status, reason)``: dead-letter rows a sink refuses for good; ``status`` is the
sink's own code (an HTTP status) or 0. Sync or async."""


SinkSettingsBase = SinkSettings
"""Base of every sink's settings model (the same class as :class:`settings.SinkSettings`,
which validates a topic's ``sink:`` against its type's model): ``type`` names the sink,
unknown keys are refused, values are frozen, inputs stay out of validation errors and the
repr masks values named like secrets (a password in JDBC ``properties``, an
``X-Api-Key`` header). A plugin's model subclasses it and narrows ``type`` to a
``Literal`` of its entry-point name."""


class Position(Protocol):
    """Where a batch of rows comes from, as the worker hands it to :meth:`Sink.write_at`:
    its partition (``tp.topic``, ``tp.partition``) and the offset after its last
    message. ``cancelled``: the partition was revoked (the batch is never acked).
    ``behind``: when the worker shipped it, the partition's high-water mark was past it
    (more than one offset: a transaction's commit marker is never handed over), i.e. a
    backlog waits behind it; ``lag``: how many offsets the high-water mark was past it
    then (0 when it was not known); a micro-batching sink then gathers a larger append
    when the backlog can fill one. One object per batch (its retries pass the same
    one)."""

    @property
    def tp(self) -> Any: ...

    @property
    def next_offset(self) -> int: ...

    @property
    def cancelled(self) -> bool: ...

    @property
    def behind(self) -> bool: ...

    @property
    def lag(self) -> int: ...


@dataclass(frozen=True, slots=True)
class SinkCapabilities:
    """What a sink declares about how it may be driven.

    Attributes:
        pipelined: writes join a shared micro-batch; the sink loop hands every batch over
            without waiting for the previous write to return (acks stay in order).
        max_concurrency: how many writes may run at once, one lane per partition (> 1
            only for sinks whose writes are independent, like HTTP requests).
        needs_columns: the sink writes the processor's typed columns (a table); a
            processor that declares none cannot feed it.
        refuses_rows: the sink may refuse single rows for good (a 4xx answer, a
            constraint) and reports them through :attr:`SinkContext.refuse`.
        stores_offsets: the sink commits, with its rows, how far each Kafka partition is
            in it (see :meth:`Sink.assigned`); the worker hands it positions
            (:meth:`Sink.write_at`).
        deletes: the sink honours deletions (rows with ``_is_deleted`` True, see
            :attr:`Processor.emits_deletes <processors.base.Processor.emits_deletes>`):
            it deletes the key's row or keeps the deletion with its marker. A processor
            that emits deletions cannot feed a sink without it (refused at start).
        evolves_columns: a sink that ``needs_columns`` follows a processor whose columns
            come from writer schemas (:attr:`SinkContext.live`): it creates its table
            with the first ones and evolves it, committed, before rows of a new shape.
            Such a processor cannot feed a table sink without it (refused at start).
        arrow_rows: the sink takes a batch's rows as Arrow columns
            (:class:`~actors.column_rows.ColumnRows`, whose ``table`` it converts without
            a dict per row); when every sink of a topic does, a processor with
            :attr:`~processors.base.Processor.maps_columns` maps whole batches decoded
            straight into columns.
    """

    pipelined: bool = False
    max_concurrency: int = 1
    needs_columns: bool = False
    refuses_rows: bool = False
    stores_offsets: bool = False
    deletes: bool = False
    evolves_columns: bool = False
    arrow_rows: bool = False


@dataclass(frozen=True, slots=True)
class SinkContext:
    """What the worker gives its sink before :meth:`Sink.open`.

    Attributes:
        label: the worker's label for log lines (``group/topic``).
        group: the consumer group id of the worker.
        topic: the topic the rows come from.
        processor: the processor's name.
        columns: the processor's declared columns (empty when it declares none).
        table: the processor's default table name ("" when it has none).
        key: the processor's natural key (:attr:`Processor.key
            <processors.base.Processor.key>`; empty when it declares none).
        emits_deletes: the processor may emit deletions (:attr:`Processor.emits_deletes
            <processors.base.Processor.emits_deletes>`).
        source_order: the processor's source position column (:attr:`Processor.source_order
            <processors.base.Processor.source_order>`), or None.
        settings: the process settings (a sink reads its process-wide section, e.g.
            ``spark:``); None in tests that build a sink alone.
        resources: the process's shared resources (the SparkActor the spark and jdbc
            sinks write with), owned by whoever runs the worker; None in tests that
            build a sink alone.
        health: the worker's sink health; a sink that retries inside ``write`` reports
            each failed attempt there, keyed ``(topic, partition)``.
        refuse: dead-letters rows the sink refuses for good; None: a refusal raises
            :class:`~actors.errors.SinkError` (the batch is retried, nothing is lost).
        record_columns: the names, in order, of the topic's ``columns:`` (the record's
            key, headers, timestamp type) among ``columns``, for problems to name them
            where they are declared.
        columns_from_schema: the processor's columns come from the messages' writer
            schemas (:attr:`Processor.columns_from_schema
            <processors.base.Processor.columns_from_schema>`): ``columns`` then holds only
            the topic's record columns, the processor's are in ``live``.
        live: the running processor's columns (:class:`~processors.base.LiveColumns`),
            for a processor with ``columns_from_schema``; None in ``kstage validate``.
    """

    label: str = ""
    group: str = ""
    topic: str = ""
    processor: str = ""
    columns: tuple[Column, ...] = ()
    table: str = ""
    key: tuple[str, ...] = ()
    emits_deletes: bool = False
    source_order: str | None = None
    settings: Settings | None = None
    resources: Resources | None = None
    health: SinkHealth | None = None
    refuse: RefuseRows | None = None
    record_columns: tuple[str, ...] = ()
    live: LiveColumns | None = None
    columns_from_schema: bool = False


class Sink(abc.ABC):
    """Base class of sinks. ``write`` must only return once the rows are durable.

    Lifecycle: ``from_settings`` (or the constructor), :meth:`bind` once, :meth:`open`,
    any number of :meth:`write` calls (concurrently only as :attr:`capabilities` allow),
    :meth:`close`.

    The worker never reads a batch's rows after handing them to ``write``: a sink may
    keep, transform or empty the list (the Spark and JDBC sinks empty it once the rows
    are converted, to free memory while they wait for their flush). A failed write
    (:class:`~actors.errors.SinkError` or ``OSError``) is retried with the same list
    object, forever, until it succeeds or the partition is revoked.
    """

    type: ClassVar[str] = ""
    settings_model: ClassVar[builtins.type[SinkSettingsBase]] = SinkSettingsBase
    requires: ClassVar[Mapping[str, str]] = {}
    """Python packages the sink needs that kstage does not install by default: import
    name -> what to ``pip install`` (``{"pyspark": "kstage[spark]"}``). A missing one is a
    configuration error: ``kstage validate`` and ``run`` name what to install."""
    capabilities: SinkCapabilities = SinkCapabilities()
    context: SinkContext = SinkContext()

    @classmethod
    def from_settings(cls, settings: SinkSettingsBase) -> Self:
        """Build the sink from its validated settings (an instance of
        :attr:`settings_model`). The default calls ``cls(settings)``."""
        return cls(settings)  # type: ignore[call-arg]

    def bind(self, context: SinkContext) -> None:
        """Receive the worker's context; called once, before :meth:`open`."""
        self.context = context

    def check(self) -> list[Problem]:
        """What :meth:`open` would refuse in the bound context, found without opening
        anything: ``(key, why)`` pairs, ``key`` relative to the topic's settings
        (``("sink", "table")``, ``("processor",)``). ``kstage validate`` and ``run`` report
        them with file and line before anything starts. The default finds a sink that
        needs typed columns (:attr:`SinkCapabilities.needs_columns`) fed by a processor
        that declares none, and one that cannot take deletions
        (:attr:`SinkCapabilities.deletes`) fed by a processor that emits them; a sink that
        overrides it adds its own checks to these."""
        processor = (f"processor {self.context.processor!r}" if self.context.processor
                     else "the processor")
        if self.context.emits_deletes and not self.capabilities.deletes:
            return [(("processor",), f"{processor} emits deletions and a {self.type} sink "
                     "cannot take them (its SinkCapabilities.deletes is False); use a sink "
                     "that can (jsonl, http, spark, jdbc)")]
        if (self.capabilities.needs_columns and self.context.columns_from_schema
                and not self.capabilities.evolves_columns):
            return [(("processor",), f"{processor} takes its columns from the writer "
                     f"schemas and a {self.type} sink cannot evolve its table with them "
                     "(its SinkCapabilities.evolves_columns is False); use a spark or jdbc sink")]
        if (self.capabilities.needs_columns and not self.context.columns
                and not self.context.columns_from_schema):
            return [(("processor",), f"{processor} declares no columns; a {self.type} sink "
                     "writes a typed table and needs them (use a processor with columns, "
                     "or another sink type)")]
        if self.capabilities.needs_columns and self.context.emits_deletes:
            required = [c.name for c in self.context.columns
                        if not c.nullable and c.name not in self.context.key]
            if required:
                return [(("processor",), f"{processor} emits deletions, which carry only "
                         f"the key ({', '.join(self.context.key) or 'none declared'}), but "
                         f"declares column(s) {', '.join(required)} NOT NULL; make them "
                         "nullable")]
        return []

    @property
    def health(self) -> SinkHealth | None:
        """The worker's sink health (None before :meth:`bind`)."""
        return self.context.health

    async def refuse(self, rows: list[Row], status: int, reason: str) -> None:
        """Hand rows refused for good to the worker, which dead-letters them; without a
        handler the refusal is a :class:`SinkError` (the batch is retried)."""
        handler = self.context.refuse
        if handler is None:
            raise SinkError(f"{self.type} sink: {len(rows)} row(s) refused (status {status}) "
                            f"and no dead-letter handler: {reason[:200]}")
        result = handler(rows, status, reason)
        if result is not None:
            await result

    def flush_soon(self) -> None:  # noqa: B027 - optional hook
        """The worker cannot send more rows until some are acknowledged: a sink that
        gathers rows for a later flush should flush now. Default: nothing to do."""

    def hold_flushes(self) -> None:  # noqa: B027 - optional hook
        """The caller hands over more rows right away, without positions (``kstage dlq
        replay`` hands over every letter before it waits for any): a sink that gathers
        rows for a later flush gathers them all (up to its size and interval bounds)
        until :meth:`release_flushes`. Default: nothing to do."""

    def release_flushes(self) -> None:  # noqa: B027 - optional hook
        """The end of :meth:`hold_flushes`: flush what was gathered now."""

    async def open(self) -> None:  # noqa: B027 - optional hook
        """Open files or clients."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release what :meth:`open` acquired."""

    @abc.abstractmethod
    async def write(self, rows: Sequence[Row]) -> None:
        """Durably accept ``rows``; raise SinkError (retried) when that failed."""

    async def write_at(self, rows: Sequence[Row], position: Position) -> None:
        """:meth:`write` of the rows of one batch, at ``position``; what the worker calls.
        The default ignores the position; a sink that ``stores_offsets`` commits it."""
        await self.write(rows)

    async def assigned(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The worker was assigned ``partitions`` ((topic, partition) pairs): a sink that
        ``stores_offsets`` returns, per partition it holds, the offset before which every
        message is in it (done: its rows written, or it had none); the worker resumes
        there when every sink of the topic is ahead of Kafka's committed offset. Raises
        SinkError when the sink cannot tell now (the worker then reads from the committed
        offset, and the sink drops what it holds already). Default: nothing."""
        return {}

    def offsets_holder(self) -> str:
        """What holds the offsets a sink that ``stores_offsets`` returns from
        :meth:`assigned`, for messages (a table sink: its table)."""
        return f"the {self.type} sink"

    def offsets_reset(self, group: str, topic: str, partition: int) -> str:
        """How an operator resets the offset of a partition a sink that
        ``stores_offsets`` holds past its high-water mark (named in the refusal).
        Default: ``kstage tables reset-offsets`` (the Iceberg staging tables')."""
        return (f"`kstage tables reset-offsets --group {group} --topic {topic} --partition "
                f"{partition}` (a dry run; --yes to record the reset in the table)")

    async def revoked(  # noqa: B027 - optional hook
            self, partitions: Sequence[tuple[str, int]], timeout_s: float) -> None:
        """The worker lost ``partitions``: a sink that ``stores_offsets`` waits (at most
        ``timeout_s``) for its writes of them already under way, so their next owner reads
        the offsets it committed. Default: nothing."""
