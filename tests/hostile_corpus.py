"""The hostile-bytes corpus of issue 33, shared by ``tests/unit/test_hostile_bytes.py``
(each case must be poison at once) and ``bench/hostile.py`` (each case's verdict, time
and peak RSS): 10,000 levels of nesting, a length prefix of 1 GB in a 20-byte message,
invalid UTF-8, an array declaring 2^40 items in a few bytes, for every decoder.

:data:`RUNNER` decodes one case in a child interpreter (``python -c RUNNER FORMAT
SCHEMA`` with the body on stdin) under a 2 GB address-space limit and prints one JSON
line: the verdict, the CPU and wall time of the decode, and the child's peak RSS.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

RUNNER = textwrap.dedent("""
    import asyncio, json, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    from processors.errors import PoisonMessage
    from actors.codecs.schema_registry import RegisteredSchema

    class Source:
        def __init__(self, text, kind):
            self.text, self.kind = text, kind
        async def get_schema(self, schema_id):
            return self.text
        async def get_registered(self, schema_id):
            return RegisteredSchema(self.text, self.kind, ())

    fmt, schema, body = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.stdin.buffer.read()
    header = b"\\x00\\x00\\x00\\x00\\x01"
    if fmt == "json":
        from actors.decoding import DECODERS
        decode, raw = DECODERS["json"], body
    elif fmt in ("json_key", "string_key"):
        from actors.decoding import KEY_DECODERS
        decode, raw = KEY_DECODERS[fmt.split("_")[0]], body
    elif fmt == "batch":  # a record batch, read as aiokafka's fetcher reads it
        from aiokafka import TopicPartition
        from aiokafka.consumer.fetcher import READ_UNCOMMITTED, PartitionRecords
        from aiokafka.record.memory_records import MemoryRecords
        from actors.inflate import BatchRefused, install
        from settings.models import KafkaSettings
        install(KafkaSettings.model_fields["max_batch_inflated_bytes"].default)

        def decode(raw):
            try:
                return list(PartitionRecords(TopicPartition("hostile", 0), MemoryRecords(raw),
                                             [], 0, None, None, True, READ_UNCOMMITTED))
            except BatchRefused as exc:
                raise PoisonMessage(str(exc)) from None
        raw = body
    else:
        if fmt == "avro":
            from actors.codecs.avro import AvroDecoder
            decoder = AvroDecoder(Source(schema, "AVRO"))
        elif fmt == "protobuf":
            from actors.codecs.protobuf import ProtobufDecoder
            decoder = ProtobufDecoder(Source(schema, "PROTOBUF"))
            header += b"\\x00"  # message index [0]
        else:
            from actors.codecs.json_schema import JsonSchemaDecoder
            decoder = JsonSchemaDecoder(Source(schema, "JSON"))
        asyncio.run(decoder.fetch(header[1:5]))
        decode, raw = decoder.decode, header + body
    start, wall = time.process_time(), time.monotonic()
    try:
        value = decode(raw)
        verdict = "decoded"
    except PoisonMessage as exc:
        verdict = "poison: " + str(exc)
    print(json.dumps({"verdict": verdict, "cpu_s": time.process_time() - start,
                      "wall_s": time.monotonic() - wall,
                      "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
""")


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes([*out, n])


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes([*out, n])


AVRO_STRING = json.dumps({"type": "record", "name": "R", "fields": [
    {"name": "s", "type": "string"}]})
AVRO_LIST = json.dumps({"type": "record", "name": "Node", "fields": [
    {"name": "next", "type": ["null", "Node"]}]})
AVRO_NULLS = json.dumps({"type": "record", "name": "R", "fields": [
    {"name": "a", "type": {"type": "array", "items": "null"}}]})
AVRO_EMPTIES = json.dumps({"type": "record", "name": "R", "fields": [
    {"name": "a", "type": {"type": "array", "items": {
        "type": "record", "name": "Empty", "fields": []}}}]})
PROTO_NODE = ('syntax = "proto3";\npackage t;\n'
              'message Node {\n  Node child = 1;\n  string name = 2;\n}\n')
PLAIN = json.dumps({"type": "object"})

BOMB_MIB = 256
_CODECS = {"gzip": 1, "lz4": 3, "zstd": 4}


def _bomb_batch(codec: str, mib: int) -> bytes:
    """A v2 record batch of ``mib`` JSON values of 1 MiB of blanks, compressed with
    ``codec``: a few hundred KB (gzip), about 1 MB (lz4) or a few KB (zstd) that inflate
    to ``mib`` MiB. Built a record at a time (a streaming compressor): little memory."""
    import zlib

    import cramjam
    from aiokafka.record.util import calc_crc32c

    value = json.dumps({"pad": " " * ((1 << 20) - 11)}).encode()
    compress: Any
    if codec == "gzip":
        deflater = zlib.compressobj(6, zlib.DEFLATED, 31)
        compress, finish = deflater.compress, deflater.flush
    else:
        packer = (cramjam.zstd.Compressor(3) if codec == "zstd" else cramjam.lz4.Compressor(
            level=9, content_checksum=False, block_linked=False))

        def compress(data: bytes) -> bytes:
            packer.compress(data)
            return b""

        def finish() -> bytes:
            return bytes(packer.finish())
    parts = []
    for i in range(mib):
        body = (b"\x00" + _zigzag(0) + _zigzag(i) + _zigzag(-1) + _zigzag(len(value)) + value
                + _zigzag(0))
        parts.append(compress(_zigzag(len(body)) + body))
    parts.append(finish())
    records = b"".join(parts)
    after_crc = (_CODECS[codec].to_bytes(2, "big") + (mib - 1).to_bytes(4, "big")
                 + bytes(16) + (-1).to_bytes(8, "big", signed=True)
                 + (-1).to_bytes(2, "big", signed=True) + (-1).to_bytes(4, "big", signed=True)
                 + mib.to_bytes(4, "big") + records)
    crc = calc_crc32c(after_crc)
    tail = (0).to_bytes(4, "big") + b"\x02" + crc.to_bytes(4, "big") + after_crc
    return bytes(8) + len(tail).to_bytes(4, "big") + tail


def _proto_nested(depth: int) -> bytes:
    body = b"\x12\x01x"  # name = "x"
    for _ in range(depth):
        body = b"\x0a" + _varint(len(body)) + body
    return body


CASES: dict[str, tuple[str, Any, bytes | Callable[[], bytes], str]] = {
    # name: (format, schema, body or what makes it, what the poison says)
    "json 10,000 deep": ("json", "", b"[" * 10_000 + b"]" * 10_000, "nested deeper"),
    "json invalid UTF-8": ("json", "", b'{"a": "\xff\xfe"}', "not valid JSON"),
    "json key 10,000 deep": ("json_key", "", b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
                             "nested deeper"),
    "json key invalid UTF-8": ("json_key", "", b'{"\xff": 1}', "not valid JSON"),
    "string key invalid UTF-8": ("string_key", "", b"k\xff\xfe", "key is not UTF-8"),
    "json_schema 10,000 deep": ("json_schema", PLAIN, b"[" * 10_000 + b"]" * 10_000,
                                "nested too deeply"),
    "json_schema invalid UTF-8": ("json_schema", PLAIN, b'{"a": "\xc3\x28"}', "not JSON"),
    "avro 1 GB string prefix": ("avro", AVRO_STRING, _zigzag(1 << 30) + b"abc" * 5,
                                "undecodable Avro body"),
    "avro invalid UTF-8": ("avro", AVRO_STRING, _zigzag(4) + b"\xff\xfe\xfd\xfc",
                           "undecodable Avro body"),
    "avro 10,000 deep": ("avro", AVRO_LIST, _zigzag(1) * 10_000 + _zigzag(0),
                         "nested too deeply"),
    "avro 100,000 deep": ("avro", AVRO_LIST, _zigzag(1) * 100_000 + _zigzag(0),
                          "nested too deeply"),
    "avro 2^40 nulls": ("avro", AVRO_NULLS, _zigzag(1 << 40) + b"\x00",
                        "items encoded in no bytes"),
    "avro 2^40 empty records": ("avro", AVRO_EMPTIES, _zigzag(1 << 40) + b"\x00",
                                "items encoded in no bytes"),
    "protobuf 1 GB string prefix": ("protobuf", PROTO_NODE, b"\x12" + _varint(1 << 30) + b"x" * 14,
                                    "undecodable Protobuf body"),
    "protobuf 10,000 deep": ("protobuf", PROTO_NODE, _proto_nested(10_000),
                             "undecodable Protobuf body"),
    "protobuf invalid UTF-8": ("protobuf", PROTO_NODE, b"\x12\x02\xff\xfe",
                               "undecodable Protobuf body"),
    # built when a case runs (a second of CPU for the three): every xdist worker imports
    # this module to collect the tests
    **{f"{codec} batch bomb ({BOMB_MIB} MiB of blanks)": (
        "batch", "", functools.partial(_bomb_batch, codec, BOMB_MIB),
        "max_batch_inflated_bytes")
       for codec in ("gzip", "lz4", "zstd")},
}


def run_case(name: str, child_path: str, timeout_s: float = 60) -> dict[str, Any]:
    """Decode :data:`CASES` ``[name]`` in a child interpreter (:func:`run_child`)."""
    fmt, schema, body, _ = CASES[name]
    data = body if isinstance(body, bytes) else body()
    return run_child(RUNNER, [json.dumps(fmt), json.dumps(schema)], data, child_path,
                     timeout_s)


def run_child(runner: str, args: list[str], body: bytes, child_path: str,
              timeout_s: float) -> dict[str, Any]:
    """Run ``python -c runner *args`` with ``body`` on stdin: the JSON line it printed
    last, or ``{"verdict": "crash: ..."}`` when it exited without success."""
    done = subprocess.run(
        [sys.executable, "-c", runner, *args], input=body, capture_output=True,
        timeout=timeout_s, env={"PYTHONPATH": child_path, "PATH": "/usr/bin:/bin"},
        check=False)
    if done.returncode != 0:
        return {"verdict": f"crash: exit {done.returncode}: {done.stderr[-2000:]!r}"}
    result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result
