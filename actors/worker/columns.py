"""A partition batch decoded and mapped at once, as columns (issue 35, point 4).

:meth:`RecordPipeline.walk <actors.worker.pipeline.RecordPipeline.walk>` tries
:meth:`BatchColumns.rows` first on its hot path when the topic allows it (see
:func:`columns_for`, which the worker's parts call once its sinks are open):
the batch's registry Avro values, all of one writer schema, are decoded into one Arrow
table (:mod:`actors.codecs.avro_block`), the processor maps the table
(:meth:`Processor.transform_columns <processors.base.Processor.transform_columns>`), and
the Kafka coordinates are added as columns. What comes out is
:class:`~actors.column_rows.ColumnRows`, the same rows ``transform`` would have made.

Anything else is None, and the walk goes one message at a time, as it always did: a batch
of fewer than :data:`MIN_BATCH` messages, a null
value, a header that is not the wire format, two writer schemas in one batch, a writer
schema read with resolution or recursive, a block that does not decode (a hostile or
truncated body: see :mod:`actors.codecs.avro_block`), or a value the processor's checks
refuse. The messages at fault are then named and dead-lettered by the usual path. A
writer schema whose batches keep being refused is left to the usual path after
:data:`GIVE_UP_AFTER` refusals in a row (logged once).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

from actors.codecs import avro_block
from actors.codecs.avro import AvroDecoder
from actors.codecs.avro_block import AvroBlocks, BlockRefused, marked_schema
from actors.column_rows import ColumnRows
from actors.worker.records import RecordLike
from processors.base import Processor
from settings.models import TopicSettings

logger = logging.getLogger(__name__)

MIN_BATCH = 128
"""Fewer messages than this go one at a time: a block costs about a millisecond and the
mapping a few whatever their count, which only a batch this large pays back (a live
topic's small batches stay as quick as ever)."""

GIVE_UP_AFTER = 3
"""Batches of one writer schema refused in a row after which its batches go one message
at a time for good (in this worker)."""


class BatchColumns:
    """Decodes and maps whole batches of one topic's registry Avro values.

    Args:
        decoder: the topic's value decoder (its cached writer schemas).
        processor: the running processor (:attr:`Processor.maps_columns`).
        label: the worker's name in log lines.
        blocks: the block decoder (default: a new one).
        min_batch: batches of fewer messages go one at a time (:data:`MIN_BATCH`).
    """

    def __init__(self, decoder: AvroDecoder, processor: Processor, *, label: str = "",
                 blocks: AvroBlocks | None = None, min_batch: int = MIN_BATCH) -> None:
        self.decoder = decoder
        self.min_batch = min_batch
        self.processor = processor
        self.label = label
        self.blocks = blocks or AvroBlocks()
        self._marked: dict[bytes, str | None] = {}  # id bytes -> marked writer schema
        self._refused: dict[bytes, int] = {}  # id bytes -> batches refused in a row
        self.batches = 0  # batches mapped as columns
        self.refusals = 0  # batches tried and sent one message at a time

    def __repr__(self) -> str:
        return (f"<BatchColumns {self.label} batches={self.batches} "
                f"refusals={self.refusals}>")

    def rows(self, records: Sequence[RecordLike]) -> ColumnRows | None:
        """The rows of ``records`` (one partition's, in offset order) as columns, or None:
        walk them one message at a time (see the module doc)."""
        if len(records) < self.min_batch:
            return None
        decoder, end = self.decoder, self.decoder.header_size
        id_bytes = decoder.header_id(records[0].value)
        if id_bytes is None or any(  # a tombstone, a bad header, another writer schema
                decoder.header_id(r.value) != id_bytes for r in records):
            return None
        marked = self._marked_schema(id_bytes)
        if marked is None or self._refused.get(id_bytes, 0) >= GIVE_UP_AFTER:
            return None
        try:
            values = self.blocks.decode(
                marked, [r.value[end:] for r in records])  # type: ignore[index]
            mapped = self.processor.transform_columns(values)
        except BlockRefused as exc:
            self._refuse(id_bytes, records, str(exc))
            return None
        if mapped is None:
            self._refuse(id_bytes, records, "a value the processor's checks refuse")
            return None
        self._refused.pop(id_bytes, None)
        self.batches += 1
        first = records[0]
        logger.debug("%s: %s[%d]@%d..%d as columns (%d messages)", self.label, first.topic,
                     first.partition, first.offset, records[-1].offset, len(records))
        return ColumnRows(_with_coordinates(mapped.table, mapped.source, records))

    def _marked_schema(self, id_bytes: bytes) -> str | None:
        if id_bytes not in self._marked:
            text = self.decoder.plain_writer(id_bytes)
            self._marked[id_bytes] = None if text is None else marked_schema(text)
        return self._marked[id_bytes]

    def _refuse(self, id_bytes: bytes, records: Sequence[RecordLike], why: str) -> None:
        self.refusals += 1
        count = self._refused[id_bytes] = self._refused.get(id_bytes, 0) + 1
        first = records[0]
        sid = self.decoder.schema_id(id_bytes)
        logger.debug("%s: %s[%d]@%d..%d (schema id %s) one message at a time: %s",
                     self.label, first.topic, first.partition, first.offset,
                     records[-1].offset, sid, why)
        if count == GIVE_UP_AFTER:
            logger.info("%s: batches of writer schema id %s refused %d times in a row as "
                        "columns (last: %s); they go one message at a time from now on",
                        self.label, sid, count, why)


class Walk(Protocol):
    """What :func:`columns_for` reads of a :class:`~actors.worker.pipeline.RecordPipeline`."""

    topic: TopicSettings
    processor: Processor
    avro: Any
    filter: Any
    stats: dict[str, int]
    label: str

    @property
    def sync(self) -> bool: ...


def columns_for(pipeline: Walk, sinks_take_arrow: bool) -> BatchColumns | None:
    """The :class:`BatchColumns` of ``pipeline``'s topic, or None when it does not allow
    them: every sink must take Arrow rows (``sinks_take_arrow``), the processor map
    columns, the values be registry Avro read as written, the walk's hot path apply
    with no filter, and the block decoder be installed."""
    decoder = pipeline.avro
    if not (sinks_take_arrow and pipeline.processor.maps_columns and pipeline.sync
            and pipeline.filter is None and isinstance(decoder, AvroDecoder)
            and pipeline.topic.format == "avro" and avro_block.available()):
        return None
    try:
        columns = BatchColumns(decoder, pipeline.processor, label=pipeline.label)
    except Exception as exc:  # noqa: BLE001 - an engine that does not load: as before
        logger.warning("%s: batches go one message at a time: the block decoder does not "
                       "load (%s: %s)", pipeline.label, type(exc).__name__, exc)
        return None
    pipeline.stats.setdefault("as_columns", 0)  # messages mapped as columns (/metrics)
    logger.info("%s: batches of one writer schema are decoded and mapped as columns",
                pipeline.label)
    return columns


def _with_coordinates(table: Any, source: Any, records: Sequence[RecordLike]) -> Any:
    """``table`` with the Kafka coordinate columns of the message of each row
    (``source``: its index in ``records``), as :func:`processors.base.with_coordinates`
    adds them."""
    import pyarrow as pa

    first = records[0]
    n = table.num_rows
    offsets = pa.array([r.offset for r in records], pa.int64()).take(source)
    stamps = pa.array([r.timestamp for r in records], pa.int64()).take(source)
    return (table.append_column("_topic", pa.repeat(pa.scalar(first.topic, pa.string()), n))
            .append_column("_partition", pa.repeat(pa.scalar(first.partition, pa.int32()), n))
            .append_column("_offset", offsets).append_column("_timestamp", stamps))


__all__ = ["GIVE_UP_AFTER", "MIN_BATCH", "BatchColumns", "Walk", "columns_for"]
