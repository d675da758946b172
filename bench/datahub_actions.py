"""kstage's ``datahub_mcl`` against DataHub Actions and a raw loop, same MCL events, one run.

Usage::

    python bench/datahub_actions.py [--messages N] [--rounds R] [--keep]
                                    [--datahub-venv DIR] [--datahub-sync-commits]
                                    [--no-datahub]

One embedded broker (Tansu), one 1-partition topic holding N DataHub MetadataChangeLog
events (default 50 000, ~360 B each: the real schema, Confluent wire format, schema id 1;
the events and the producer are ``bench/throughput.py --format avro``'s). The same data
is then consumed ``--rounds`` times by each of, in turn, each with a fresh group:

(a) **raw aiokafka + fastavro**, decode only: ``throughput.py``'s raw loop
    (``getmany`` of 500, ``fastavro.schemaless_reader`` with the pre-parsed schema, one
    ``commit()`` per batch), in this process. The floor of a Python consumer.
(b) **kstage**: ``kstage run -c CFG --drain`` with the ``datahub_mcl`` processor, the
    ``avro`` format (schemas from a ``file://`` registry), the ``null`` sink and ``batch``
    commits (``max_messages: 1000``): fetch -> decode -> MCL mapping -> sink -> commit.
(c) **DataHub Actions** (``acryl-datahub-actions[kafka]``, pinned below, installed in
    its own venv, see ``--datahub-venv``): ``bench/datahub_actions_runner.py`` builds the
    pipeline ``datahub actions -c`` would from a config with DataHub's own Kafka event
    source and a counting action, and runs it in the venv's Python. The event source's
    defaults are kept: confluent-kafka ``DeserializingConsumer`` with an
    ``AvroDeserializer`` (the writer schema is fetched from a schema registry over HTTP:
    ``tests/fake_registry.py``, a faithful fake of the Confluent API, serves it here),
    ``MetadataChangeLogClass.from_obj`` per event, one event at a time through the
    pipeline, and **async commits** (``async_commit_enabled: true``): offsets of
    acknowledged events are stored, and librdkafka commits them every 10 s and on close.
    The action stops the source at the N-th event and the runner closes the pipeline,
    which commits at once; so the run does not wait for the 10 s auto-commit timer, which
    favours DataHub (a running DataHub Actions commits its last events up to 10 s later).
    The runner's environment drops ``KAFKA_PROPERTIES_*`` and turns DataHub's env overrides,
    lag monitor and telemetry off, so the pipeline is the same whatever the shell exports.
    ``--datahub-sync-commits`` adds one run with ``async_commit_enabled: false`` (a
    synchronous commit after each event), reported apart, not in the ratio.

What is timed: the same window on every side, from the partition **assignment** (the end
of the group join) to the moment the **last commit is durable**; process start-up,
imports and the join are outside it. (a) and (b) as ``throughput.py`` does (its raw
loop's clock; kstage's ``assigned partitions`` and last ``committed`` log lines). (c):
the start is an ``on_assign`` callback the runner adds to the event source's
``subscribe``; the end is the earlier of the runner's ``close()`` returning (its final
commit done) and the first answer, to this process polling the group's committed
offset every 10 ms after the N-th event, showing N. The assignment-to-first-event gap
(~20 ms for the raw loop) is inside every window; DataHub's, which includes its schema
fetch, is printed.

Checks (the run fails loudly otherwise): each side's group has committed offset N
(= the topic's high-water mark) afterwards, read back with the admin client; the raw
loop received N messages; kstage exited 0; the counting action saw N events, the last
at offset N-1, with no failed event or ack, and the runner exited 0.

Output: per round the time of each side; then each side's median events/s, and the
last two lines ``raw_ratio=<kstage/raw>`` (target >= 0.9) and ``ratio=<kstage/DataHub>``
(target >= 9). ``--no-datahub`` runs (a) and (b) only (no venv needed: the test suite's
smoke test) and ends with ``raw_ratio``.

The DataHub venv (``--datahub-venv``, default ``~/.cache/kstage-bench/datahub-actions-
<version>``) is created on first use with ``python -m venv`` and ``pip install`` of the
pinned requirement (2-4 min here, ~250 MB), and reused while its marker file names the same
pin. Timings on the shared 2-core machine are shared with the broker: only the ratios,
measured in one run against the same broker and data, mean something.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import throughput
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from throughput import (
    BenchError,
    RawResult,
    avro_workload,
    bench_run,
    produce_workload,
    run_kstage,
    run_raw,
    unique,
)

from processors.base import SCHEMA_DIR

throughput._import_stdlib_http()  # before tests.fake_registry imports http.server
sys.path.append(str(Path(__file__).resolve().parent.parent))  # the repo root: tests/
from tests.fake_registry import FakeRegistry  # noqa: E402

DATAHUB_VERSION = "1.7.0.17"  # the newest 1.x on PyPI that installs on Python 3.11
DATAHUB_REQUIREMENT = f"acryl-datahub-actions[kafka]=={DATAHUB_VERSION}"
RUNNER = Path(__file__).resolve().parent / "datahub_actions_runner.py"
MARKER = ".kstage-bench-installed"
DATAHUB_TIMEOUT_S = 900.0
COMMIT_POLL_S = 0.01
COMMIT_WAIT_S = 60.0  # after the N-th event: DataHub's close commits at once
# The same pipeline whatever this shell exports: no KAFKA_PROPERTIES_* consumer overrides,
# no lag monitor thread (off by default too), no telemetry.
DATAHUB_ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("KAFKA_PROPERTIES_")},
               "DATAHUB_ACTIONS_KAFKA_ENV_PROPERTIES_ENABLED": "false",
               "DATAHUB_ACTIONS_KAFKA_LAG_ENABLED": "false",
               "DATAHUB_TELEMETRY_ENABLED": "false"}


def default_venv() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "kstage-bench" / f"datahub-actions-{DATAHUB_VERSION}"


def datahub_python(venv: Path) -> Path:
    """The venv's Python, after creating the venv and installing the pin if its marker
    does not name the pin."""
    marker = venv / MARKER
    python = venv / "bin" / "python"
    if marker.is_file() and marker.read_text().strip() == DATAHUB_REQUIREMENT:
        return python
    print(f"installing {DATAHUB_REQUIREMENT} into {venv} (once; a few minutes)", flush=True)
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", DATAHUB_REQUIREMENT],
                   check=True)
    marker.write_text(DATAHUB_REQUIREMENT + "\n")
    return python


@dataclass
class DataHubResult:
    seconds: float  # assignment -> last commit durable
    first_event_s: float  # assignment -> the action's first event
    last_event_s: float  # assignment -> the action's N-th event
    closed_s: float  # assignment -> close() returned (its final commit done)
    polled_s: float  # assignment -> a committed-offset poll answered N
    cpu_s: float  # CPU seconds of the DataHub process in the window (all threads)


class _Committed:
    """The committed offset of partition 0 of a topic for any group, one admin client."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        self.tp = TopicPartition(topic, 0)

    async def __aenter__(self) -> _Committed:
        await self.admin.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.admin.close()

    async def offset(self, group: str) -> int:
        offsets = await self.admin.list_consumer_group_offsets(group, partitions=[self.tp])
        meta = offsets.get(self.tp)
        return -1 if meta is None else int(meta.offset)


