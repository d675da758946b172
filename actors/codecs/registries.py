"""The schema registry a configuration names: a ``file://DIR`` directory of ``.avsc`` files
(:mod:`actors.codecs.schema_files`) or a registry server (:mod:`actors.codecs.schema_registry`).

A module of its own because the file registry is built over the client module's errors
and ids: the choice between the two sits above both, so neither imports the other back.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import httpx

from actors.codecs.schema_files import FileSchemaRegistry
from actors.codecs.schema_registry import SchemaRegistry, SchemaRegistryClient, Sleep

if TYPE_CHECKING:
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
