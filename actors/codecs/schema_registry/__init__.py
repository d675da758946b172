"""The schema registry: writer schemas by id, from a Confluent-compatible REST API.

A module per concern, each documenting its part: :mod:`.schemas` (ids, versions,
references and :class:`SchemaRegistry`, the interface of both registries),
:mod:`.errors` (the error tree), :mod:`.ids` (an id's canonical form),
:mod:`.client` (:class:`SchemaRegistryClient`: failover, retries, the cache by id and
the subject and version lookups), :mod:`.answers` (reading the registry's answers) and
:mod:`.transport` (TLS and transport errors). ``file://DIR`` serves ``.avsc`` files
instead (:mod:`actors.codecs.schema_files`). The names callers use are re-exported here.
"""

from actors.codecs.schema_registry.client import CONTENT_TYPE, SchemaRegistryClient
from actors.codecs.schema_registry.errors import (
    RegistryRequestError,
    RegistryUnavailable,
    SchemaNotFound,
    SchemaNotFoundYet,
    SchemaRegistryError,
)
from actors.codecs.schema_registry.ids import normalize_schema_id
from actors.codecs.schema_registry.schemas import (
    IdType,
    Reference,
    RegisteredSchema,
    SchemaId,
    SchemaRegistry,
    SchemaVersion,
    Sleep,
)
from actors.codecs.schema_registry.transport import describe_transport_error

__all__ = [
    "CONTENT_TYPE",
    "IdType",
    "Reference",
    "RegisteredSchema",
    "RegistryRequestError",
    "RegistryUnavailable",
    "SchemaId",
    "SchemaNotFound",
    "SchemaNotFoundYet",
    "SchemaRegistry",
    "SchemaRegistryClient",
    "SchemaRegistryError",
    "SchemaVersion",
    "Sleep",
    "describe_transport_error",
    "normalize_schema_id",
]
