"""Batches decoded and mapped as columns (issue 35, point 4): the same rows as one
message at a time, and every refusal (hostile bodies, two writer schemas, values the
processor's checks refuse, a block file that cannot be written) falls back to one
message at a time, where the message at fault is named and dead-lettered as ever."""

from __future__ import annotations

import io
import json
import logging
import random
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from actors.codecs.avro import AvroDecoder, encode
from actors.codecs.avro_block import AvroBlocks, BlockRefused, marked_schema
from actors.column_rows import ColumnRows, rows_from
from actors.failure import FailurePolicy
from actors.sinks.table.columns import COORDINATES
from actors.sinks.table.rows import column_batch, record_batch
from actors.worker.columns import GIVE_UP_AFTER, MIN_BATCH, BatchColumns, columns_for
from actors.worker.pipeline import RecordPipeline, no_wait
from actors.worker.records import Record
from processors.base import Column, Processor
from processors.errors import PoisonMessage
from processors.gobblin import GobblinCompactionProcessor, GobblinDistcpProcessor
from settings.models import FailureMode, FailureSettings, TopicSettings
from tests.gobblin_events import event
from tests.hostile_corpus import AVRO_STRING, CASES, _zigzag, run_child
from tests.kafkautil import CHILD_PATH

GOBBLIN = (Path(__file__).parents[2] / "processors/schemas/wherehows/"
           "GobblinTrackingEvent.avsc").read_text()
CLUSTERS = [{"code": "ltx1-holdem", "short_name": "holdem"},
            {"code": "lva1-war", "short_name": "war"}]


class Source:
    """A registry of schemas by id."""

    def __init__(self, *texts: str) -> None:
        self.texts = dict(enumerate(texts, start=1))

    async def get_schema(self, schema_id: int | str) -> str:
        return self.texts[int(schema_id)]


def body(value: dict[str, Any], text: str = GOBBLIN) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(json.loads(text)), value)
    return out.getvalue()


def _string(text: str) -> bytes:
    data = text.encode()
    return _zigzag(len(data)) + data


def gobblin_wire(value: dict[str, Any]) -> bytes:
    """A GobblinTrackingEvent (schema id 1) whose metadata is a list of pairs: a map that
    may give a key twice, as a hostile producer may (fastavro writes dicts only)."""
    namespace = value["namespace"]
    pairs = value["metadata"]
    return (b"\x00\x00\x00\x00\x01" + _zigzag(value["timestamp"])
            + (_zigzag(1) if namespace is None else _zigzag(0) + _string(namespace))
            + _string(value["name"])
            + (_zigzag(len(pairs)) + b"".join(_string(k) + _string(v) for k, v in pairs)
               if pairs else b"") + _zigzag(0))


def records(values: list[Any], schema_id: int = 1, text: str = GOBBLIN,
            start: int = 0) -> list[Record]:
    schema = fastavro.parse_schema(json.loads(text))
    return [Record("gobblin", 3, start + i, 1_700_000_000_000 + i, None,
                   v if isinstance(v, bytes) else gobblin_wire(v)
                   if isinstance(v["metadata"], list) else encode(schema, schema_id, v))
            for i, v in enumerate(values)]


def pipeline(processor: Processor, *texts: str, tmp: Path | None = None,
             columns: bool = True) -> RecordPipeline:
    settings = (FailureSettings(mode=FailureMode.THROW) if tmp is None else
                FailureSettings(mode=FailureMode.CONTINUE,
                                dead_letter_path=str(tmp / "dead.jsonl")))
    topic = TopicSettings.model_construct(topic="gobblin", processor=processor.name,
                                          format="avro", key_format="bytes")
    built = RecordPipeline(topic=topic, processor=processor, group_id="g",
                           failure=FailurePolicy(settings, no_wait),
                           avro=AvroDecoder(Source(*(texts or (GOBBLIN,)))))
    built.columns = columns_for(built, columns)
    assert (built.columns is not None) is columns
    if built.columns is not None:
        built.columns.min_batch = 1  # small batches here (MIN_BATCH: the next test)
    return built


