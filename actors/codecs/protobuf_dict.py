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
  (``"2024-05-01T12:00:00Z"``), ``Duration`` ``"1.500s"``, ``Struct``/``Value``/
  ``ListValue`` the JSON they hold, the wrappers (``Int32Value``, ...) their value
  (64-bit ones as text, the mapping's rule), ``FieldMask`` ``"a.b,c"``, ``Any``
  ``{"@type": ..., ...}``, ``Empty`` ``{}``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

_WELL_KNOWN = "google.protobuf."
_AS_TEXT = {f"google.protobuf.{n}" for n in ("Timestamp", "Duration", "FieldMask")}

Convert = Callable[[Any], Any]


def message_converter(descriptor: Descriptor, cache: dict[str, Convert] | None = None
                      ) -> Convert:
    """The function giving the dict of a message of ``descriptor`` (see the module's
    docstring), planned once per message type: ``cache`` holds the plans by full name
    (one per schema: a recursive type reuses its own)."""
    cache = {} if cache is None else cache
    found = cache.get(descriptor.full_name)
    if found is not None:
        return found
    plan: list[tuple[str, bool, Convert | None]] = []

    def convert(message: Message) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, presence, value in plan:
            if presence and not message.HasField(name):
                out[name] = None
            elif value is None:
                out[name] = getattr(message, name)
            else:
                out[name] = value(getattr(message, name))
        return out

    cache[descriptor.full_name] = convert  # before the fields: a type may contain itself
    for field in descriptor.fields:
        plan.append((field.name, field.has_presence and not field.is_repeated,
                     _field_converter(field, cache)))
    return convert


def message_dict(message: Message) -> dict[str, Any]:
    """The dict of one message (plans it anew: for tools and tests)."""
    result: dict[str, Any] = message_converter(message.DESCRIPTOR)(message)
    return result


def _field_converter(field: FieldDescriptor, cache: dict[str, Convert]) -> Convert | None:
    """How a field's value converts; None: as it is."""
    kind: Descriptor | None = field.message_type
    if field.is_repeated and kind is not None and kind.GetOptions().map_entry:
        value = _single(kind.fields_by_name["value"], cache) or _same
        return lambda entries: {_map_key(k): value(v) for k, v in entries.items()}
    single = _single(field, cache)
    if field.is_repeated:
        if single is None:
            return list
        return lambda items: [single(item) for item in items]
    return single


def _same(value: Any) -> Any:
    return value


def _map_key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def _single(field: FieldDescriptor, cache: dict[str, Convert]) -> Convert | None:
    kind = field.type
    if kind == FieldDescriptor.TYPE_MESSAGE or kind == FieldDescriptor.TYPE_GROUP:
        name = field.message_type.full_name
        if name in _AS_TEXT:  # what the JSON mapping gives, without its general walk
            return _as_text
        if name.startswith(_WELL_KNOWN):
            return _well_known
        return message_converter(field.message_type, cache)
    if kind == FieldDescriptor.TYPE_ENUM:
        names = {v.number: v.name for v in field.enum_type.values}
        return lambda number: names.get(number, number)
    if kind == FieldDescriptor.TYPE_BYTES:
        return _base64
    return None


def _as_text(message: Any) -> str:
    text: str = message.ToJsonString()
    return text


def _well_known(message: Message) -> Any:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _base64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")
