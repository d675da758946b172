"""Hostile-input benchmark (issue 33): each case of the hostile corpus, its verdict, the
time it took and the peak RSS of the process that handled it.

* the decoder cases of :mod:`tests.hostile_corpus` (10,000-deep nesting, a 1 GB length
  prefix in a 20-byte body, invalid UTF-8, 2^40 items in 6 bytes; JSON, JSON Schema,
  Avro, Protobuf; and compressed record batches of 256 MiB of blanks, gzip, lz4 and
  zstd, read as aiokafka's fetcher reads them with the default
  ``kafka.max_batch_inflated_bytes``), each in a child interpreter under a 2 GB
  address-space limit;
* JSON Schema values whose validation has no bound of its own (``uniqueItems`` on 4,000
  objects, ``pattern: ^(a+)+$`` on 40 characters), through the validation sandbox with
  the default budget (``validate_budget_s``: 2 s), and a schema whose ``$ref`` points to
  a URL (kstage never fetches it);
* a 50 MB single message, through the record pipeline with the default
  ``max_message_bytes`` (16 MiB).

Each case runs in its own interpreter, so each RSS is that case's alone (the
interpreter with kstage imported is its floor). The baseline of a case is "poison, at
once"; the table says where kstage stands. Last line: the worst bounded case's time and
peak RSS, ``worst_s=<seconds> worst_rss_mb=<MB> (<case>)``.

    .venv/bin/python bench/hostile.py
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this directory comes first on sys.path, and its http.py (the HTTP
# benchmark) would shadow the standard library's http package that httpx imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import json  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402

from tests.hostile_corpus import CASES, run_case, run_child  # noqa: E402

_PRELUDE = """
import asyncio, json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from processors.errors import PoisonMessage

def report(verdict, wall):
    rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
              resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    print(json.dumps({"verdict": verdict, "wall_s": wall, "rss_kb": rss}))
"""

SANDBOXED = _PRELUDE + textwrap.dedent("""
    from actors.codecs.json_schema import JsonSchemaDecoder
    from actors.codecs.sandbox import ValidationSandbox
    from actors.codecs.schema_registry import RegisteredSchema
    from settings.models import TopicSettings

    class Source:
        async def get_schema(self, schema_id):
            return sys.argv[1]
        async def get_registered(self, schema_id):
            return RegisteredSchema(sys.argv[1], "JSON", ())

    async def main():
        budget = TopicSettings.model_fields["validate_budget_s"].default
        sandbox = ValidationSandbox(budget)
        decoder = JsonSchemaDecoder(Source(), sandbox=sandbox)
        raw = b"\\x00\\x00\\x00\\x00\\x01" + sys.stdin.buffer.read()
        start = time.monotonic()
        try:
            await decoder.fetch(raw[1:5])
            found = await decoder.screen([raw], ["hostile[0]@0"])
            if found:
                verdict = "poison: " + str(found[0])
            else:
                decoder.decode(raw)
                verdict = "decoded"
        except PoisonMessage as exc:
            verdict = "poison: " + str(exc)
        wall = time.monotonic() - start
        await sandbox.close()
        report(verdict, wall)

    asyncio.run(main())
""")

CAPPED = _PRELUDE + textwrap.dedent("""
    from actors.failure import FailurePolicy
    from actors.worker.pipeline import RecordPipeline, no_wait
    from actors.worker.records import Record
    from processors.json_rows import JsonRowsProcessor
    from settings.models import FailureMode, FailureSettings, TopicSettings

    async def main():
        topic = TopicSettings.model_validate({"topic": "hostile", "processor": "json_rows"})
        pipeline = RecordPipeline(topic=topic, processor=JsonRowsProcessor({}), group_id="g",
                                  failure=FailurePolicy(FailureSettings(mode=FailureMode.THROW),
                                                        no_wait))
        if len(sys.argv) > 1:  # a header of that name as a string column
            topic = TopicSettings.model_validate({**topic.model_dump(), "columns": [
                {"name": "h", "from": "header", "header": sys.argv[1]}]})
            pipeline = RecordPipeline(topic=topic, processor=JsonRowsProcessor({}),
                                      group_id="g", failure=pipeline.failure)
        body = sys.stdin.buffer.read()
        headers = [(sys.argv[1], b"\\xff\\xfe")] if len(sys.argv) > 1 else []
        start = time.monotonic()
        try:
            await pipeline.rows([Record("hostile", 0, 0, 0, None, body, headers)],
                                policy=False)
            verdict = "decoded"
        except PoisonMessage as exc:
            verdict = "poison: " + str(exc)
        report(verdict, time.monotonic() - start)

    asyncio.run(main())
""")

UNIQUE_ITEMS = json.dumps({"type": "object", "properties": {"items": {
    "type": "array", "uniqueItems": True, "items": {"type": "object"}}}})
PATTERN = json.dumps({"type": "object", "properties": {"s": {
    "type": "string", "pattern": "^(a+)+$"}}})
REMOTE_REF = json.dumps({"type": "object", "properties": {"s": {
    "$ref": "http://127.0.0.1:9/schemas/s.json"}}})


def extra_cases() -> dict[str, tuple[str, list[str], bytes, bool]]:
    """Name: (runner, its arguments, the body on stdin, whether kstage bounds it)."""
    many = json.dumps({"items": [{"i": i} for i in range(4000)]}).encode()
    return {
        "json_schema uniqueItems, 4,000 objects": (SANDBOXED, [UNIQUE_ITEMS], many, True),
        "json_schema pattern ^(a+)+$, 40 chars": (
            SANDBOXED, [PATTERN], json.dumps({"s": "a" * 39 + "!"}).encode(), True),
        "json_schema $ref to a URL": (SANDBOXED, [REMOTE_REF], b'{"s": "x"}', True),
        "header invalid UTF-8, as a string column": (CAPPED, ["trace-id"], b'{"a": 1}', True),
        "json 50 MB single message": (
            CAPPED, [], b'{"s": "' + b"x" * (50 << 20) + b'"}', True),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args()
    rows: list[tuple[str, str, float, float, bool]] = []
    for name in CASES:
        started = time.monotonic()
        result = run_case(name, str(ROOT), timeout_s=300)
        wall = result.get("wall_s", time.monotonic() - started)
        rows.append((name, result["verdict"], wall, result.get("rss_kb", 0) / 1024, True))
    for name, (runner, argv, body, bounded) in extra_cases().items():
        started = time.monotonic()
        result = run_child(runner, argv, body, str(ROOT), timeout_s=300)
        wall = result.get("wall_s", time.monotonic() - started)
        rows.append((name, result["verdict"], wall, result.get("rss_kb", 0) / 1024, bounded))
    print("| case | verdict | time (s) | peak RSS (MB) |")
    print("|---|---|---|---|")
    for name, verdict, wall, rss, _ in rows:
        shown = verdict if len(verdict) <= 110 else verdict[:107] + "..."
        print(f"| {name} | {shown.replace('|', '/')} | {wall:.3f} | {rss:.0f} |")
    bounded_rows = [r for r in rows if r[4]]
    bad = [r[0] for r in bounded_rows if not r[1].startswith("poison: ")]
    if bad:
        print(f"not poison: {', '.join(bad)}")
    worst_time = max(bounded_rows, key=lambda r: r[2])
    worst_rss = max(bounded_rows, key=lambda r: r[3])
    print(f"worst_s={worst_time[2]:.3f} ({worst_time[0]}) "
          f"worst_rss_mb={worst_rss[3]:.0f} ({worst_rss[0]})")


if __name__ == "__main__":
    main()
