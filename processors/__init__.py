"""Processor plugin API: the base class, message type, errors and the registry."""

from processors.base import (
    COORDINATE_COLUMNS,
    DELETED,
    SCHEMA_DIR,
    Column,
    ColumnType,
    Message,
    NoOptions,
    Processor,
    Row,
    decimal_type,
    deletion,
    table_columns,
    timestamp_from_millis,
    with_coordinates,
)
from processors.errors import PoisonMessage, ProcessorError, RegistryError, Retry
from processors.registry import ENTRY_POINT_GROUP, available, check_topics, load

__all__ = [
    "COORDINATE_COLUMNS",
    "DELETED",
    "SCHEMA_DIR",
    "Column",
    "ColumnType",
    "ENTRY_POINT_GROUP",
    "Message",
    "NoOptions",
    "PoisonMessage",
    "Processor",
    "ProcessorError",
    "RegistryError",
    "Retry",
    "Row",
    "available",
    "check_topics",
    "decimal_type",
    "deletion",
    "load",
    "table_columns",
    "timestamp_from_millis",
    "with_coordinates",
]
