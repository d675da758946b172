"""Gobblin events decoded and mapped as columns against one message at a time (issue 35,
point 4): the CPU per event of what kstage's Python does with a batch before the staging
writer's flush, both ways, on the same batches in one run.

The events are the real-schema Gobblin compaction samples (``service.dev.samples``) in
the Confluent wire format, in partition batches of ``--batch`` (``max_poll_records``'
default: 500). One message at a time: the record pipeline's walk (cavro's decode,
``GobblinCompactionProcessor.transform``) and the staging writer's conversion of the rows
(``record_batch``). As columns: the same walk with the columns on (a block decoded by
DataFusion, ``transform_columns``) and the conversion of those columns
(``column_batch``). Rounds interleave the two; each side's best round counts. The last
line is the ratio of the CPU per event, one at a time over as columns (above 1: columns
take less).

    .venv/bin/python bench/columns.py --events 200000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# the repository, in place of bench/ (whose http.py would hide the standard library's)
sys.path.remove(sys.path[0])
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors.codecs.avro import AvroDecoder, encode
from actors.column_rows import ColumnRows
from actors.failure import FailurePolicy
from actors.sinks.table.columns import COORDINATES
from actors.sinks.table.rows import column_batch, record_batch
from actors.worker.columns import columns_for
from actors.worker.pipeline import RecordPipeline, no_wait
from actors.worker.records import Record
from processors.base import SCHEMA_DIR, Row
from processors.gobblin import GobblinCompactionProcessor
from service.dev.samples import SAMPLE_TOPICS, sample_records
from settings.models import FailureMode, FailureSettings, TopicSettings

COLUMNS = (*GobblinCompactionProcessor.columns, *COORDINATES)


class _Source:
    def __init__(self, text: str) -> None:
        self.text = text

    async def get_schema(self, schema_id: int | str) -> str:
        return self.text


class _Shipped:
    """A route that keeps what the walk shipped, as the worker hands it to the sink."""

    def __init__(self) -> None:
        self.shipped: list[Sequence[Row]] = []

    async def ship(self, rows: Sequence[Row], next_offset: int, count: int,
                   savepoint: bool, *, trace: Any = None) -> None:
        self.shipped.append(rows)

    def drop(self, count: int) -> None:
        raise AssertionError("no message may be dropped")

    def parks(self, exc: Exception) -> bool:
        return False

    def park(self, rest: Sequence[Any], exc: Exception) -> None:
        raise AssertionError("no message may fail")


def _pipeline(text: str, columns: bool) -> RecordPipeline:
    topic = TopicSettings.model_construct(topic="gobblin", processor="gobblin_compaction",
                                          format="avro", key_format="bytes")
    pipeline = RecordPipeline(
        topic=topic, processor=GobblinCompactionProcessor({}), group_id="bench",
        failure=FailurePolicy(FailureSettings(mode=FailureMode.THROW), no_wait),
        avro=AvroDecoder(_Source(text)))
    pipeline.columns = columns_for(pipeline, columns)
    if (pipeline.columns is not None) is not columns:
        raise SystemExit("the columns cannot be used here: is datafusion installed?")
    return pipeline


async def _round(pipeline: RecordPipeline, batches: list[list[Record]]) -> tuple[float, int]:
    """CPU seconds of walking and converting every batch; the rows made."""
    route = _Shipped()
    made = 0
    start = time.process_time()
    for batch in batches:
        await pipeline.walk(batch, route)
        for rows in route.shipped:
            if isinstance(rows, ColumnRows):
                part = column_batch(rows.table, COLUMNS)
                if part is None:
                    raise AssertionError("columns that do not fit the table")
            else:
                part, rejected = record_batch(rows, COLUMNS, "bench")
                if rejected:
                    raise AssertionError(rejected[:1])
            made += part.num_rows
        route.shipped.clear()
    return time.process_time() - start, made


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=500, help="messages per batch")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sample = next(t for t in SAMPLE_TOPICS if t.processor == "gobblin_compaction")
    text = (SCHEMA_DIR / sample.schema_file).read_text()
    from fastavro import parse_schema

    parsed = parse_schema(json.loads(text))
    values = [encode(parsed, 1, r) for r in sample_records(sample, args.events)]
    batches = [[Record("gobblin", 0, offset, 1_700_000_000_000 + offset, None, value)
                for offset, value in enumerate(values[i:i + args.batch], start=i)]
               for i in range(0, len(values), args.batch)]
    pipelines = {"one at a time": _pipeline(text, False), "as columns": _pipeline(text, True)}
    for pipeline in pipelines.values():
        await pipeline.load_schemas(batches[0])
        await _round(pipeline, batches[:2])  # warm: imports, the first block's schema
    best: dict[str, float] = {}
    for n in range(args.rounds):
        for name, pipeline in pipelines.items():
            cpu, made = await _round(pipeline, batches)
            per_event = cpu / args.events * 1e6
            best[name] = min(best.get(name, per_event), per_event)
            print(f"round {n + 1}: {name:13} {per_event:6.2f} us/event of CPU "
                  f"({made} rows, batches of {args.batch})")
    columns = pipelines["as columns"].columns
    assert columns is not None and columns.refusals == 0, columns
    print(f"best: one at a time {best['one at a time']:.2f} us/event, as columns "
          f"{best['as columns']:.2f} us/event ({args.events} events, batches of {args.batch})")
    print(f"ratio={best['one at a time'] / best['as columns']:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
