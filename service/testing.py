"""Testing helpers for processor authors that run kstage itself: a processor through the
worker's own walk, and the whole pipeline on a broker.

:mod:`processors.testing` builds the messages (:func:`~processors.testing.message`,
:func:`~processors.testing.avro_message`) and needs only the plugin API; these runners
need the actors (and :func:`run_pipeline` a broker), so they live on the top floor.

* :func:`run_processor` / :func:`arun_processor` drive a processor through its lifecycle
  (``start``, the topic's filter and ``transform`` per message, awaited when async,
  ``stop``) with the worker's :class:`~actors.worker.pipeline.RecordPipeline`, and return
  every row. A failing message re-raises the processor's own exception, with a note
  naming the message's coordinates.
* :func:`run_pipeline` runs the real pipeline (consumer group, decoding, failure policy,
  jsonl sink, commits) on the embedded broker and returns a :class:`PipelineResult`
  with the rows and the dead-letter lines.

Example::

    from processors.testing import message
    from service.testing import run_processor

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
from pathlib import Path
from typing import Any, Literal

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from actors.master import Master
from actors.worker.pipeline import RecordPipeline
from processors.base import Message, Processor, Row
from processors.registry import load
from processors.testing import SchemaLike, _encode_avro, _parse
from service.broker import EmbeddedBroker
from settings.models import FilterSettings, Settings

__all__ = [
    "PipelineResult",
    "arun_processor",
    "run_pipeline",
    "run_processor",
]


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
        messages: the messages (see :func:`processors.testing.message`,
            :func:`~processors.testing.avro_message`), or one.
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
    # The worker's own walk (filter, transform awaited when async).
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
