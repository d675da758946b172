"""Schema ids in their canonical form (the cache key of both registries), and the
impossible ones refused as :class:`~actors.codecs.schema_registry.errors.SchemaNotFound`."""

from __future__ import annotations

import string

from actors.codecs.schema_registry.errors import SchemaNotFound
from actors.codecs.schema_registry.schemas import IdType, SchemaId

_MAX_ID = {"int": 2**32, "long": 2**63}


def normalize_schema_id(schema_id: int | str, id_type: IdType) -> SchemaId:
    """The canonical form of an id (cache key), or SchemaNotFound for an impossible one.

    ``int``/``long``: a non-negative int (digits in a str are accepted); ``uuid``: 32
    lowercase hex digits (dashes and upper case accepted, or the 128-bit int).
    """
    if isinstance(schema_id, str) and id_type != "uuid" and schema_id.strip().isdigit():
        schema_id = int(schema_id)
    if id_type == "uuid":
        if isinstance(schema_id, int) and not isinstance(schema_id, bool):
            if 0 <= schema_id < 2**128:
                return f"{schema_id:032x}"
        elif isinstance(schema_id, str):
            text = schema_id.strip().lower().replace("-", "")
            if len(text) == 32 and all(c in string.hexdigits for c in text):
                return text
    elif isinstance(schema_id, int) and not isinstance(schema_id, bool):
        # Registries hand out non-negative ids only: a negative one is bad input.
        if 0 <= schema_id < _MAX_ID[id_type]:
            return schema_id
    raise SchemaNotFound(f"invalid {id_type} schema id {schema_id!r}", schema_id=schema_id)
