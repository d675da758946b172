"""A decoded Protobuf message as the dict a processor gets (``format: protobuf``).

The proto3 JSON mapping, with Python's types where the mapping bends to JavaScript:

* every field of the message is a key, named as in the ``.proto`` (not camelCase);
  an unset field reads as its default (``0``, ``""``, ``false``, the enum's first
  name, ``[]``, ``{}``), except a field with presence (a message, ``optional``, a
  ``oneof`` member, proto2 scalars) which reads as ``None`` when unset;
* integers of every width are Python ``int`` (the JSON mapping's strings for 64-bit
  integers exist for JavaScript's doubles); ``float``/``double`` are ``float``;
* an enum is its value's name; a number the schema does not name stays an ``int``;
* ``bytes`` are base64 text (standard alphabet, padded), as in the JSON mapping, so
  every row is JSON;
* a ``map`` is a dict with string keys (the JSON mapping's: ``"1"``, ``"true"``);
* the well-known types read as in the JSON mapping: ``Timestamp`` RFC 3339 text in UTC
  (``"2024-05-01T12:00:00Z"``), ``Duration`` ``"1.5s"``, ``Struct``/``Value``/
  ``ListValue`` the JSON they hold, the wrappers (``Int32Value``, ...) their value
  (64-bit ones as text, the mapping's rule), ``FieldMask`` ``"a.b,c"``, ``Any``
  ``{"@type": ..., ...}``, ``Empty`` ``{}``.
"""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

_WELL_KNOWN = "google.protobuf."


def message_dict(message: Message) -> dict[str, Any]:
    """The dict of a message (see the module's docstring)."""
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        out[field.name] = _field_value(message, field)
    return out


def _field_value(message: Message, field: FieldDescriptor) -> Any:
    value = getattr(message, field.name)
    if _is_map(field):
        value_field = field.message_type.fields_by_name["value"]
        return {_map_key(k): _single(value_field, v) for k, v in value.items()}
    if field.is_repeated:
        return [_single(field, v) for v in value]
    if field.has_presence and not message.HasField(field.name):
        return None
    return _single(field, value)


def _is_map(field: FieldDescriptor) -> bool:
    kind: Descriptor | None = field.message_type
    return (field.is_repeated and kind is not None
            and kind.GetOptions().map_entry)


def _map_key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def _single(field: FieldDescriptor, value: Any) -> Any:
    kind = field.type
    if kind == FieldDescriptor.TYPE_MESSAGE or kind == FieldDescriptor.TYPE_GROUP:
        if field.message_type.full_name.startswith(_WELL_KNOWN):
            return json_format.MessageToDict(value, preserving_proto_field_name=True)
        return message_dict(value)
    if kind == FieldDescriptor.TYPE_ENUM:
        named = field.enum_type.values_by_number.get(value)
        return named.name if named is not None else value
    if kind == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode("ascii")
    return value
