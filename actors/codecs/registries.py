"""The schema registry a configuration names: a ``file://DIR`` directory of ``.avsc`` files
(:mod:`actors.codecs.schema_files`) or a registry server (:mod:`actors.codecs.schema_registry`).

A module of its own because the file registry is built over the client module's errors
and ids: the choice between the two sits above both, so neither imports the other back.
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import TYPE_CHECKING, Any

from actors.codecs.avro import AvroDecoder
from actors.codecs.by_id import SchemaIdDecoder
from actors.codecs.references import RegisteredSource
from actors.codecs.schema_files import FileSchemaRegistry
from actors.codecs.schema_registry import SchemaRegistry, SchemaRegistryClient, Sleep

if TYPE_CHECKING:
    import httpx

    from settings.models import SchemaRegistrySettings


def registry_from_settings(
    settings: SchemaRegistrySettings,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    sleep: Sleep = asyncio.sleep,
) -> SchemaRegistry:
    """The registry the settings name: a :class:`FileSchemaRegistry` for ``file://DIR``,
    else a :class:`SchemaRegistryClient` (not started: ``async with`` it)."""
    if settings.file_dir is not None:
        return FileSchemaRegistry(settings.file_dir, id_type=settings.id_type)
    return SchemaRegistryClient(settings, transport=transport, sleep=sleep)


EXTRAS = {"protobuf": ("protobuf", ("grpc_tools", "google.protobuf")),
          "json_schema": ("jsonschema", ("jsonschema", "referencing"))}
"""format -> (the kstage extra that installs what it needs, the modules it imports)."""


def missing_extra(fmt: str) -> str | None:
    """The extra to install for ``format: fmt``, if what it imports is missing."""
    extra = EXTRAS.get(fmt)
    if extra is None:
        return None
    for module in extra[1]:
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if not found:
            return extra[0]
    return None


def decoder_for(fmt: str, registry: SchemaRegistry, settings: SchemaRegistrySettings, *,
                reader_schema: Any = None, validate: bool = True,
                budget_s: float | None = None) -> SchemaIdDecoder:
    """The decoder of values in a registry format (``REGISTRY_FORMATS``); ``budget_s``:
    JSON Schema validation runs in a child process, within it a value
    (:mod:`actors.codecs.sandbox`)."""
    retry_s = settings.not_found_retry_s
    if fmt == "protobuf":
        from actors.codecs.protobuf import ProtobufDecoder

        return ProtobufDecoder(_registered(registry, fmt), settings.id_type,
                               not_found_retry_s=retry_s)
    if fmt == "json_schema":
        from actors.codecs.json_schema import JsonSchemaDecoder
        from actors.codecs.sandbox import ValidationSandbox

        return JsonSchemaDecoder(_registered(registry, fmt), settings.id_type,
                                 validate=validate, not_found_retry_s=retry_s,
                                 sandbox=None if budget_s is None else ValidationSandbox(budget_s))
    if fmt != "avro":
        raise ValueError(f"format {fmt!r} is not read through a schema registry")
    return AvroDecoder(registry, settings.id_type, reader_schema, not_found_retry_s=retry_s)


def _registered(registry: SchemaRegistry, fmt: str) -> RegisteredSource:
    if not isinstance(registry, SchemaRegistryClient):
        raise ValueError(f"format {fmt} needs a registry server (schema_registry.url "
                         "http(s)://...), not a file:// directory of .avsc files")
    return registry
