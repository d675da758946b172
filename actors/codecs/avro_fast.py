"""The fast Avro decoder of the hot path: cavro, checked against fastavro.

fastavro stays the reference decoder: it defines what a value decodes to and which
bodies are bad. cavro (a Cython codec, ~3x faster than fastavro's ``schemaless_reader``
on DataHub's MetadataChangeLog: 4 us instead of 13 us an event) is used only where it
gives the same results:

* a writer schema with a ``logicalType`` anywhere is left to fastavro, which converts
  logical types (timestamps to ``datetime``, decimals to ``Decimal``) where cavro's
  defaults differ;
* cavro is given the schema with every ``int`` widened to ``long``: the binary encodings
  are the same, and fastavro returns an out-of-range ``int`` varint as it is where cavro
  would wrap it to 32 bits;
* a schema cavro refuses to parse is left to fastavro;
* a body cavro cannot decode is decoded again by fastavro, whose value or error stands
  (fastavro is laxer on some bad bodies, a negative union index among them).

``tests/unit/test_avro_fast.py`` checks the two decoders equal on every bundled schema,
on random valid records and on mutated (truncated, extended, bytes replaced, inserted or
deleted) bodies.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

FastDecode = Callable[[bytes], Any]


def _has_logical_type(schema: Any) -> bool:
    if isinstance(schema, dict):
        return "logicalType" in schema or any(_has_logical_type(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_logical_type(v) for v in schema)
    return False


def _widened(schema: Any) -> Any:
    """The schema with every ``int`` type (not names, symbols or defaults) as ``long``."""
    if schema == "int":
        return "long"
    if isinstance(schema, list):
        return [_widened(branch) for branch in schema]
    if isinstance(schema, dict):
        out = dict(schema)
        for key in ("type", "items", "values"):
            if key in out:
                out[key] = _widened(out[key])
        if isinstance(out.get("fields"), list):
            out["fields"] = [_widened(f) for f in out["fields"]]
        return out
    return schema


def fast_decoder(schema: Any) -> FastDecode | None:
    """cavro's decode of an Avro body written with ``schema`` (the JSON of a writer
    schema), or None where fastavro must decode (see the module's docstring)."""
    if _has_logical_type(schema):
        return None
    import cavro  # numpy comes with it: only when a schema is used

    try:
        codec = cavro.Schema(json.dumps(_widened(schema)),
                             options=cavro.DEFAULT_OPTIONS.replace(record_decodes_to_dict=True))
    except Exception:  # noqa: BLE001 - a schema cavro refuses is fastavro's
        return None
    decode: FastDecode = codec.binary_decode
    return decode