async def test_a_batch_below_the_minimum_goes_one_message_at_a_time() -> None:
    columnar = pipeline(GobblinCompactionProcessor({}))
    assert columnar.columns is not None
    columnar.columns.min_batch = MIN_BATCH
    assert len(await columnar.rows(records([event(i) for i in range(MIN_BATCH - 1)]),
                                   policy=False)) == MIN_BATCH - 1
    assert (columnar.columns.batches, columnar.columns.refusals) == (0, 0)
    assert len(await columnar.rows(records([event(i) for i in range(MIN_BATCH)]),
                                   policy=False)) == MIN_BATCH
    assert (columnar.columns.batches, columnar.columns.refusals) == (1, 0)


@pytest.mark.parametrize("text", [
    "+5", "+-5", "++5", " 5", "5 ", "\u0663", "", "9223372036854775807",
    "9223372036854775808", "-9223372036854775808", "-9223372036854775809", "0x1", "1e3",
    "-0", "+0", "00012", "2147483648", "-2147483649", "5\n"])
@pytest.mark.parametrize("bits", [64, 32])
def test_numbers_parse_as_javas_parse_long_or_are_refused(text: str, bits: int) -> None:
    from processors.gobblin import parse_long
    from processors.gobblin_columns import _Events, _Refused

    values = pa.table({"timestamp": [1], "name": ["n"], "metadata": pa.array(
        [[("k", text)]], pa.map_(pa.string(), pa.string()))})
    try:
        want: int | None = parse_long(text, "k", bits=bits)
    except PoisonMessage:
        want = None
    try:
        got = _Events(values).long("k", bits=bits).to_pylist()[0]
    except _Refused:
        got = None
    assert got == want


