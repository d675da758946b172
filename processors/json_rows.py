"""``json_rows``: one JSON object (or Avro record) per message becomes one row, plus
Kafka coordinates: the schemaless pass-through processor."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from processors.base import Message, NoOptions, Processor, Row, with_coordinates
from processors.errors import PoisonMessage


class JsonRowsOptions(NoOptions):
    """Options of ``json_rows``."""

    fields: list[str] | None = Field(
        None, description="Keys to keep (others are dropped); none or empty: keep all.")


class JsonRowsProcessor(Processor):
    """Maps a JSON object to a row with the same keys and the Kafka coordinates.

    Options:
        fields: optional list of keys to keep (others are dropped).
    """

    name = "json_rows"
    formats = ("json", "avro", "protobuf", "json_schema")
    description = "JSON object or Avro record -> one row with its fields and Kafka coordinates"

    options_model = JsonRowsOptions
    options: JsonRowsOptions

    def __init__(self, options: Mapping[str, Any] | BaseModel | None = None) -> None:
        super().__init__(options)
        fields = self.options.fields
        self._fields: tuple[str, ...] | None = tuple(fields) if fields else None

    def transform(self, message: Message) -> Sequence[Row]:
        value = message.value
        if not isinstance(value, dict):
            raise PoisonMessage(f"expected an object/record, got {type(value).__name__}")
        # The decoded object is fresh and ours: reuse it as the row (no copy per message).
        row = {k: value.get(k) for k in self._fields} if self._fields is not None else value
        return [with_coordinates(row, message)]
