"""Decoding of message values and keys for the ``json``, ``bytes`` and ``string`` formats.

(``avro`` is decoded by :class:`actors.codecs.avro.AvroDecoder`, which needs a registry.)
Every decoder raises :class:`~processors.errors.PoisonMessage` for input it cannot
decode, so bad input is classified, never guessed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from processors import jsonfast
from processors.errors import PoisonMessage

_TOO_DEEP = ("value is not decodable JSON: arrays and objects nested deeper than the "
             "decoder's recursion limit")


def _decode_json(raw: bytes | None) -> Any:
    """Decode a JSON object: what ``json.loads`` gives, through orjson
    (:func:`processors.jsonfast.loads`), with ``json``'s error messages."""
    if raw is None:
        return None
    try:
        value = jsonfast.loads(raw)
    except ValueError as exc:
        raise PoisonMessage(f"value is not valid JSON: {exc}") from exc
    except RecursionError:  # nesting deeper than the interpreter's recursion limit
        raise PoisonMessage(_TOO_DEEP) from None
    if not isinstance(value, dict):
        raise PoisonMessage(f"JSON value is {type(value).__name__}, not an object")
    return value


def _decode_bytes(raw: bytes | None) -> Any:
    return raw


def _decode_string(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PoisonMessage(f"key is not UTF-8: {exc}") from exc


DECODERS: dict[str, Callable[[bytes | None], Any]] = {
    "json": _decode_json, "bytes": _decode_bytes, "string": _decode_string,
}
FORMATS = (*DECODERS, "avro")


def _decode_json_key(raw: bytes | None) -> Any:
    try:
        return None if raw is None else jsonfast.loads(raw)
    except ValueError as exc:
        raise PoisonMessage(f"key is not valid JSON: {exc}") from exc
    except RecursionError:
        raise PoisonMessage(_TOO_DEEP.replace("value", "key", 1)) from None


KEY_DECODERS: dict[str, Callable[[bytes | None], Any]] = {
    "string": _decode_string, "json": _decode_json_key,
}
