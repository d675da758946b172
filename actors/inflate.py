"""Bounded inflation of compressed record batches (issue 33): a decompression bomb in a
batch is refused, never inflated whole.

aiokafka inflates a compressed record batch (format v2) in one call to its
``aiokafka.codec`` decoders, without an output limit, when the consumer iterates the
batch: a few hundred KB of gzip or a few KB of zstd make hundreds of MB. :func:`install`
replaces those decoders, once per process, with bounded ones that stop at
``kafka.max_batch_inflated_bytes`` and raise :class:`BatchRefused`:

* gzip: :mod:`zlib` streaming, ``max_length`` at a time;
* zstd, lz4: cramjam's ``decompress_into`` a buffer of the cap (it stops when full);
* snappy: each block's declared length is summed before a block is inflated.

Both of aiokafka's readers of v2 batches call them by module global at call time: the
pure-Python ``aiokafka.record.default_records`` (which bound them at import, so its
globals are replaced too) and the C extension ``aiokafka.record._crecords.default_records``
(a Cython module: its globals are looked up at each call). The refusal names the batch:
aiokafka's fetcher iterates batches in ``PartitionRecords._unpack_records`` (pure
Python), whose frame holds the partition (``tp``) and the batch (``next_batch``: its base
offset and last offset delta, read from the batch header). The worker turns the refusal
into poison for each offset (:mod:`actors.worker.refused`).

Batches of the old message formats (v0, v1; Kafka 4 no longer serves them) are left to
aiokafka's own decoders.
"""

from __future__ import annotations

import mmap
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType, ModuleType
from typing import Any

import cramjam
from aiokafka import TopicPartition
from aiokafka.consumer.fetcher import PartitionRecords
from aiokafka.record import default_records

SETTING = "kafka.max_batch_inflated_bytes"

_UNPACK = PartitionRecords._unpack_records.__code__
_FRAMES_UP = 8  # the decoder's caller chain up to the fetcher's batch loop
_cap = 64 << 20
_STEP = 1 << 20  # gzip: inflated at most this much at a time
_installed = False


@dataclass(frozen=True, slots=True)
class BatchWhere:
    """The refused batch's partition, offsets (first and last) and first timestamp,
    from its header."""

    tp: TopicPartition
    first: int
    last: int
    timestamp: int


class BatchRefused(Exception):
    """A compressed record batch inflates past the cap: none of its records is read.

    Args:
        codec: the batch's compression (``gzip``, ``zstd``, ``lz4``, ``snappy``).
        cap: the cap, in bytes (``kafka.max_batch_inflated_bytes``).
        compressed: the compressed size, in bytes.
        where: the batch's partition and offsets (None: inflated elsewhere than in
            aiokafka's fetcher).
    """

    def __init__(self, codec: str, cap: int, compressed: int,
                 where: BatchWhere | None) -> None:
        self.codec, self.cap, self.compressed, self.where = codec, cap, compressed, where
        super().__init__(self.reason())

    def reason(self) -> str:
        at = (f"{self.where.tp.topic}[{self.where.tp.partition}] offsets "
              f"{self.where.first}..{self.where.last}" if self.where else "unknown place")
        return (f"record batch of {at} ({self.codec}, {self.compressed} bytes compressed) "
                f"inflates to more than {self.cap} bytes ({SETTING}): not decoded")


def _where() -> BatchWhere | None:
    """The batch being inflated, from aiokafka's fetcher frame (see the module doc)."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(_FRAMES_UP):
        if frame is None:
            return None
        if frame.f_code is _UNPACK:
            tp: TopicPartition = frame.f_locals["tp"]
            batch: Any = frame.f_locals["next_batch"]
            return BatchWhere(tp, batch.base_offset, batch.base_offset + batch.last_offset_delta,
                              batch.first_timestamp)
        frame = frame.f_back
    return None


def _refuse(codec: str, compressed: int) -> BatchRefused:
    return BatchRefused(codec, _cap, compressed, _where())


def gzip_decode(payload: Any) -> bytes:
    """gzip (one or more members), at most the cap, a MiB at a time into a mapping of
    the cap (see :func:`_into`)."""
    data = memoryview(payload)
    size = len(data)
    with mmap.mmap(-1, _cap + _STEP) as out:
        rest: bytes | memoryview = data
        while rest:
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            chunk: bytes | memoryview = rest
            while chunk and not inflater.eof:
                out.write(inflater.decompress(chunk, _STEP))
                if out.tell() > _cap:
                    raise _refuse("gzip", size)
                chunk = inflater.unconsumed_tail
            if not inflater.eof:
                raise zlib.error("gzip stream ends before its end")
            rest = inflater.unused_data
        return out[:out.tell()]


def _into(codec: str, decompress_into: Callable[[Any, Any], int]) -> Callable[[Any], bytes]:
    def decode(payload: Any) -> bytes:
        # An anonymous mapping: its pages are only taken as they are written (a
        # bytearray of the cap would be zeroed, all of it, at every batch).
        with mmap.mmap(-1, _cap) as out:
            try:
                n = decompress_into(payload, out)
            except cramjam.DecompressionError as exc:
                if "failed to write whole buffer" in str(exc):
                    raise _refuse(codec, len(memoryview(payload))) from None
                raise
            return out[:n]
    decode.__name__ = f"{codec}_decode"
    return decode


zstd_decode = _into("zstd", cramjam.zstd.decompress_into)
lz4_decode = _into("lz4", cramjam.lz4.decompress_into)

_XERIAL = b"\x82SNAPPY\x00"


def snappy_decode(payload: Any) -> bytes:
    """Snappy, raw or xerial-framed (as aiokafka's): each block's declared length is
    counted against the cap before it is inflated."""
    data = memoryview(payload)
    blocks: list[memoryview] = []
    if len(data) > 16 and bytes(data[:8]) == _XERIAL:
        pos = 16
        while pos < len(data):
            size = int.from_bytes(data[pos:pos + 4], "big", signed=True)
            blocks.append(data[pos + 4:pos + 4 + size])
            pos += 4 + size
    else:
        blocks.append(data)
    total = sum(cramjam.snappy.decompress_raw_len(b) for b in blocks)
    if total > _cap:
        raise _refuse("snappy", len(data))
    return b"".join(bytes(cramjam.snappy.decompress_raw(b)) for b in blocks)


DECODERS: dict[str, Callable[[Any], bytes]] = {
    "gzip_decode": gzip_decode, "zstd_decode": zstd_decode, "lz4_decode": lz4_decode,
    "snappy_decode": snappy_decode}


def _readers() -> list[ModuleType]:
    """The modules that inflate v2 batches: the codec module, the pure-Python reader,
    and the C extension's when it is built."""
    import aiokafka.codec

    modules = [aiokafka.codec, default_records]
    try:
        from aiokafka.record._crecords import default_records as c_records
    except ImportError:  # pragma: no cover - aiokafka without its C extension
        return modules
    return [*modules, c_records]


def install(cap: int) -> None:
    """Bound the inflation of every compressed batch this process reads to ``cap``
    bytes (the last call's cap holds; the decoders are replaced once)."""
    global _cap, _installed
    _cap = cap
    if _installed:
        return
    for module in _readers():
        for name, decode in DECODERS.items():
            setattr(module, name, decode)
    _installed = True


__all__ = ["SETTING", "BatchRefused", "BatchWhere", "install"]
