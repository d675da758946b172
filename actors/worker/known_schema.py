"""The latest writer schema of a topic, given to a processor whose columns come from
writer schemas (:attr:`Processor.columns_from_schema
<processors.base.Processor.columns_from_schema>`) before its sinks open: the table is
then made before the first message, and a schema the processor can never take (a
recursive type) stops the worker at start, naming why. Avro and JSON Schema topics; a
Protobuf subject's schema is a file of messages, and which one the topic's records hold
only their index lists say: its table is made with the first message."""

from __future__ import annotations

import json
import logging

from actors.codecs.schema_registry import SchemaNotFound, SchemaRegistry
from actors.errors import FatalError
from processors.base import Processor
from processors.json_schema_columns import JsonWriterSchema
from settings.models import TopicSettings

logger = logging.getLogger(__name__)


async def give_latest_schema(registry: SchemaRegistry | None, topic: TopicSettings,
                             processor: Processor, label: str) -> None:
    """Hand ``processor`` the latest schema of subject ``<topic>-value`` when the registry
    has one (:meth:`Processor.schema_known <processors.base.Processor.schema_known>`).
    None registered yet, or a registry that cannot answer now, is no reason to wait: the
    columns then come with the first message. FatalError when the processor refuses it."""
    if registry is None or topic.format not in ("avro", "json_schema"):
        return
    from fastavro import parse_schema  # only for a topic of a registry format

    subject = f"{topic.topic}-value"
    try:
        found = await registry.latest(subject)
        text = json.loads(found.schema)
        schema = parse_schema(text) if topic.format == "avro" else JsonWriterSchema(text)
    except SchemaNotFound:
        return  # no version yet: the first message brings its schema
    except Exception as exc:  # noqa: BLE001 - unreachable now, or not Avro: said, not fatal
        logger.warning("%s: latest schema of subject %s not read (%s); the table's columns "
                       "come with the first message", label, subject, exc)
        return
    try:
        processor.schema_known(schema, found.id)
    except ValueError as exc:
        raise FatalError(f"{label}: processor {processor.name!r} cannot take the latest "
                         f"schema of subject {subject!r} (id {found.id}): {exc}") from exc


__all__ = ["give_latest_schema"]
