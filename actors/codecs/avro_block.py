"""A batch of Avro bodies decoded at once into Arrow columns (issue 35, point 4).

The bodies of a partition batch that share one writer schema are laid end to end as the
one block of an in-memory Avro object container file (header with the writer schema,
codec ``null``), and Apache DataFusion's Avro reader (arrow-rs, native) reads that block
into an Arrow table: no Python object per record or field. Each body is followed by an
8-byte marker drawn at random per batch, read as a ``fixed`` field appended to the
schema: the block decodes only if every body is exactly one record of the schema (a
truncated body, trailing bytes, a body that parses misaligned all move a marker, which
then reads wrong or fails the read).

Every refusal is :class:`BlockRefused`, never a crash: the caller then decodes the batch
one message at a time, as always, so each bad message is dead-lettered with its own
coordinates. DataFusion reads files only, so the block is written to a private file in
``/dev/shm`` (memory) when it exists, else the temporary directory, and removed at once;
a full or read-only directory is a refusal too.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import tempfile
from collections.abc import Sequence
from typing import Any

MARKER_FIELD = "__kstage_end"
"""The field appended to the writer schema: the marker after each body."""

_MARKER_BYTES = 8
_SHM = "/dev/shm"  # noqa: S108 - mkstemp there: a private file (O_EXCL, mode 0600)


class BlockRefused(Exception):
    """The batch does not decode as one block; decode it one message at a time."""


def available() -> bool:
    """Whether the block decoder's engine (the ``datafusion`` package) is installed."""
    try:
        return importlib.util.find_spec("datafusion") is not None
    except ImportError:
        return False


def _long(n: int) -> bytes:
    """Avro's zig-zag varint encoding of a long."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def marked_schema(writer_text: str) -> str | None:
    """The writer schema with the marker field appended, as JSON text; None when the
    writer schema is not a record (nothing to append to)."""
    schema = json.loads(writer_text)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    fields = schema.get("fields")
    if not isinstance(fields, list) or any(
            isinstance(f, dict) and f.get("name") == MARKER_FIELD for f in fields):
        return None
    marker = {"name": MARKER_FIELD,
              "type": {"type": "fixed", "name": "KstageEndMarker", "size": _MARKER_BYTES}}
    return json.dumps({**schema, "fields": [*fields, marker]})


def container(schema_text: str, bodies: Sequence[bytes], marker: bytes) -> bytes:
    """An Avro object container file of one block: ``bodies``, each followed by
    ``marker``."""
    sync = os.urandom(16)
    meta = {"avro.schema": schema_text.encode(), "avro.codec": b"null"}
    head = bytearray(b"Obj\x01")
    head += _long(len(meta))
    for key, value in meta.items():
        head += _long(len(key)) + key.encode() + _long(len(value)) + value
    head += b"\x00" + sync
    block = marker.join(bodies) + marker
    return b"".join((head, _long(len(bodies)), _long(len(block)), block, sync))


class AvroBlocks:
    """Decodes batches of Avro bodies into Arrow tables (see the module doc).

    Args:
        directory: where the block files are written (default ``/dev/shm`` if it exists,
            else the temporary directory).
    """

    def __init__(self, directory: str | None = None) -> None:
        # imported only where blocks are decoded
        from datafusion import SessionConfig, SessionContext

        # One file, one scan: no repartitioning across threads (a third less CPU a block)
        config = (SessionConfig().with_target_partitions(1)
                  .with_repartition_file_scans(False).with_batch_size(1 << 16))
        self._ctx = SessionContext(config)
        self._dir = directory or (_SHM if os.path.isdir(_SHM) else tempfile.gettempdir())
        self._arrow: dict[str, Any] = {}  # marked schema -> its Arrow schema, once read

    def __repr__(self) -> str:
        return f"<AvroBlocks in {self._dir}>"

    def decode(self, marked: str, bodies: Sequence[bytes]) -> Any:
        """The records of ``bodies`` (writer schema :func:`marked_schema` ``marked``) as
        one ``pyarrow.Table`` of the writer's fields, in order.

        Raises:
            BlockRefused: the block did not decode, or not into exactly one record per
                body (see the module doc); the reason is in the message.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        marker = os.urandom(_MARKER_BYTES)
        data = container(marked, bodies, marker)
        try:
            fd, path = tempfile.mkstemp(prefix="kstage-block-", suffix=".avro", dir=self._dir)
        except OSError as exc:
            raise BlockRefused(f"cannot write the block file in {self._dir}: {exc}") from exc
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            table = self._ctx.read_avro(path, schema=self._arrow.get(marked)).to_arrow_table()
        except (KeyboardInterrupt, SystemExit, asyncio.CancelledError, GeneratorExit):
            raise
        except BaseException as exc:
            raise BlockRefused(f"{type(exc).__name__}: {str(exc)[:300]}") from exc
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
        if table.num_rows != len(bodies) or MARKER_FIELD not in table.column_names:
            raise BlockRefused(f"{table.num_rows} records for {len(bodies)} bodies")
        marks = table[MARKER_FIELD]
        if marks.null_count or not pc.all(
                pc.equal(marks, pa.scalar(marker, pa.binary(_MARKER_BYTES)))).as_py():
            raise BlockRefused("a body is not exactly one record of its writer schema")
        self._arrow.setdefault(marked, table.schema)
        return table.drop_columns([MARKER_FIELD])


__all__ = ["MARKER_FIELD", "AvroBlocks", "BlockRefused", "available", "container",
           "marked_schema"]
