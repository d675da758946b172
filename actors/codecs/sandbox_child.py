"""The child of :mod:`actors.codecs.sandbox`: validates JSON values against JSON Schemas.

Run as a script (``python -P .../sandbox_child.py``), never imported by kstage: it imports
only the standard library, ``jsonschema``, ``referencing`` and ``orjson``, so it starts
in a fraction of a second. It reads requests from stdin and writes answers to stdout,
each a frame (a 4-byte big-endian length, then a pickle):

* it first writes ``("ready", pid)``;
* a request ``(key, schema, bodies)`` (``schema``: ``(text, {reference name: text})``,
  or None when this child already built the validator of ``key``) is answered with one
  frame ``(index, verdict)`` per body, in order, as each is validated: ``verdict`` None
  when the body is valid (or not JSON: the parent's parse says why), else the error
  text (``$.path: message``).

It exits on end of input, with its parent (``PR_SET_PDEATHSIG``), and with status 3 on a
``MemoryError`` (a crash for the parent, not a verdict on the message).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import struct
import sys
from typing import Any, BinaryIO

_HEADER = struct.Struct(">I")


def _read(stream: BinaryIO) -> Any:
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(head)
    body = stream.read(size)
    if len(body) < size:
        return None
    return pickle.loads(body)  # noqa: S301 - frames from the parent process only


def _write(stream: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent died before prctl
            os._exit(0)


def _validator(schema: str, references: dict[str, str]) -> Any:
    from jsonschema import validators
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    contents = json.loads(schema)
    registry: Any = Registry().with_resources(
        (name, Resource.from_contents(json.loads(body), default_specification=DRAFT202012))
        for name, body in references.items())
    cls = validators.validator_for(contents, default=validators.Draft202012Validator)
    return cls(contents, registry=registry)


def _verdict(validator: Any, body: bytes) -> str | None:
    from jsonschema.exceptions import best_match
    from orjson import loads

    try:
        value = loads(body)
    except (ValueError, RecursionError) as exc:
        if "memory" in str(exc).lower():  # orjson's "Not enough memory ...": a crash
            raise MemoryError(str(exc)) from exc
        return None  # not JSON: the parent's parse (orjson too) classifies it
    try:
        error = best_match(validator.iter_errors(value))
    except RecursionError:
        return "the value is nested too deeply to validate"
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - a validator that raises refuses the value
        return f"validation raised {type(exc).__name__}: {str(exc)[:300]}"
    return None if error is None else f"{error.json_path}: {error.message[:300]}"


def main() -> None:
    _die_with_parent()
    import jsonschema  # noqa: F401 - imported before "ready": not on a message's budget
    import orjson  # noqa: F401

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    validators: dict[Any, Any] = {}
    _write(stdout, ("ready", os.getpid()))
    try:
        while (request := _read(stdin)) is not None:
            key, schema, bodies = request
            if schema is not None:
                validators[key] = _validator(*schema)
            validator = validators[key]
            for index, body in enumerate(bodies):
                _write(stdout, (index, _verdict(validator, body)))
    except MemoryError:
        os._exit(3)
    except (BrokenPipeError, KeyboardInterrupt):
        os._exit(0)


if __name__ == "__main__":
    main()
