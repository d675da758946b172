"""Protobuf values in the Confluent wire format, with writer schemas from the registry.

Wire format: the header of :mod:`~actors.codecs.by_id` (magic byte ``0``, the schema id),
then the message-index list: a zigzag varint count and that many zigzag varint indexes,
the path to the message type in the schema's file (``[1]``: the file's second message,
``[0, 2]``: the third message nested in the first); the single byte ``0`` means ``[0]``,
the file's first message. Then the message's Protobuf binary.

The registry serves Protobuf schemas as ``.proto`` source text, with ``references`` for
its imports (each a subject version, under the import path it is imported as). They are
compiled with ``protoc``, the reference compiler, as bundled by ``grpcio-tools`` (the
``protobuf`` extra), into descriptors of a private descriptor pool per schema id; the
well-known types (``google/protobuf/*.proto``) come with it, as registries do not store
them. ``?format=serialized`` (a ``FileDescriptorProto`` in base64) is not used: Karapace's
is lossy (maps, field labels and type names are not what ``protoc`` makes).

What a processor gets is the message as :mod:`actors.codecs.protobuf_dict` converts it.
Poison (the dead-letter line names the schema id): a schema that does not compile, a
message-index list that is truncated or names no message of the file, a body that does
not parse as that message.
"""

from __future__ import annotations

import asyncio
import importlib.resources
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from actors.codecs.by_id import SchemaIdDecoder, poison
from actors.codecs.protobuf_dict import Convert, message_converter
from actors.codecs.references import RegisteredSource, fetch_references
from processors.errors import PoisonMessage

logger = logging.getLogger(__name__)

_MAX_DEPTH = 16  # message nesting of an index list


def read_indexes(raw: bytes, at: int) -> tuple[list[int], int]:
    """The message-index list at ``raw[at:]`` and the offset after it; ValueError for a
    truncated or absurd one."""
    def varint(pos: int) -> tuple[int, int]:
        shift = result = 0
        while True:
            if pos >= len(raw):
                raise ValueError("truncated message-index varint")
            byte = raw[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1), pos  # zigzag
            shift += 7
            if shift > 63:
                raise ValueError("message-index varint longer than 10 bytes")

    count, at = varint(at)
    if count == 0:
        return [0], at
    if count < 0 or count > _MAX_DEPTH:
        raise ValueError(f"message-index list of {count} entries")
    indexes = []
    for _ in range(count):
        index, at = varint(at)
        indexes.append(index)
    return indexes, at


class _Compiled:
    """One schema id's compiled file: message classes by index path, made on first use."""

    def __init__(self, pool: Any, file_proto: Any) -> None:
        self.pool = pool
        self.file_proto = file_proto
        self.classes: dict[tuple[int, ...], tuple[Any, Convert]] = {}
        self.plans: dict[str, Convert] = {}  # message_converter's, by full name

    def message_class(self, indexes: list[int]) -> tuple[Any, Convert]:
        """The message class at an index path and the converter of its messages."""
        key = tuple(indexes)
        found = self.classes.get(key)
        if found is not None:
            return found
        types = self.file_proto.message_type
        names = [self.file_proto.package] if self.file_proto.package else []
        for index in indexes:
            if not 0 <= index < len(types):
                raise LookupError(f"no message at index {index}")
            names.append(types[index].name)
            types = types[index].nested_type
        cls = message_factory.GetMessageClass(
            self.pool.FindMessageTypeByName(".".join(names)))
        self.classes[key] = found = (cls, message_converter(cls.DESCRIPTOR, self.plans))
        return found


async def compile_proto(schema: str, imports: dict[str, str], label: str) -> _Compiled:
    """``schema`` (``.proto`` text) compiled with its ``imports``; PoisonMessage with
    protoc's error for a file that does not compile."""
    include = importlib.resources.files("grpc_tools") / "_proto"
    with tempfile.TemporaryDirectory(prefix="kstage-proto-") as tmp:
        root = Path(tmp)
        main = f"kstage_schema_{label}.proto"
        for name, text in {**imports, main: schema}.items():
            path = PurePosixPath(name)
            if path.is_absolute() or ".." in path.parts:
                raise PoisonMessage(f"schema reference name {name!r} is not a relative path")
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text, encoding="utf-8")
        out = root / "descriptors.pb"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "grpc_tools.protoc", f"-I{root}", f"-I{include}",
            "--include_imports", f"--descriptor_set_out={out}", main,
            cwd=root, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await proc.communicate()
        if proc.returncode != 0:
            text = err.decode(errors="replace").strip().replace(str(root) + "/", "")
            raise PoisonMessage(f"the .proto does not compile (protoc): {text[:500]}")
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    pool = descriptor_pool.DescriptorPool()
    for file_proto in files:  # dependencies first (--include_imports orders them)
        pool.Add(file_proto)
    return _Compiled(pool, next(f for f in files if f.name == main))


class ProtobufDecoder(SchemaIdDecoder):
    """Decodes wire-format Protobuf with writer schemas from a registry, cached by id.

    Args:
        source: the registry server's client (schemas with types and references).
        id_type, not_found_retry_s, clock: as :class:`~actors.codecs.by_id.SchemaIdDecoder`.
    """

    format_name = "Protobuf"

    def __init__(self, source: RegisteredSource, id_type: str = "int", *,
                 not_found_retry_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(source, id_type, not_found_retry_s=not_found_retry_s, clock=clock)

    async def build(self, id_bytes: bytes, schema_id: int | str) -> Any:
        registered = await self._source.get_registered(schema_id)
        if registered.schema_type != "PROTOBUF":
            raise PoisonMessage(f"schema id {schema_id} is a {registered.schema_type} schema, "
                                "not PROTOBUF (the topic's format is protobuf)")
        imports: dict[str, str] = {}
        await fetch_references(self._source, registered.references, imports)
        try:
            compiled = await compile_proto(registered.schema, imports, str(schema_id))
        except PoisonMessage as exc:
            raise PoisonMessage(f"writer schema id {schema_id}: {exc}") from exc
        logger.info("compiled the Protobuf schema id %s (%d import(s))", schema_id,
                    len(imports))
        return compiled

    def writer_and_id(self, raw: bytes) -> tuple[Any, int | str]:
        """The descriptor of the message type the value's index list names, and the
        schema id (PoisonMessage as :meth:`decode`)."""
        cls, _, sid, _ = self._message_class(raw)
        return cls.DESCRIPTOR, sid

    def _message_class(self, raw: bytes) -> tuple[Any, Convert, int | str, int]:
        """(message class, its converter, schema id, offset of the body) of a value."""
        id_bytes, compiled = self.writer(raw)
        sid = self.schema_id(id_bytes)
        try:
            indexes, at = read_indexes(raw, self._end)
        except ValueError as exc:
            raise poison(f"bad message-index list for schema id {sid}: {exc}", raw,
                         sid) from exc
        try:
            cls, convert = compiled.message_class(indexes)
        except (LookupError, ValueError, TypeError) as exc:
            raise poison(f"unknown message index {indexes} in schema id {sid}: {exc}", raw,
                         sid) from exc
        return cls, convert, sid, at

    def decode(self, raw: bytes | None) -> Any:
        """Decode one value to its dict; raises PoisonMessage for every kind of bad input."""
        if raw is None:
            return None
        cls, convert, sid, at = self._message_class(raw)
        message = cls()
        try:
            message.ParseFromString(raw[at:])
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise poison(f"undecodable Protobuf body for schema id {sid} (message "
                         f"{cls.DESCRIPTOR.full_name}: {exc})", raw, sid) from exc
        result: dict[str, Any] = convert(message)
        return result
