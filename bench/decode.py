"""Decode benchmark: kstage's Avro decode path against raw fastavro, same data, one run.

100k DataHub MetadataChangeLog events (the real schema) in the Confluent wire format.
(a) raw: ``fastavro.schemaless_reader`` with a pre-parsed schema, skipping the 5-byte
header it already knows; (b) kstage: ``AvroDecoder.decode`` -- header check, cached
writer-schema lookup by id, decode. Both run alternately ``--rounds`` times; the best
round of each is compared (the minimum is the least noisy estimate on a shared machine).
Last line: ``ratio=<kstage_time/raw_time>``; target <= 1.15.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this directory comes first on sys.path, and its http.py (the HTTP
# benchmark) would shadow the standard library's http package that httpx imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]

import argparse
import asyncio
import json
import random
import time
from io import BytesIO
from typing import Any

from fastavro import parse_schema, schemaless_reader

from actors.codecs.avro import AvroDecoder, encode
from processors.base import SCHEMA_DIR

SCHEMA_ID = 7


class _OneSchema:
    def __init__(self, text: str) -> None:
        self.text = text

    async def get_schema(self, schema_id: int | str) -> str:
        return self.text


def mcl(i: int, rng: random.Random) -> dict[str, Any]:
    urn = f"urn:li:dataset:(urn:li:dataPlatform:hive,db.table_{i},PROD)"
    aspect = {"owners": [{"owner": f"urn:li:corpuser:u{rng.randrange(500)}",
                          "type": "TECHNICAL_OWNER"}],
              "lastModified": {"time": 1700000000000 + i, "actor": "urn:li:corpuser:etl"}}
    return {
        "auditHeader": None, "entityType": "dataset", "entityUrn": urn,
        "entityKeyAspect": None, "changeType": "UPSERT", "aspectName": "ownership",
        "aspect": {"value": json.dumps(aspect).encode(), "contentType": "application/json"},
        "systemMetadata": {"lastObserved": 1700000000000 + i, "runId": f"run-{i % 97}",
                           "lastRunId": "no-run-id-provided", "pipelineName": "hive",
                           "registryName": None, "registryVersion": None,
                           "properties": {"clientId": "acryl-datahub"}, "version": "1",
                           "schemaVersion": None, "aspectCreated": None,
                           "aspectModified": None},
        "headers": None, "previousAspectValue": None, "previousSystemMetadata": None,
        "created": {"time": 1700000000000 + i, "actor": "urn:li:corpuser:etl",
                    "impersonator": None, "message": None},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    text = (SCHEMA_DIR / "datahub/MetadataChangeLog.avsc").read_text()
    parsed = parse_schema(json.loads(text))
    rng = random.Random(1)
    values = [encode(parsed, SCHEMA_ID, mcl(i, rng)) for i in range(args.messages)]

    decoder = AvroDecoder(_OneSchema(text), "int")
    for id_bytes in decoder.missing(values):
        asyncio.run(decoder.fetch(id_bytes))
    decode = decoder.decode
    assert decode(values[0]) == schemaless_reader(BytesIO(values[0][5:]), parsed, None)

    def raw() -> None:
        for v in values:
            fo = BytesIO(v)
            fo.seek(5)
            schemaless_reader(fo, parsed, None)

    def kstage() -> None:
        for v in values:
            decode(v)

    best = {"raw": float("inf"), "kstage": float("inf")}
    for _ in range(args.rounds):
        for name, fn in (("raw", raw), ("kstage", kstage)):
            started = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - started)
    n = args.messages
    for name in ("raw", "kstage"):
        print(f"{name:>6}: {best[name]:.3f} s for {n} MCL events "
              f"({best[name] / n * 1e6:.2f} us/event)")
    print(f"ratio={best['kstage'] / best['raw']:.2f}")


if __name__ == "__main__":
    main()
