"""What OpenTelemetry tracing costs ``kstage run``: the same data consumed with tracing
off and on.

Usage::

    python bench/tracing.py [--messages N] [--size BYTES] [--rounds R] [--keep]

One embedded broker (Tansu) is started; N JSON objects of about BYTES bytes are produced
once to a new 1-partition topic, each with its own W3C ``traceparent`` header (sampled:
the worst case, every message continues a producer's trace and is exported). Then,
alternately, ``--rounds`` times each, ``kstage run --drain`` (``json_rows``, the ``null``
sink, ``batch`` commits) consumes it with a fresh group:

* **off**: no ``observability`` section, no ``OTEL_*`` variables: the walk's hot path;
* **on**: ``observability: {tracing: true, endpoint: <receiver>}``, exporting OTLP/HTTP
  to a real receiver on loopback in this process (``tests/otlp_receiver.py``, decoding
  every ``ExportTraceServiceRequest``): per message a ``process`` span with its
  ``decode`` and ``transform`` children, per batch a ``write`` span.

Timed, as in ``bench/throughput.py`` (whose run helpers this uses): from kstage's
``assigned partitions`` log line to its last ``committed`` line, the median over the
rounds of each side. The SDK's batch span processor drops spans when its queue (2048
spans by default) is full; the benchmark sets ``OTEL_BSP_MAX_QUEUE_SIZE`` above the spans
of a run so that every span is exported and paid for, and counts the ``process`` spans
that reached the receiver. The flush at exit is outside the window.

``--against REV`` also times kstage at git revision ``REV`` (its ``git archive``, imported
instead of the editable install; e.g. the commit before tracing was added), with the same data, and
prints its median beside tracing off: what tracing costs when it is off.

The last line: ``on_us_per_event=<µs per event with tracing on>
added_us_per_event=<on minus off> ratio=<off seconds over on seconds>`` (the share of
the untraced throughput kept with tracing on). Timings on this 2-core machine are
shared with the broker and the receiver: only the ratio of one run means something.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
from pathlib import Path

from aiokafka import AIOKafkaProducer
from throughput import (
    BenchError,
    Workload,
    _import_stdlib_http,
    bench_run,
    create_topic,
    make_values,
    run_kstage,
    unique,
)

ROOT = Path(__file__).resolve().parent.parent

# ``python -c AT_REVISION TREE run ...``: kstage from TREE, not from the editable install
# (whose import finder would otherwise find this checkout's packages first).
AT_REVISION = """
import runpy, sys
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in repr(f)]
sys.path.insert(0, sys.argv.pop(1))
runpy.run_module("service", run_name="__main__", alter_sys=True)
"""


async def produce_traced(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """``values`` with a sampled ``traceparent`` each (trace id = the message's index)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=None, acks=1,
                                linger_ms=20, max_batch_size=512 * 1024,
                                max_request_size=4 * 1024 * 1024)
    await producer.start()
    try:
        futures = []
        for i, value in enumerate(values):
            header = f"00-{i + 1:032x}-{i + 1:016x}-01".encode()
            futures.append(await producer.send(topic, value, partition=0,
                                               headers=[("traceparent", header)]))
        await producer.flush()
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def checkout(rev: str, workdir: Path) -> Path:
    """The source tree of ``rev`` (``git archive``) in ``workdir``."""
    tree = workdir / f"src-{rev}"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


async def bench(bootstrap: str, n: int, size: int, rounds: int, workdir: Path,
                against: str | None = None) -> float:
    topic = unique("bench-tracing")
    await create_topic(bootstrap, topic)
    await produce_traced(bootstrap, topic, make_values(n, size))
    print(f"broker {bootstrap}, topic {topic}: {n} JSON messages of ~{size} B, each with "
          "a traceparent", flush=True)
    sides = ("off", "on") if against is None else ("off", "on", against)
    seconds: dict[str, list[float]] = {side: [] for side in sides}
    base = None if against is None else checkout(against, workdir)
    _import_stdlib_http()  # bench/http.py would shadow it for the receiver
    sys.path.append(str(ROOT))  # the repository's tests/
    from tests.otlp_receiver import OtlpReceiver  # after the two lines above

    with OtlpReceiver() as otlp:
        for r in range(1, rounds + 1):
            for side in sides:
                extra = ({"observability": {"tracing": True, "endpoint": otlp.url}}
                         if side == "on" else None)
                before = len(otlp.named("process "))
                work = Workload("JSON", [], lambda v: v, extra_config=extra)
                # every span exported (none dropped by a full queue): the whole cost
                os.environ["OTEL_BSP_MAX_QUEUE_SIZE"] = str(4 * n + 10_000)
                command = (sys.executable, "-m", "service") if side != against else (
                    sys.executable, "-c", AT_REVISION, str(base))
                try:
                    result = await run_kstage(bootstrap, topic, n, workdir, work, "json_rows",
                                              command=command)
                finally:
                    del os.environ["OTEL_BSP_MAX_QUEUE_SIZE"]
                seconds[side].append(result.seconds)
                spans = len(otlp.named("process ")) - before
                if side != "on" and spans:
                    raise BenchError(f"tracing off exported {spans} spans")
                got = f", {spans} of {n} process spans received" if side == "on" else ""
                name = f"tracing {side:3}" if side in ("off", "on") else f"at {side} "
                print(f"round {r}: {name}: {result.seconds:.2f} s, "
                      f"{n / result.seconds:,.0f} events/s, "
                      f"{result.seconds / n * 1e6:.1f} us/event{got}", flush=True)
    off, on = statistics.median(seconds["off"]), statistics.median(seconds["on"])
    print(f"median: off {n / off:,.0f} events/s, on {n / on:,.0f} events/s")
    if against is not None:
        then = statistics.median(seconds[against])
        print(f"median at {against} (before tracing, nothing to switch off): "
              f"{n / then:,.0f} events/s; off/{against}: {then / off:.2f}")
    print(f"on_us_per_event={on / n * 1e6:.2f} added_us_per_event={(on - off) / n * 1e6:.2f} "
          f"ratio={off / on:.2f}")
    return off / on


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=500, help="bytes per JSON message")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep configs and logs")
    parser.add_argument("--against", metavar="REV",
                        help="also time kstage at git revision REV (e.g. one before tracing "
                        "was added): tracing off against code without it")
    args = parser.parse_args(argv)
    with bench_run(args.keep, "kstage-bench-tracing-") as (broker, workdir):
        asyncio.run(bench(broker.bootstrap, args.messages, args.size, args.rounds, workdir,
                          args.against))
    return 0


if __name__ == "__main__":
    sys.exit(main())