async def run_datahub(python: Path, bootstrap: str, registry: str, topic: str, n: int,
                      workdir: Path, async_commits: bool = True) -> DataHubResult:
    group = unique("bench-datahub")
    log_path = workdir / f"{group}.log"
    args = {"name": group, "bootstrap": bootstrap, "registry": registry, "topic": topic,
            "messages": n, "failed_events_dir": str(workdir / "datahub-failed-events"),
            "async_commit_enabled": async_commits}
    marks: dict[str, dict[str, Any]] = {}
    cpu: dict[str, float] = {}
    async with _Committed(bootstrap, topic) as committed:
        with open(log_path, "wb") as log:  # noqa: ASYNC230 - opened once, before the run
            proc = await asyncio.create_subprocess_exec(
                str(python), "-P", str(RUNNER), json.dumps(args), cwd=workdir,
                stdout=asyncio.subprocess.PIPE, stderr=log, env=DATAHUB_ENV)
        assert proc.stdout is not None
        polled: float | None = None
        assignments = 0
        try:
            async with asyncio.timeout(DATAHUB_TIMEOUT_S):
                while True:
                    line = await proc.stdout.readline()
                    if not line:
                        break
                    if not line.startswith(b'{"event": '):
                        continue  # not the runner's: a library printing to stdout
                    mark = json.loads(line)
                    marks[mark["event"]] = mark
                    assignments += mark["event"] == "assigned"
                    if mark["event"] in ("assigned", "closed"):
                        cpu[mark["event"]] = throughput._cpu_s(proc.pid) or 0.0
                    if mark["event"] == "last_event":
                        polled = await _poll_committed(committed, group, n)
                code = await proc.wait()
        except TimeoutError:
            raise BenchError(f"DataHub Actions did not finish within "
                             f"{DATAHUB_TIMEOUT_S:.0f}s; log {log_path}") from None
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        got = await committed.offset(group)
    text = log_path.read_text(errors="replace")
    missing = {"assigned", "first_event", "last_event", "closed", "stats"} - set(marks)
    if code != 0 or missing:
        raise BenchError(f"DataHub Actions exited {code}, missing {sorted(missing)}; "
                         f"log {log_path}:\n{text[-4000:]}")
    last, stats = marks["last_event"], marks["stats"]
    if (marks["first_event"]["offset"] != 0 or last["offset"] != n - 1
            or last["count"] != n or stats["failed"] or stats["failed_acks"]):
        raise BenchError(f"DataHub Actions: first offset {marks['first_event']['offset']}, "
                         f"last {last['offset']} after {last['count']} events, stats "
                         f"{stats}; expected 0, {n - 1}, {n}, no failures; log {log_path}")
    if assignments != 1 or len(marks["assigned"]["partitions"]) != 1:
        raise BenchError(f"DataHub Actions: {assignments} assignment(s), the last "
                         f"{marks['assigned']['partitions']}, expected one of partition 0 "
                         f"(a rebalance skews the timing); log {log_path}")
    if got != n or polled is None:
        raise BenchError(f"DataHub Actions: committed offset {got}, expected {n}; "
                         f"log {log_path}")
    start = marks["assigned"]["t"]
    closed = marks["closed"]["t"]
    return DataHubResult(
        seconds=min(closed, polled) - start,
        first_event_s=marks["first_event"]["t"] - start,
        last_event_s=last["t"] - start,
        closed_s=closed - start,
        polled_s=polled - start,
        cpu_s=cpu.get("closed", 0.0) - cpu.get("assigned", 0.0),
    )