def dead(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "dead.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def varied(rng: random.Random, i: int) -> dict[str, Any]:
    """A Gobblin event of any kind, with keys missing, repeated, signed or zero-padded
    numbers and text beyond ASCII: every one a value transform takes."""
    kind = rng.choice(["CompactionCompleted", "CompactionRecordCounts", "DatasetPublished",
                       "Other"])
    namespace = {"DatasetPublished": "gobblin.copy.CopyDataPublisher"}.get(
        kind, rng.choice(["compaction.tracking.events", "compaction.tracking.events",
                          "elsewhere", None]))
    meta = {"clusterIdentifier": rng.choice(["ltx1-holdemrm01", "war-gw", "x-holdem",
                                             "éléphant", ""])}
    numbers = ["7", "+12", "-3", "007", str(2**62), None]
    if kind == "CompactionCompleted":
        meta["datasetUrn"] = f"/data/tracking/E{i}"
        for key, value in (("partition", "2016/07/13/00"), ("recordCount", rng.choice(numbers)),
                           ("RegularRecordCount", "not a number")):
            if value is not None and rng.random() < 0.8:
                meta[key] = value
    elif kind == "CompactionRecordCounts":
        meta["DatasetOutputPath"] = rng.choice([
            "/data/tracking/AdClick/daily/2016/07/13", "/a/b/c-d/hourly/9ü",
            "/data/tracking/X/h-1/0"])
        for key in ("RegularRecordCount", "LateRecordCount"):
            if (value := rng.choice(numbers)) is not None:
                meta[key] = value
    else:
        meta.update({"datasetUrn": f"/d/{i}", "partition": "[\"2016-07-10-00\"]",
                     "upstreamTimestamp": rng.choice(["1", "+2", "-0"]),
                     "SourcePath": "/s", "TargetPath": "/t"})
    for key in ("dedupeStatus", "azkabanProjectName", "azkabanFlowId", "azkabanJobId"):
        if rng.random() < 0.5:
            meta[key] = f"{key}-{i}"
    if rng.random() < 0.5:
        meta["azkabanExecId"] = rng.choice(["42", str(2**31 - 1), "-2147483648", "+5"])
    items = list(meta.items())
    if rng.random() < 0.1:  # a key given twice: the last one counts, as in the dict
        items.insert(0, ("clusterIdentifier", "first-one"))
    return {"timestamp": 1468368000000 + i, "namespace": namespace, "name": kind,
            "metadata": items}


def as_dict(value: dict[str, Any]) -> dict[str, Any]:
    return {**value, "metadata": dict(value["metadata"])}


@pytest.mark.parametrize("processor_cls", [GobblinCompactionProcessor, GobblinDistcpProcessor])
@pytest.mark.parametrize("clusters", [[], CLUSTERS])
async def test_columns_give_the_rows_of_one_message_at_a_time(
        processor_cls: type[Processor], clusters: list[Any]) -> None:
    rng = random.Random(35)  # noqa: S311 - reproducible test data, not crypto
    values = [varied(rng, i) for i in range(600)]
    batch = records(values)
    columnar = pipeline(processor_cls({"clusters": clusters}))
    got = await columnar.rows(batch, policy=False)
    assert columnar.columns is not None
    assert (columnar.columns.batches, columnar.columns.refusals) == (1, 0)
    assert isinstance(got, list) and got  # Collect's list, extended from ColumnRows
    one_by_one = pipeline(processor_cls({"clusters": clusters}), columns=False)
    want = await one_by_one.rows(batch, policy=False)
    assert got == want
    # and those rows are what transform makes of the decoded dicts themselves
    processor = processor_cls({"clusters": clusters})
    from processors.base import Message
    direct = [row for i, v in enumerate(values) for row in processor.transform(Message(
        "gobblin", 3, i, 1_700_000_000_000 + i, None, as_dict(v), (), None))]
    assert got == direct


async def test_the_real_events_land_as_columns_in_the_staging_batch(
        caplog: pytest.LogCaptureFixture) -> None:
    batch = records([event(i) for i in range(50)])
    columnar = pipeline(GobblinCompactionProcessor({}))
    assert columnar.columns is not None
    await columnar.load_schemas(batch)
    caplog.set_level(logging.DEBUG, logger="actors.worker.columns")
    rows = columnar.columns.rows(batch)
    assert isinstance(rows, ColumnRows) and len(rows) == 50
    # each batch as columns is named at DEBUG (bench/chaos.py --format avro counts them)
    assert [r.getMessage().rsplit(": ", 1)[1] for r in caplog.records] == [
        "gobblin[3]@0..49 as columns (50 messages)"]
    columns = (*GobblinCompactionProcessor.columns, *COORDINATES)
    fast = column_batch(rows.table, columns)
    slow, rejected = record_batch(list(rows), columns, "t")
    assert rejected == [] and fast is not None and fast.equals(slow)


@pytest.mark.parametrize("hostile", ["truncated", "trailing", "random", "huge length",
                                     "bad utf-8", "empty"])
async def test_a_hostile_body_sends_the_batch_one_message_at_a_time(
        hostile: str, tmp_path: Path) -> None:
    good = [event(i) for i in range(9)]
    batch = records(good)
    head, ok = batch[4].value[:5], batch[4].value[5:]  # type: ignore[index]
    noise = random.Random(1).randbytes(40)  # noqa: S311 - test data, not crypto
    bad = {"truncated": ok[:-3], "trailing": ok + b"\x02", "random": noise,
           "huge length": b"\x80\x80\x80\x80\x80\x80\x80\x80\x01" + ok,
           "bad utf-8": ok.replace(b"compaction.tracking.events",
                                   b"compaction\xff\xferacking.events"),
           "empty": b""}[hostile]
    batch[4] = Record("gobblin", 3, 4, 0, None, head + bad)
    columnar = pipeline(GobblinCompactionProcessor({}), tmp=tmp_path)
    rows = await columnar.rows(batch)
    assert columnar.columns is not None
    assert (columnar.columns.batches, columnar.columns.refusals) == (0, 1)
    letters = dead(tmp_path)
    if letters:  # poison: dead-lettered with its coordinates, the others all landed
        assert [(d["partition"], d["offset"]) for d in letters] == [(3, 4)]
        assert "Avro" in letters[0]["error"]
        assert sorted(r["_offset"] for r in rows) == [0, 1, 2, 3, 5, 6, 7, 8]
    else:  # a body that still decodes one message at a time (trailing bytes) lands
        assert hostile == "trailing"
        assert sorted(r["_offset"] for r in rows) == list(range(9))


async def test_values_the_processor_refuses_are_named_one_message_at_a_time(
        tmp_path: Path) -> None:
    values = [event(i) for i in range(6)]
    del values[2]["metadata"]["clusterIdentifier"]
    values[3]["metadata"]["recordCount"] = "12x"  # odd offset: CompactionCompleted
    columnar = pipeline(GobblinCompactionProcessor({}), tmp=tmp_path)
    rows = await columnar.rows(records(values))
    assert columnar.columns is not None and columnar.columns.refusals == 1
    letters = dead(tmp_path)
    assert [d["offset"] for d in letters] == [2, 3]
    assert "clusterIdentifier" in letters[0]["error"]
    assert "recordCount" in letters[1]["error"] and "12x" in letters[1]["error"]
    assert sorted(r["_offset"] for r in rows) == [0, 1, 4, 5]


async def test_two_writer_schemas_or_a_tombstone_go_one_message_at_a_time(
        tmp_path: Path) -> None:
    evolved = json.loads(GOBBLIN)
    evolved["fields"].append({"name": "extra", "type": ["null", "string"], "default": None})
    evolved_text = json.dumps(evolved)
    columnar = pipeline(GobblinCompactionProcessor({}), GOBBLIN, evolved_text, tmp=tmp_path)
    mixed = records([event(0), event(1)]) + records(
        [{**event(2), "extra": "x"}], schema_id=2, text=evolved_text, start=2)
    assert len(await columnar.rows(mixed)) == 3
    tombstone = [*records([event(0)]), Record("gobblin", 3, 1, 0, None, None)]
    assert len(await columnar.rows(tombstone)) == 1
    assert [(d["offset"], d["value"]) for d in dead(tmp_path)] == [(1, None)]
    assert columnar.columns is not None
    assert (columnar.columns.batches, columnar.columns.refusals) == (0, 0)
    # the evolved schema alone maps as columns: the extra field is not read
    alone = records([{**event(i), "extra": "x"} for i in range(4)], schema_id=2,
                    text=evolved_text)
    assert len(await columnar.rows(alone)) == 4
    assert columnar.columns.batches == 1


async def test_a_schema_refused_again_and_again_is_left_to_one_message_at_a_time(
        tmp_path: Path) -> None:
    columnar = pipeline(GobblinCompactionProcessor({}), tmp=tmp_path)
    columns = columnar.columns
    assert columns is not None
    for n in range(GIVE_UP_AFTER + 2):
        values = [event(i) for i in range(4)]
        del values[1]["metadata"]["clusterIdentifier"]
        await columnar.rows(records(values, start=10 * n))
    assert columns.refusals == GIVE_UP_AFTER and columns.batches == 0
    assert len(dead(tmp_path)) == GIVE_UP_AFTER + 2  # every bad one dead-lettered


async def test_a_block_file_that_cannot_be_written_is_a_refusal(tmp_path: Path) -> None:
    columnar = pipeline(GobblinCompactionProcessor({}))
    assert columnar.avro is not None
    gone = tmp_path / "gone"  # a directory that is not there: as a full or read-only one
    columnar.columns = BatchColumns(columnar.avro, columnar.processor,  # type: ignore[arg-type]
                                    blocks=AvroBlocks(str(gone)), min_batch=1)
    batch = records([event(i) for i in range(5)])
    assert len(await columnar.rows(batch, policy=False)) == 5
    assert (columnar.columns.batches, columnar.columns.refusals) == (0, 1)
    with pytest.raises(BlockRefused, match="cannot write the block file"):
        AvroBlocks(str(gone)).decode(marked_schema(GOBBLIN) or "", [body(event(0))])


def test_no_columns_where_one_message_at_a_time_is_asked() -> None:
    class OwnRows(GobblinCompactionProcessor):
        def row(self, event: Any) -> Any:
            return super().row(event)

    values = pa.table({"timestamp": [1], "namespace": ["compaction.tracking.events"],
                       "name": ["CompactionCompleted"], "metadata": pa.array(
                           [[("clusterIdentifier", "c"), ("datasetUrn", "d")]],
                           pa.map_(pa.string(), pa.string()))})
    assert GobblinCompactionProcessor({}).transform_columns(values) is not None
    assert OwnRows({}).transform_columns(values) is None  # a subclass's own rows
    assert GobblinCompactionProcessor.maps_columns and not OwnRows.maps_columns
    # sinks that take dicts, a filter, or JSON values: no columns
    assert not pipeline(GobblinCompactionProcessor({}), columns=False).columns
    topic = TopicSettings.model_construct(topic="t", processor="gobblin_compaction",
                                          format="json", key_format="bytes")
    json_values = RecordPipeline(topic=topic, processor=GobblinCompactionProcessor({}),
                                 group_id="g", failure=FailurePolicy(FailureSettings(),
                                                                     no_wait))
    assert columns_for(json_values, True) is None


def test_an_engine_that_does_not_load_leaves_one_message_at_a_time(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import datafusion

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("libdatafusion.so: cannot open shared object file")

    monkeypatch.setattr(datafusion, "SessionContext", broken)
    assert pipeline(GobblinCompactionProcessor({}), columns=False).columns is None
    topic = TopicSettings.model_construct(topic="t", processor="gobblin_compaction",
                                          format="avro", key_format="bytes")
    built = RecordPipeline(topic=topic, processor=GobblinCompactionProcessor({}),
                           group_id="g", failure=FailurePolicy(FailureSettings(), no_wait),
                           avro=AvroDecoder(Source(GOBBLIN)), label="g/t")
    with caplog.at_level("WARNING"):
        assert columns_for(built, True) is None
    assert "g/t: batches go one message at a time: the block decoder does not load " \
           "(OSError: libdatafusion.so" in caplog.text


def test_column_batch_refuses_what_does_not_fit_as_it_is() -> None:
    columns = (Column("a", "int"), Column("b", "string", nullable=False))
    assert column_batch(pa.table({"a": pa.array([1, 2], pa.int64()), "b": ["x", "y"]}),
                        columns) is not None
    assert column_batch(pa.table({"a": pa.array([2**31], pa.int64()), "b": ["x"]}),
                        columns) is None  # out of the int range
    assert column_batch(pa.table({"a": [1], "b": pa.array([None], pa.string())}),
                        columns) is None  # NULL in a NOT NULL column
    assert column_batch(pa.table({"a": ["1"], "b": ["x"]}), columns) is None  # a string
    fit = column_batch(pa.table({"b": ["x"]}), columns)  # absent and nullable: NULL
    assert fit is not None and fit.column(0).null_count == 1


def test_rows_from_cuts_dicts_and_columns_in_place() -> None:
    table = pa.table({"_offset": pa.array([5, 6, 7], pa.int64()), "v": ["a", "b", "c"]})
    rows = ColumnRows(table)
    assert [r["v"] for r in rows] == ["a", "b", "c"]
    assert rows_from(rows, 6) is rows
    assert len(rows) == 2 and [r["v"] for r in rows] == ["b", "c"]
    dicts = [{"_offset": 5}, {"_offset": 7}]
    assert rows_from(dicts, 6) is dicts
    assert dicts == [{"_offset": 7}]
    # an immutable sequence cannot be cut in place: the rows kept, never all of them
    held = ({"_offset": 5}, {"_offset": 7})
    assert rows_from(held, 6) == [{"_offset": 7}]


BLOCK_RUNNER = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from actors.codecs.avro_block import AvroBlocks, BlockRefused, marked_schema
schema, good = sys.argv[1], bytes.fromhex(sys.argv[2])
try:
    AvroBlocks().decode(marked_schema(schema), [good, sys.stdin.buffer.read(), good])
    verdict = "decoded"
except BlockRefused as exc:
    verdict = "refused: " + str(exc)
print(json.dumps({"verdict": verdict}))
"""


@pytest.mark.parametrize("name", [n for n, case in CASES.items()
                                  if case[0] == "avro" and case[1] == AVRO_STRING])
def test_the_hostile_corpus_is_refused_by_the_block_decoder(name: str) -> None:
    """Each hostile Avro body of a schema the block decoder takes, between two good
    ones, in a child under a memory limit: refused, never a crash."""
    _, schema, hostile, _ = CASES[name]
    assert isinstance(hostile, bytes)
    good = body({"s": "fine"}, schema)
    result = run_child(BLOCK_RUNNER, [schema, good.hex()], hostile, CHILD_PATH, 60)
    assert result["verdict"].startswith("refused: "), (name, result)
