"""What an Avro writer schema lets a hostile body do (issue 33), read from the schema's JSON.

* **Recursive** schemas (a named type inside its own definition, e.g. a linked list) let
  a body nest as deep as it is long: the C decoders (fastavro's Cython reader, cavro)
  recurse on the C stack and crash the process (fastavro at 10,000 levels, cavro at
  100,000). Their bodies are decoded by fastavro's pure-Python reader, whose depth the
  interpreter's recursion limit bounds: too deep is a ``RecursionError``, poison.
* An **array of items encoded in no bytes** (``null``, a record without fields or with
  only such fields, a ``fixed`` of size 0) lets 6 bytes declare 2^40 items, which the
  decoders build one by one (minutes of CPU, then out of memory). Such a schema cannot
  be decoded within any bound: it poisons its messages, as a schema that does not parse.
"""

from __future__ import annotations

from typing import Any

_PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes",
                         "string"))
_NAMED = frozenset(("record", "error", "enum", "fixed"))


def _names(node: dict[str, Any]) -> set[str]:
    """The names a named type may be referred to by (full and short)."""
    name = str(node.get("name", ""))
    full = name if "." in name or not node.get("namespace") else f"{node['namespace']}.{name}"
    return {name, full, name.rpartition(".")[2]}


def _walk(schema: Any, path: list[set[str]], zero: dict[str, bool], found: dict[str, bool]
          ) -> bool:
    """Whether ``schema`` is encoded in no bytes; notes in ``found`` a reference to a type
    being defined (``recursive``) and an array of zero-width items (``zero_items``)."""
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return schema == "null"
        short = schema.rpartition(".")[2]
        if any(schema in names or short in names for names in path):
            found["recursive"] = True
            return False
        return zero.get(schema, zero.get(short, False))
    if isinstance(schema, list):  # a union: its branch index takes a byte
        for branch in schema:
            _walk(branch, path, zero, found)
        return False
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if isinstance(kind, str) and kind in _NAMED:
        names = _names(schema)
        width = kind == "fixed" and schema.get("size") == 0
        if kind in ("record", "error"):
            path.append(names)
            widths = [_walk(f.get("type"), path, zero, found)
                      for f in schema.get("fields", []) if isinstance(f, dict)]
            path.pop()
            width = all(widths)
        for name in names:
            zero[name] = width
        return width
    if kind == "array":
        if _walk(schema.get("items"), path, zero, found):
            found["zero_items"] = True
        return False
    if kind == "map":
        _walk(schema.get("values"), path, zero, found)
        return False
    return _walk(kind, path, zero, found) if kind is not None else False


def shape(schema: Any) -> dict[str, bool]:
    """``{"recursive": ..., "zero_items": ...}`` of a writer schema's JSON."""
    found = {"recursive": False, "zero_items": False}
    _walk(schema, [], {}, found)
    return found


__all__ = ["shape"]
