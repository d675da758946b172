"""What the Protobuf and JSON Schema decoders need of a registry: schemas by id with
their type and references, and the referenced schemas, fetched recursively."""

from __future__ import annotations

from typing import Protocol

from actors.codecs.schema_registry import Reference, RegisteredSchema
from processors.errors import PoisonMessage

_MAX_DEPTH = 16  # references within references


class RegisteredSource(Protocol):
    """What the Protobuf and JSON Schema decoders need of a registry."""

    async def get_registered(self, schema_id: int | str) -> RegisteredSchema: ...
    async def get_version(self, subject: str, version: int) -> RegisteredSchema: ...


async def fetch_references(source: RegisteredSource, references: tuple[Reference, ...],
                           into: dict[str, str], depth: int = 0) -> None:
    """Fetch every schema ``references`` name, recursively, as ``{import name: text}``."""
    if depth > _MAX_DEPTH:
        raise PoisonMessage(f"schema references nest deeper than {_MAX_DEPTH}")
    for ref in references:
        if ref.name in into:
            continue
        registered = await source.get_version(ref.subject, ref.version)
        into[ref.name] = registered.schema
        await fetch_references(source, registered.references, into, depth + 1)
