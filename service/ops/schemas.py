"""``kstage schemas check``: can each Avro topic's processor read its writer schemas?

For every topic with ``format: avro`` the latest writer schema of its subject
(``subject``, default ``TOPIC-value``: the Confluent TopicNameStrategy) is fetched and
checked against the reader schema (the topic's ``reader_schema``, else the processor's
declared one). Readability is checked by Avro schema resolution on generated samples
of the writer schema: fastavro resolves writer to reader exactly as decoding would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.utils import generate_many

from actors.codecs.avro import load_schema
from actors.codecs.registries import registry_from_settings
from actors.master import resolve_processors
from processors.base import SCHEMA_DIR
from processors.errors import ProcessorError
from settings.models import Settings

_SAMPLES = 25


@dataclass(frozen=True)
class CheckResult:
    group: str
    topic: str
    subject: str
    ok: bool
    detail: str


def readable(writer: Any, reader: Any, samples: int = _SAMPLES) -> str | None:
    """None when ``reader`` can read data written with ``writer``, else the reason."""
    for record in generate_many(writer, samples):
        out = BytesIO()
        schemaless_writer(out, writer, record)
        out.seek(0)
        try:
            schemaless_reader(out, writer, reader)
        except Exception as exc:  # noqa: BLE001 - any resolution failure is the answer
            return f"{type(exc).__name__}: {exc}"
    return None


async def check(settings: Settings) -> list[CheckResult]:
    classes = resolve_processors(settings)
    avro_topics = [(settings.group_id(g), t) for g in settings.groups for t in g.topics
                   if t.format == "avro"]
    if not avro_topics or settings.schema_registry is None:
        return []
    results = []
    async with registry_from_settings(settings.schema_registry) as registry:
        for group, topic in avro_topics:
            subject = topic.subject or f"{topic.topic}-value"
            if topic.reader_schema:
                reader_name, reader = topic.reader_schema, load_schema(topic.reader_schema)
            elif classes[topic.processor].reader_schema:
                name = str(classes[topic.processor].reader_schema)
                reader_name, reader = name, load_schema(SCHEMA_DIR / name)
            else:
                reader_name, reader = "", None
            try:
                latest = await registry.latest(subject)
            except ProcessorError as exc:
                results.append(CheckResult(group, topic.topic, subject, False,
                                           f"cannot fetch the writer schema: {exc}"))
                continue
            try:
                writer = parse_schema(json.loads(latest.schema))
            except Exception as exc:  # noqa: BLE001 - report, don't crash the check
                results.append(CheckResult(group, topic.topic, subject, False,
                                           f"writer id {latest.id} does not parse: {exc}"))
                continue
            where = f"writer id {latest.id} (version {latest.version})"
            if reader is None:
                results.append(CheckResult(group, topic.topic, subject, True,
                                           f"{where}; no reader schema: read as written"))
                continue
            problem = readable(writer, reader)
            detail = (f"{where} readable with {reader_name}" if problem is None
                      else f"{where} NOT readable with {reader_name}: {problem}")
            results.append(CheckResult(group, topic.topic, subject, problem is None, detail))
    return results
