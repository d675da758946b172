"""Hostile bytes for every decoder (issue 33): 10,000 levels of nesting, a length prefix of
1 GB in a 20-byte message, invalid UTF-8, an array declaring 2^40 items in a few bytes.
Each must be poison (PoisonMessage, a clear error) at once: never a hang, a MemoryError
of the process, an exception of another kind, or a crash of the interpreter.

Each case decodes in a child interpreter under a memory limit (2 GB of address space)
and a time limit, so a case that crashes (a C decoder overflowing its stack), hangs or
eats memory fails here instead of taking the test run down.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.kafkautil import CHILD_PATH

_RUNNER = textwrap.dedent("""
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
    elif fmt == "json_key":
        from actors.decoding import KEY_DECODERS
        decode, raw = KEY_DECODERS["json"], body
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
    start = time.process_time()
    try:
        value = decode(raw)
        verdict = "decoded"
    except PoisonMessage as exc:
        verdict = "poison: " + str(exc)
    print(json.dumps({"verdict": verdict, "cpu_s": time.process_time() - start}))
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


def _proto_nested(depth: int) -> bytes:
    body = b"\x12\x01x"  # name = "x"
    for _ in range(depth):
        body = b"\x0a" + _varint(len(body)) + body
    return body


CASES = {
    # name: (format, schema, body, what the poison says)
    "json 10,000 deep": ("json", "", b"[" * 10_000 + b"]" * 10_000, "nested deeper"),
    "json invalid UTF-8": ("json", "", b'{"a": "\xff\xfe"}', "not valid JSON"),
    "json key 10,000 deep": ("json_key", "", b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
                             "nested deeper"),
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
}


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_bytes_are_poison_at_once(name: str) -> None:
    fmt, schema, body, says = CASES[name]
    try:
        done = subprocess.run(
            [sys.executable, "-c", _RUNNER, json.dumps(fmt), json.dumps(schema)],
            input=body, capture_output=True, timeout=60,
            env={"PYTHONPATH": CHILD_PATH, "PATH": "/usr/bin:/bin"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: still decoding after 60 s")
    assert done.returncode == 0, f"{name}: exit {done.returncode}\n{done.stderr[-2000:]!r}"
    result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert result["verdict"].startswith("poison: "), (name, result)
    assert says in result["verdict"], (name, result)
    assert result["cpu_s"] < 1.0, (name, result)


def test_avro_shapes() -> None:
    from actors.codecs.avro_shape import shape

    assert shape(json.loads(AVRO_LIST)) == {"recursive": True, "zero_items": False}
    assert shape(json.loads(AVRO_NULLS)) == {"recursive": False, "zero_items": True}
    assert shape(json.loads(AVRO_EMPTIES)) == {"recursive": False, "zero_items": True}
    tree = {"type": "record", "name": "Tree", "namespace": "t", "fields": [
        {"name": "kids", "type": {"type": "array", "items": "t.Tree"}}]}
    assert shape(tree)["recursive"]
    reused = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": {"type": "record", "name": "P", "fields": [
            {"name": "x", "type": "long"}]}},
        {"name": "b", "type": "P"},
        {"name": "c", "type": {"type": "array", "items": {"type": "fixed", "name": "F",
                                                          "size": 2}}},
        {"name": "d", "type": {"type": "map", "values": "null"}}]}
    assert shape(reused) == {"recursive": False, "zero_items": False}


async def test_a_key_or_value_past_the_cap_is_poison_before_decoding() -> None:
    from actors.failure import FailurePolicy
    from actors.worker.pipeline import RecordPipeline, no_wait
    from actors.worker.records import Record
    from processors.errors import PoisonMessage
    from processors.json_rows import JsonRowsProcessor
    from settings.models import FailureMode, FailureSettings, TopicSettings

    topic = TopicSettings.model_construct(topic="t", processor="json_rows",
                                          max_message_bytes=16)
    pipeline = RecordPipeline(topic=topic, processor=JsonRowsProcessor({}), group_id="g",
                              failure=FailurePolicy(FailureSettings(mode=FailureMode.THROW),
                                                    no_wait))
    fits = Record("t", 0, 4, 0, b"k" * 16, b'{"a": 1}')
    assert len(await pipeline.rows([fits], policy=False)) == 1
    for record, what, size in ((Record("t", 0, 5, 0, b"k" * 17, b'{"a": 1}'), "key", 17),
                               (Record("t", 0, 6, 0, None, b'{"a": "%s"}' % (b"x" * 99)),
                                "value", 108)):
        with pytest.raises(PoisonMessage, match=(
                rf"{what} of {size} bytes at t\[0\]@{record.offset} is over "
                "max_message_bytes 16: not decoded")):
            await pipeline.rows([fits, record], policy=False)
