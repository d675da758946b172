"""Testing helpers for processor authors: run a processor without and with a broker.

Public API (importable without pytest, without pyspark, and without aiokafka, which
:func:`run_pipeline` imports only when called):

* :func:`message` builds the :class:`~processors.base.Message` kstage would hand to
  ``transform`` for a JSON-like value (or raw bytes); :func:`messages` numbers a list.
* :func:`avro_message` does the same for an Avro record: it validates the record
  against the schema (strictly: unknown fields are errors), encodes it in the
  schema-registry wire format and decodes it again, so the value is exactly what
  kstage's decoding yields (bytes stay bytes, enums are str, defaults are filled in).
* :func:`run_processor` / :func:`arun_processor` drive a processor through its lifecycle
  (``start``, ``transform`` per message, awaited when async, ``stop``) and return every
  row. A failing message re-raises the processor's own exception, with a note naming
  the message's coordinates.
* :func:`run_pipeline` runs the real pipeline (consumer group, decoding, failure policy,
  jsonl sink, commits) on the embedded broker and returns a :class:`PipelineResult`
  with the rows and the dead-letter lines.

Example::

    from processors.testing import message, run_processor

    def test_clicks() -> None:
        rows = run_processor(ClicksProcessor, [message({"event_id": "e1", ...})])
        assert rows[0]["event_id"] == "e1"
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fastavro import parse_schema, schemaless_reader
from fastavro.validation import ValidationError, validate

from processors.avro import encode
from processors.base import SCHEMA_DIR, Message, Processor, Row

if TYPE_CHECKING:
    from settings.models import Settings

__all__ = [
    "DEFAULT_TIMESTAMP",
    "PipelineResult",
    "SchemaLike",
    "arun_processor",
    "avro_message",
    "message",
    "messages",
    "run_pipeline",
    "run_processor",
]

DEFAULT_TIMESTAMP = 1_700_000_000_000
"""Record timestamp (ms since the epoch) of built messages unless one is given."""

SchemaLike = str | Path | Mapping[str, Any] | Sequence[Any]
"""An Avro schema: a parsed JSON object/array, JSON text, or an ``.avsc`` path (a ``str``
path that does not exist as given is looked up under :data:`processors.base.SCHEMA_DIR`,
like ``Processor.reader_schema``)."""


def message(value: Any, *, topic: str = "topic", partition: int = 0, offset: int = 0,
            timestamp: int = DEFAULT_TIMESTAMP, key: Any = None,
            headers: Iterable[tuple[str, bytes]] = ()) -> Message:
    """The Message kstage hands to ``transform`` for ``value`` (``format: json``/``bytes``).

    Args:
        value: a JSON-compatible value, round-tripped through JSON so the processor sees
            what kstage's json decoding yields (a fresh dict, lists not tuples); or
            ``bytes``, passed as is (``format: bytes``); or None (a tombstone).
        topic, partition, offset, timestamp, key, headers: the Kafka coordinates and
            metadata (``key`` as the topic's ``key_format`` would decode it).

    Raises:
        TypeError: ``value`` is not JSON-serialisable.
    """
    if value is None or isinstance(value, bytes):
        decoded, raw = value, value
    else:
        raw = json.dumps(value).encode("utf-8")
        decoded = json.loads(raw)
    return Message(topic, partition, offset, timestamp, key, decoded, tuple(headers), raw)


def messages(values: Iterable[Any], *, offset: int = 0, **coords: Any) -> list[Message]:
    """:func:`message` for each value, with consecutive offsets from ``offset``."""
    return [message(v, offset=offset + i, **coords) for i, v in enumerate(values)]


def _schema_json(schema: SchemaLike) -> Any:
    if isinstance(schema, Path):
        return json.loads(schema.read_text(encoding="utf-8"))
    if isinstance(schema, str):
        if schema.lstrip()[:1] in ("{", "[", '"'):
            return json.loads(schema)
        for path in (Path(schema), SCHEMA_DIR / schema):
            if path.is_file():
                return json.loads(path.read_text(encoding="utf-8"))
        raise FileNotFoundError(f"no Avro schema file {schema!r} (nor {SCHEMA_DIR / schema})")
    return schema


@lru_cache(maxsize=64)
def _parsed(text: str) -> Any:
    return parse_schema(json.loads(text))


def _parse(schema: SchemaLike) -> tuple[Any, str]:
    """(parsed schema, canonical JSON text) of ``schema``; parsing is cached."""
    text = json.dumps(_schema_json(schema), sort_keys=True)
    return _parsed(text), text


def _unknown_fields(sent: Any, decoded: Any, path: str = "") -> list[str]:
    """Paths of dict keys in ``sent`` that did not survive encoding (not in the schema)."""
    if isinstance(sent, tuple) and len(sent) == 2 and isinstance(sent[0], str) \
            and not isinstance(decoded, tuple):
        sent = sent[1]  # fastavro's (type name, value) union notation
    if isinstance(sent, Mapping) and isinstance(decoded, Mapping):
        return [p for key, value in sent.items()
                for p in ([f"{path}{key}"] if key not in decoded
                          else _unknown_fields(value, decoded[key], f"{path}{key}."))]
    if isinstance(sent, list) and isinstance(decoded, list):
        return [p for i, (a, b) in enumerate(zip(sent, decoded, strict=False))
                for p in _unknown_fields(a, b, f"{path}{i}.")]
    return []


def _encode_avro(schema: Any, record: Any, schema_id: int) -> bytes:
    """Validate ``record`` strictly, then encode it in the wire format.

    fastavro's ``strict`` catches missing fields, but its writer silently drops unknown
    ones; a typo in a test record must be an error, not a row that quietly lacks a field.
    """
    validate(record, schema, raise_errors=True, strict=True)
    raw = encode(schema, schema_id, record)
    unknown = _unknown_fields(record, _decode_avro(raw, schema, schema))
    if unknown:
        raise ValidationError(  # type: ignore[no-untyped-call]  # fastavro is untyped
            f"field(s) not in the schema: {', '.join(unknown)}")
    return raw


def _decode_avro(raw: bytes, writer: Any, reader: Any) -> Any:
    body = BytesIO(raw)
    body.seek(5)  # magic byte + 4-byte schema id
    return schemaless_reader(body, writer, reader)


def avro_message(schema: SchemaLike, record: Any, *, reader_schema: SchemaLike | None = None,
                 schema_id: int = 1, topic: str = "topic", partition: int = 0, offset: int = 0,
                 timestamp: int = DEFAULT_TIMESTAMP, key: Any = None,
                 headers: Iterable[tuple[str, bytes]] = ()) -> Message:
    """The Message kstage hands to ``transform`` for an Avro ``record`` (``format: avro``).

    Args:
        schema: the writer schema (see :data:`SchemaLike`).
        record: the record as a Python dict, validated strictly against ``schema``.
        reader_schema: resolve the written data to this schema (Avro evolution rules),
            as kstage does with a topic's ``reader_schema``; default: the writer schema.
        schema_id: the id written in the wire-format header (``raw``).
        topic, partition, offset, timestamp, key, headers: as in :func:`message`.

    Raises:
        fastavro.validation.ValidationError: ``record`` does not match ``schema``.
    """
    writer, _ = _parse(schema)
    reader = writer if reader_schema is None else _parse(reader_schema)[0]
    raw = _encode_avro(writer, record, schema_id)
    value = _decode_avro(raw, writer, reader)
    return Message(topic, partition, offset, timestamp, key, value, tuple(headers), raw)


def _where(processor: Processor, msg: Message) -> str:
    return (f"while processor {type(processor).__name__} ({processor.name!r}) transformed "
            f"message {msg.topic}[{msg.partition}]@{msg.offset}")


async def arun_processor(processor: Processor | type[Processor],
                         messages: Message | Iterable[Message],
                         options: Mapping[str, Any] | None = None,
                         filter: Mapping[str, Any] | None = None) -> list[Row]:
    """Drive ``processor`` through its lifecycle over ``messages``; return all rows.

    Calls ``start()``, ``transform`` for each message in order (awaited when it is
    async), and ``stop()`` (also after a failure), as a kstage worker does.

    Args:
        processor: a Processor class (built with ``options``) or an instance.
        messages: the messages (see :func:`message`, :func:`avro_message`), or one.
        options: the topic's ``options`` mapping; only with a class.
        filter: the topic's ``filter`` mapping (``include``/``exclude``), applied before
            ``transform`` as the worker applies it: filtered messages give no rows.

    Raises:
        Exception: whatever ``transform`` raised (e.g. PoisonMessage), unchanged but
            with a note naming the processor and the message's coordinates.
    """
    if isinstance(processor, Processor):
        if options is not None:
            raise TypeError("options are for a processor class, not an instance")
        instance = processor
    else:
        instance = processor(options)
    # The worker's own walk (filter, transform awaited when async); imported here: the
    # pure helpers of this module must not pull in aiokafka or the actors.
    from actors.worker.pipeline import RecordPipeline
    from settings.models import FilterSettings

    pipeline = RecordPipeline.for_processor(
        instance, filter=None if filter is None else FilterSettings.model_validate(filter),
        decoded=True)
    batch = [messages] if isinstance(messages, Message) else list(messages)
    rows: list[Row] = []
    await instance.start()
    try:
        for msg in batch:  # one walk each: a failure names its message
            try:
                rows += await pipeline.rows([msg], policy=False)
            except Exception as exc:
                exc.add_note(_where(instance, msg))
                raise
    finally:
        await instance.stop()
    return rows


def run_processor(processor: Processor | type[Processor],
                  messages: Message | Iterable[Message],
                  options: Mapping[str, Any] | None = None,
                  filter: Mapping[str, Any] | None = None) -> list[Row]:
    """Synchronous :func:`arun_processor` (runs its own event loop).

    Use :func:`arun_processor` from ``async def`` tests: an event loop cannot be nested.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(arun_processor(processor, messages, options, filter))
    raise RuntimeError("run_processor() was called inside a running event loop; "
                       "use `await arun_processor(...)` there")


@dataclass(frozen=True, slots=True)
class PipelineResult:
    """What :func:`run_pipeline` observed.

    Attributes:
        rows: the rows the jsonl sink wrote, in write order (offset order for one
            partition), as read back from JSON: values that JSON cannot hold were
            written the way the sink writes them (bytes as UTF-8 text, others ``str``).
        dead_letters: the dead-letter lines of messages that failed (poison, or an
            exception under ``failure.mode: continue``); see docs/operations.md "Dead-letter lines".
        topic, group: the topic and consumer group the run created.
    """

    rows: list[Row]
    dead_letters: list[dict[str, Any]]
    topic: str
    group: str


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _pipeline_settings(processor: str, topic: str, group: str, bootstrap: str, work: Path,
                       fmt: str, options: Mapping[str, Any] | None,
                       failure: Mapping[str, Any] | None, registry: Path | None
                       ) -> Settings:
    from settings.models import Settings  # processors stay settings-free

    data: dict[str, Any] = {
        "name": group,
        "kafka": {"bootstrap": bootstrap},
        # No restarts: a crashing processor fails the run at once instead of backing off.
        "supervisor": {"shutdown_grace_s": 10, "abort_grace_s": 5, "max_restarts": 0},
        "groups": [{
            "group_id": group,
            # The embedded broker holds a join for ~session_timeout/2: keep it short.
            "session_timeout_ms": 6000, "heartbeat_interval_ms": 500,
            "commit": {"mode": "batch", "max_messages": 100, "max_interval_s": 0.2},
            "failure": {"mode": "continue", "dead_letter_path": str(work / "dead.jsonl"),
                        **(failure or {})},
            "topics": [{"topic": topic, "processor": processor, "format": fmt,
                        "options": dict(options or {}),
                        "sink": {"type": "jsonl", "path": str(work / "rows.jsonl")}}],
        }],
    }
    if registry is not None:
        data["schema_registry"] = {"url": f"file://{registry}"}
    # model_validate, not Settings(...): KSTAGE_* variables of the caller must not leak in.
    return Settings.model_validate(data)


def _wire_values(values: Sequence[bytes | Mapping[str, Any] | None], fmt: str, topic: str,
                 schema: SchemaLike | None, processor: str, work: Path
                 ) -> tuple[list[bytes | None], Path | None]:
    """Encode the values to produce; for Avro, also write a ``file://`` registry."""
    if fmt != "avro":
        return [v if v is None or isinstance(v, bytes) else json.dumps(v).encode("utf-8")
                for v in values], None
    if schema is None:
        from processors.registry import load

        schema = load(processor).reader_schema
        if schema is None:
            raise ValueError(f"format='avro': pass schema=, processor {processor!r} "
                             "declares no reader_schema")
    parsed, text = _parse(schema)
    registry = work / "registry"
    registry.mkdir()
    (registry / "schema.avsc").write_text(text, encoding="utf-8")
    index = {"1": {"subject": f"{topic}-value", "file": "schema.avsc"}}
    (registry / "index.json").write_text(json.dumps(index), encoding="utf-8")
    return [v if v is None or isinstance(v, bytes) else _encode_avro(parsed, v, 1)
            for v in values], registry


async def run_pipeline(
    processor: str,
    values: Sequence[bytes | Mapping[str, Any] | None],
    *,
    format: Literal["json", "bytes", "avro"] = "json",  # the setting's name
    options: Mapping[str, Any] | None = None,
    schema: SchemaLike | None = None,
    failure: Mapping[str, Any] | None = None,
    timeout_s: float = 60.0,
    bootstrap: str | None = None,
) -> PipelineResult:
    """Run the real kstage pipeline for the installed processor ``processor``.

    Starts an embedded broker (unless ``bootstrap`` is given), creates a fresh topic
    with one partition, produces ``values`` in order, and runs
    ``Master(settings, bootstrap, drain=True).run()`` with one consumer group, a jsonl
    sink and a dead-letter file in a temporary directory, until every message was
    processed and committed. The processor is found through its entry point, so this
    also checks the registration.

    Args:
        processor: the entry-point name, as in a topic's ``processor``.
        values: dicts are encoded per ``format`` (JSON text, or Avro with ``schema``);
            bytes are produced as they are (e.g. to test poison); None is a tombstone.
        format: the topic's value ``format``.
        options: the topic's processor ``options``.
        schema: Avro writer schema of the dict values (see :data:`SchemaLike`); default
            the processor's ``reader_schema``. It is served by a ``file://`` registry.
        failure: overrides of the group's ``failure`` settings (default ``continue``).
        timeout_s: give up after this long (TimeoutError).
        bootstrap: an existing broker's ``host:port`` (e.g. a session fixture's).

    Raises:
        TimeoutError: the topic was not drained within ``timeout_s``.
        actors.errors.FatalError: the run crashed (``failure.mode: throw``, a processor
            whose ``start`` fails, ...).
        processors.errors.RegistryError: the processor is unknown or rejects ``format``.
    """
    # Imported here: the pure helpers above must not pull in aiokafka or the actors.
    from actors.master import Master
    from service.broker import EmbeddedBroker

    run_id = uuid.uuid4().hex[:10]
    topic, group = f"kstage-test-{run_id}", f"kstage-test-{run_id}"
    with tempfile.TemporaryDirectory(prefix="kstage-pipeline-") as tmp:
        work = Path(tmp)
        raw_values, registry = _wire_values(values, format, topic, schema, processor, work)
        embedded = None
        if bootstrap is None:
            embedded = EmbeddedBroker(log_path=work / "broker.log")
            await asyncio.to_thread(embedded.start)
            bootstrap = embedded.bootstrap
        try:
            settings = _pipeline_settings(processor, topic, group, bootstrap, work, format,
                                          options, failure, registry)
            master = Master(settings, bootstrap, drain=True)  # resolves the processor
            async with asyncio.timeout(timeout_s):
                await _produce(bootstrap, topic, raw_values)
                await master.run()
        except TimeoutError as exc:
            rows = len(_read_jsonl(work / "rows.jsonl"))
            raise TimeoutError(f"run_pipeline({processor!r}): topic {topic} was not drained "
                               f"within {timeout_s:g}s ({rows} row(s) written)") from exc
        finally:
            if embedded is not None:
                await asyncio.to_thread(embedded.stop)
        return PipelineResult(_read_jsonl(work / "rows.jsonl"),
                              _read_jsonl(work / "dead.jsonl"), topic, group)


async def _produce(bootstrap: str, topic: str, values: Sequence[bytes | None]) -> None:
    """Create ``topic`` (one partition) and produce ``values`` to it, in order."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for raw in values:
            await producer.send(topic, raw)
        await producer.flush()
    finally:
        await producer.stop()
