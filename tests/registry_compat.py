"""The compatibility levels of a Confluent schema registry, for the tests' registry
(:mod:`tests.fake_registry`): may a new schema be registered under a subject, given its
earlier versions?

Levels (Confluent's ``compatibility`` config): ``BACKWARD`` (the new schema reads data
written with the latest), ``FORWARD`` (the latest reads data written with the new one),
``FULL`` (both), ``NONE``; the ``_TRANSITIVE`` variants check every earlier version, not
only the latest.

:func:`reader_problems` says why a reader schema cannot read a writer's data, per format:

* **Avro**: the Avro project's own checker, ``avro.compatibility``'s
  ``ReaderWriterCompatibilityChecker`` (the schema resolution rules of the spec).
* **Protobuf**: Confluent's rules (docs.confluent.io, "Protobuf compatibility rules" in
  Schema Registry's "Formats, Serializers, and Deserializers"; its ``protobuf.diff``
  package), compared by field number on the descriptors protoc compiles: a field added or
  removed is compatible (a proto2 ``required`` one is not: ``REQUIRED_FIELD_ADDED``,
  ``REQUIRED_FIELD_REMOVED``); a field's type may change only within one wire-compatible
  group (``int32, int64, uint32, uint64, bool, enum``; ``sint32, sint64``; ``string,
  bytes``; ``fixed32, sfixed32``; ``fixed64, sfixed64``; ``float``; ``double``), else
  ``FIELD_SCALAR_KIND_CHANGED``; scalar <-> message <-> map is ``FIELD_KIND_CHANGED``; a
  message field of another message name is ``FIELD_NAMED_TYPE_CHANGED``; a singular field
  made ``repeated`` or back is a label change (refused); proto3's ``optional`` keyword
  (presence) is no difference; a writer's message missing from the reader is
  ``MESSAGE_REMOVED``.
* **JSON Schema**: Confluent's rules ("JSON Schema compatibility rules", same page; its
  ``json.diff`` package) for what the tests change: a property's ``type`` may only
  widen (the reader's types a superset of the writer's, ``integer`` within ``number``:
  ``TYPE_EXTENDED``), else ``TYPE_NARROWED`` / ``TYPE_CHANGED``; a property the reader
  adds is ``PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL`` when the writer's object is open
  (``additionalProperties`` absent or true: old data may hold it with any type), fine
  when closed unless the reader requires it (``REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_
  MODEL``); a property the reader drops is fine when the reader's object is open,
  ``PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL`` when closed; a property the reader
  requires that the writer did not (and that has no ``default``) is
  ``REQUIRED_ATTRIBUTE_ADDED``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE", "NONE")


def problems(level: str, schema_type: str, new: str, earlier: list[str]) -> list[str]:
    """Why ``new`` may not follow ``earlier`` (oldest first) under ``level``; empty: it
    may."""
    if level == "NONE" or not earlier:
        return []
    against = earlier if level.endswith("_TRANSITIVE") else earlier[-1:]
    base = level.removesuffix("_TRANSITIVE")
    out: list[str] = []
    for old in reversed(against):  # the latest first, as the registry reports
        if base in ("BACKWARD", "FULL"):
            out += reader_problems(schema_type, reader=new, writer=old)
        if base in ("FORWARD", "FULL"):
            out += reader_problems(schema_type, reader=old, writer=new)
    return out


def reader_problems(schema_type: str, *, reader: str, writer: str) -> list[str]:
    """Why data of ``writer`` cannot be read with ``reader`` (each
    ``{errorType:'...', description:'...'}`` as the registry words them)."""
    check: Callable[[str, str], list[str]] = {
        "AVRO": _avro, "PROTOBUF": _protobuf, "JSON": _json}[schema_type]
    try:
        return check(reader, writer)
    except Exception as exc:  # the format's parser refused a schema
        raise ValueError(f"invalid schema: {exc}") from exc


def _problem(kind: str, description: str) -> str:
    return f"{{errorType:'{kind}', description:'{description}'}}"


# ---------------------------------------------------------------------------- Avro


def _avro(reader: str, writer: str) -> list[str]:
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType
    from avro.schema import parse

    result = ReaderWriterCompatibilityChecker().get_compatibility(parse(reader),
                                                                  parse(writer))
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    # the checker gives sets of kinds, messages and locations, not one per problem
    where = f"{'; '.join(sorted(result.messages))} at {' '.join(sorted(result.locations))}"
    return [_problem(kind, where)
            for kind in sorted({k.name.upper() for k in result.incompatibilities})]


# ------------------------------------------------------------------------ Protobuf

_GROUPS = [{"int32", "int64", "uint32", "uint64", "bool", "enum"}, {"sint32", "sint64"},
           {"string", "bytes"}, {"fixed32", "sfixed32"}, {"fixed64", "sfixed64"},
           {"float"}, {"double"}]


def _messages(text: str) -> dict[str, Any]:
    """The message descriptors (nested ones too) of a ``.proto`` text, by full name."""
    from google.protobuf import descriptor_pool

    from tests.proto_files import compile_files

    pool = descriptor_pool.DescriptorPool()
    files = compile_files({"schema.proto": text})
    for file_proto in files:
        pool.Add(file_proto)
    out: dict[str, Any] = {}

    def add(desc: Any) -> None:
        out[desc.full_name] = desc
        for nested in desc.nested_types:
            add(nested)

    for desc in pool.FindFileByName("schema.proto").message_types_by_name.values():
        add(desc)
    return out


def _kind(field: Any) -> str:
    if field.message_type is not None:
        return "map" if field.message_type.GetOptions().map_entry else "message"
    return "scalar"


def _scalar(field: Any) -> str:
    from google.protobuf.descriptor import FieldDescriptor

    if field.type == FieldDescriptor.TYPE_ENUM:
        return "enum"
    names = {v: k.removeprefix("TYPE_").lower() for k, v in vars(FieldDescriptor).items()
             if k.startswith("TYPE_") and isinstance(v, int)}
    return names[field.type]


def _group(name: str) -> int:
    return next(i for i, group in enumerate(_GROUPS) if name in group)


def _protobuf(reader: str, writer: str) -> list[str]:
    readers, writers = _messages(reader), _messages(writer)
    out: list[str] = []
    for name, old in writers.items():
        new = readers.get(name)
        if new is None:
            out.append(_problem("MESSAGE_REMOVED", f"the reader has no message {name}"))
        else:
            out += _message_problems(name, old, new)
    return out


def _required(field: Any) -> bool:
    return bool(field.is_required)


def _message_problems(path: str, writer: Any, reader: Any) -> list[str]:
    out: list[str] = []
    old = {f.number: f for f in writer.fields}
    new = {f.number: f for f in reader.fields}
    for number in sorted(old.keys() | new.keys()):
        at = f"#/{path}/{number}"
        w, r = old.get(number), new.get(number)
        if w is None or r is None:
            field = r if w is None else w
            if _required(field):
                kind = "REQUIRED_FIELD_ADDED" if w is None else "REQUIRED_FIELD_REMOVED"
                out.append(_problem(kind, f"a required field at {at}"))
            continue
        if _kind(w) != _kind(r):
            out.append(_problem("FIELD_KIND_CHANGED", f"the kind of the field at {at}"))
        elif _kind(w) == "scalar" and _group(_scalar(w)) != _group(_scalar(r)):
            out.append(_problem("FIELD_SCALAR_KIND_CHANGED",
                                f"{_scalar(w)} -> {_scalar(r)} at {at}"))
        elif _kind(w) == "message" and w.message_type.name != r.message_type.name:
            out.append(_problem("FIELD_NAMED_TYPE_CHANGED", f"the message type at {at}"))
        elif w.is_repeated != r.is_repeated:
            out.append(_problem("FIELD_NUMERIC_LABEL_CHANGED", f"repeated or not at {at}"))
    return out


# --------------------------------------------------------------------- JSON Schema


def _types(schema: dict[str, Any]) -> set[str]:
    kind = schema.get("type")
    return {kind} if isinstance(kind, str) else set(kind or ())


def _open(schema: dict[str, Any]) -> bool:
    return schema.get("additionalProperties", True) is not False


def _json(reader: str, writer: str) -> list[str]:
    return _json_problems("#", json.loads(writer), json.loads(reader))


def _json_problems(path: str, writer: dict[str, Any], reader: dict[str, Any]) -> list[str]:
    out: list[str] = []
    old, new = _types(writer), _types(reader)
    widened = new | ({"integer"} if "number" in new else set())
    if old and new and old != new:
        if not old <= widened:
            within = old | ({"integer"} if "number" in old else set())
            kind = "TYPE_NARROWED" if new <= within else "TYPE_CHANGED"
            return [_problem(kind, f"{sorted(old)} -> {sorted(new)} at {path}")]
    if "object" not in old or "object" not in new:
        return out
    props_w = writer.get("properties", {})
    props_r = reader.get("properties", {})
    required_w, required_r = set(writer.get("required", ())), set(reader.get("required", ()))
    for name in props_r.keys() - props_w.keys():
        at = f"{path}/properties/{name}"
        if _open(writer):
            out.append(_problem("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", at))
        elif name in required_r:
            out.append(_problem("REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", at))
    for name in props_w.keys() - props_r.keys():
        if not _open(reader):
            out.append(_problem("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
                                f"{path}/properties/{name}"))
    for name in sorted(props_w.keys() & props_r.keys()):
        at = f"{path}/properties/{name}"
        out += _json_problems(at, props_w[name], props_r[name])
        if name in required_r - required_w and "default" not in props_r[name]:
            out.append(_problem("REQUIRED_ATTRIBUTE_ADDED", at))
    return out


__all__ = ["LEVELS", "problems", "reader_problems"]
