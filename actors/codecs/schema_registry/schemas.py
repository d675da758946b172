"""What a schema registry serves: schema ids (:data:`IdType`, :data:`SchemaId`), a
subject's version (:class:`SchemaVersion`), a schema with its type and references
(:class:`RegisteredSchema`, :class:`Reference`), and :class:`SchemaRegistry`, the read
interface both registries implement: the HTTP client
(:class:`~actors.codecs.schema_registry.client.SchemaRegistryClient`) and the
``file://`` directory (:mod:`actors.codecs.schema_files`);
:func:`actors.codecs.registries.registry_from_settings` builds the one a configuration
names. Schema references are not resolved here (:mod:`actors.codecs.references` does)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Literal, NamedTuple, Protocol, Self

IdType = Literal["int", "long", "uuid"]
SchemaId = int | str
"""A normalised schema id: an int for ``int``/``long``, 32 lowercase hex for ``uuid``."""
Sleep = Callable[[float], Awaitable[None]]


class SchemaVersion(NamedTuple):
    """One registered version of a subject: ``id, version, schema = await r.latest(s)``."""

    id: SchemaId
    version: int
    schema: str


class Reference(NamedTuple):
    """A schema reference: the ``name`` the referring schema uses (a Protobuf import
    path, a JSON Schema ``$ref`` URL) and the subject version that holds it."""

    name: str
    subject: str
    version: int


class RegisteredSchema(NamedTuple):
    """A schema by id or version with what the Confluent API says of it besides its text:
    ``schema_type`` (``AVRO`` when the answer has no ``schemaType``, as the API omits it
    for Avro; ``PROTOBUF``, ``JSON``) and its ``references``."""

    schema: str
    schema_type: str
    references: tuple[Reference, ...]


class SchemaRegistry(Protocol):
    """The read interface of both registries (HTTP client and ``file://`` directory)."""

    id_type: IdType

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None: ...
    async def get_schema(self, schema_id: int | str) -> str: ...
    async def latest(self, subject: str) -> SchemaVersion: ...
    async def subjects(self) -> list[str]: ...
    async def versions(self, subject: str) -> list[int]: ...