async def _poll_committed(committed: _Committed, group: str, n: int) -> float:
    """Poll the group's committed offset until it is ``n``: when it was seen (wall clock)."""
    deadline = time.monotonic() + COMMIT_WAIT_S
    while time.monotonic() < deadline:
        if await committed.offset(group) == n:
            return time.time()
        await asyncio.sleep(COMMIT_POLL_S)
    raise BenchError(f"DataHub Actions: group {group} did not commit offset {n} within "
                     f"{COMMIT_WAIT_S:.0f}s of its last event")


def _rate(n: int, seconds: list[float]) -> tuple[float, float]:
    median = statistics.median(seconds)
    return n / median, median


async def bench(bootstrap: str, n: int, rounds: int, workdir: Path, python: Path | None,
                sync_commits: bool = False) -> tuple[float, float | None]:
    work = avro_workload(n, workdir)
    topic, n = await produce_workload(bootstrap, work)
    with FakeRegistry() as registry:  # serves the MCL schema to DataHub's deserializer
        registry.register(f"{topic}-value",
                          (SCHEMA_DIR / "datahub/MetadataChangeLog.avsc").read_text())
        times: dict[str, list[float]] = {"raw": [], "kstage": [], "datahub": []}
        cpu: dict[str, list[float]] = {"raw": [], "kstage": [], "datahub": []}
        for r in range(1, rounds + 1):
            raw: RawResult = await run_raw(bootstrap, topic, n, work.raw_decode)
            times["raw"].append(raw.seconds)
            cpu["raw"].append(raw.cpu_s[0])
            print(f"round {r}: raw aiokafka+fastavro  {raw.seconds:6.2f} s "
                  f"({n / raw.seconds:6.0f}/s; CPU in the window: Python {raw.cpu_s[0]:.1f} s, "
                  f"broker {raw.cpu_s[1]:.1f} s)", flush=True)
            ks = await run_kstage(bootstrap, topic, n, workdir, work, "datahub_mcl")
            times["kstage"].append(ks.seconds)
            cpu["kstage"].append(ks.window_cpu_s[0])
            print(f"round {r}: kstage datahub_mcl     {ks.seconds:6.2f} s "
                  f"({n / ks.seconds:6.0f}/s; {ks.commits} commits, committed {n}; CPU in "
                  f"the window: Python {ks.window_cpu_s[0]:.1f} s, broker "
                  f"{ks.window_cpu_s[2]:.1f} s)", flush=True)
            if python is None:
                continue
            dh = await run_datahub(python, bootstrap, registry.url, topic, n, workdir)
            times["datahub"].append(dh.seconds)
            cpu["datahub"].append(dh.cpu_s)
            print(f"round {r}: DataHub Actions        {dh.seconds:6.2f} s "
                  f"({n / dh.seconds:6.0f}/s; first event {dh.first_event_s:.2f} s, N-th "
                  f"{dh.last_event_s:.2f} s, close() returned {dh.closed_s:.2f} s, offset "
                  f"{n} seen committed {dh.polled_s:.2f} s after assignment; CPU in the "
                  f"window {dh.cpu_s:.1f} s)", flush=True)
        sync = None
        if python is not None and sync_commits:
            sync = await run_datahub(python, bootstrap, registry.url, topic, n, workdir,
                                     async_commits=False)
        schema_gets = registry.count("GET")
    label = "" if rounds == 1 else f", median of {rounds}"
    raw_rate, raw_med = _rate(n, times["raw"])
    ks_rate, ks_med = _rate(n, times["kstage"])
    print(f"raw aiokafka + fastavro (decode only): {raw_rate:.0f} events/s "
          f"({raw_med:.2f} s{label})")
    print(f"kstage run --drain (datahub_mcl, null sink): {ks_rate:.0f} events/s "
          f"({ks_med:.2f} s{label})")
    ratio = None
    if python is not None:
        dh_rate, dh_med = _rate(n, times["datahub"])
        print(f"DataHub Actions {DATAHUB_VERSION} (Kafka event source, counting action, "
              f"async commits): {dh_rate:.0f} events/s ({dh_med:.2f} s{label}; "
              f"{schema_gets} schema registry GETs in all)")
        ratio = ks_rate / dh_rate
    if sync is not None:
        print(f"DataHub Actions {DATAHUB_VERSION} with async_commit_enabled: false (a "
              f"synchronous commit after each event; not in the ratio): "
              f"{n / sync.seconds:.0f} events/s ({sync.seconds:.2f} s)")
    print("CPU per event in the window (the consuming process, median): " + ", ".join(
        f"{side} {statistics.median(cpu[side]) / n * 1e6:.0f} us" for side in cpu if cpu[side]))
    return ks_rate / raw_rate, ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (configs, logs)")
    parser.add_argument("--datahub-venv", type=Path, default=None,
                        help=f"DataHub Actions venv (default {default_venv()})")
    parser.add_argument("--datahub-sync-commits", action="store_true",
                        help="one more DataHub run with async_commit_enabled: false "
                             "(not in the ratio)")
    parser.add_argument("--no-datahub", action="store_true",
                        help="run only the raw loop and kstage (no DataHub venv)")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.rounds < 1:
        parser.error("--messages and --rounds must be positive")

    python = None if args.no_datahub else datahub_python(args.datahub_venv or default_venv())
    if python is not None:
        versions = subprocess.run(
            [str(python), "-P", "-c", "import sys; from importlib.metadata import version; "
             "print(version('acryl-datahub-actions'), version('confluent-kafka'), "
             "sys.version.split()[0])"],
            check=True, capture_output=True, text=True).stdout.split()
        print(f"DataHub Actions: acryl-datahub-actions {versions[0]}, confluent-kafka "
              f"{versions[1]}, Python {versions[2]} ({python})", flush=True)
    with bench_run(args.keep, prefix="kstage-bench-dh-") as (broker, workdir):
        raw_ratio, ratio = asyncio.run(bench(broker.bootstrap, args.messages, args.rounds,
                                             workdir, python, args.datahub_sync_commits))
    print(f"raw_ratio={raw_ratio:.2f}")
    if ratio is not None:
        print(f"ratio={ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
