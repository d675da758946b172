"""``kstage dlq show|replay``: inspect and replay the dead-letter files.

The files are the topics' ``failure.dead_letter_path`` (a topic's ``failure`` overrides
its group's). They stay **append-only**: a replay never rewrites or removes a line. What
was replayed is recorded beside each file in ``<path>.replayed``, one JSON line per
replayed dead-letter line (``group, topic, partition, offset, failed_at``, which identify
the line, plus ``replayed_at`` and ``via``), appended and fsynced right after the
line's work became durable. A crash mid-replay therefore re-replays at most the message
in progress (its rows carry their Kafka coordinates, so that duplicate is idempotent
downstream), and a line that fails again simply stays unreplayed.

``replay`` rebuilds each message (key, value and headers from base64), decodes it
through the worker's own record pipeline (:mod:`actors.worker.pipeline`: the topic's
``format``/``key_format``, Avro through the configured schema registry), runs the
processor the **given** configuration names for the topic (so a fixed processor or a
fixed config replays the failures), writes the rows to the topic's sinks (every one of a
fan-out), bound as the worker binds them (the processor's columns and table for the spark
and jdbc sinks; rows a sink refuses are dead-lettered again), then marks the line. Lines
of a sink's permanent refusal (they carry ``sink``, the sink's name; their value is the
refused row) are written again as they are to that sink only (the topic's other sinks
had the row); a sink the topic no longer has skips the line. The topic's ``filter``
applies, as in the worker: a line whose message the filter now keeps from the processor
gives no rows and is marked replayed (done, as the worker would commit it), counted as
filtered; replay means "do what the service would do with this message now", and the
filter is part of that.
``to_kafka`` instead re-produces the original key, value and headers to the original
topic and partition (``send_and_wait`` each), for the running service to consume.
``show`` prints a table, or with ``--json`` every line's record (the values of headers
named like credentials masked, see :func:`shown_record`). The sidecar is created
``0600``, like the dead-letter file.
One replay per file at a time (an exclusive lock on the sidecar).

``--from-topic NAME`` reads a dead-letter topic (``failure.dead_letter_topic``) instead,
from its beginning to its end, with a consumer that joins no group: each record becomes
the line it stands for (its ``kstage.error.*`` headers give the line's fields, the other
headers are the message's own). The replay bookkeeping is the committed offset of the
consumer group ``kstage-dlq-replay-NAME`` on the topic: committed after each replayed
record, so it is shared by every replica and host, survives ephemeral disks, and a
re-commit is idempotent. A record at or past that offset is not replayed yet. Records of
a partition are replayed in order and the offset never moves past a record that failed
again: the rest of that partition waits for the next replay (reported as skipped), so no
record is replayed twice. For the same reason ``--topic`` and ``--since`` select what
``show`` prints, not what ``replay --from-topic`` replays.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import fcntl
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from actors.appends import fsync_dir, torn_tail, write_all
from actors.codecs.avro import AvroDecoder, load_schema
from actors.codecs.by_id import REGISTRY_FORMATS
from actors.codecs.registries import decoder_for
from actors.deadletters.file import FILE_MODE
from actors.deadletters.topic import HEADER_PREFIX, SINK_HEADER_FIELDS, DeadLetterTopic
from actors.failure import FailurePolicy
from actors.resources import Resources
from actors.topic_patterns import pattern_entry
from actors.worker.bound import BoundSink, bound_sinks
from actors.worker.pipeline import RecordPipeline, no_wait
from actors.worker.records import Collect, Record
from processors.base import Processor
from processors.registry import for_options
from service.ops.lag import (
    OpsError,
    admin_client,
    bootstrap_of,
    connection_kwargs,
    topic_partitions,
)
from settings.models import GroupSettings, Settings, TopicSettings
from settings.secrets import MASK, secret_header

logger = logging.getLogger(__name__)

_PROGRESS_MIN_LINES = 1000  # without a TTY, show progress only for replays this long


def sidecar_of(path: Path) -> Path:
    return path.with_name(path.name + ".replayed")


def _identity(rec: dict[str, Any]) -> tuple[Any, ...]:
    return (rec.get("group"), rec.get("topic"), rec.get("partition"), rec.get("offset"),
            rec.get("failed_at"))


def _parse_time(text: str, what: str) -> datetime:
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise OpsError(f"{what} {text!r}: expected an ISO-8601 time such as "
                       "2026-11-22T06:00:00Z") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@dataclass(slots=True)
class DeadLetter:
    """One dead-letter line, where it is, and whether the sidecar marks it replayed."""

    path: Path
    line: int
    record: dict[str, Any]
    replayed: bool

    def describe(self) -> str:
        r = self.record
        return f"{r.get('topic')}[{r.get('partition')}]@{r.get('offset')} ({self.path}:{self.line})"


def dead_letter_paths(settings: Settings) -> list[Path]:
    """Every dead-letter file the configuration names, in order, without duplicates."""
    paths: dict[Path, None] = {}
    for group in settings.groups:
        for topic in group.topics:
            path = (topic.failure or group.failure).dead_letter_path
            if path is not None:  # null: the dead letters go to a topic only
                paths[Path(path)] = None
    return list(paths)


def _read_replayed(path: Path) -> set[tuple[Any, ...]]:
    done: set[tuple[Any, ...]] = set()
    side = sidecar_of(path)
    if side.exists():
        with side.open("rb") as fh:
            for raw in fh:
                try:
                    done.add(_identity(json.loads(raw)))
                except (ValueError, AttributeError):
                    continue  # a line torn by a crash: its message is replayed again
    return done


def _being_written(fh: IO[bytes]) -> bool:
    """True while a writer holds the file's lock (it is appending its last line)."""
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    return False


def load(settings: Settings, *, topic: str | None = None,
         since: str | None = None) -> tuple[list[DeadLetter], int]:
    """The dead-letter lines (filtered by topic and ``failed_at >= since``) and the count
    of unreadable lines, each skipped with a warning naming its file and line: a line a
    crash or a full disk tore (it stands alone: writers end a torn tail with a newline
    before they append), or a torn last line no writer has ended yet. A last line without
    its newline while a writer holds the file's lock is still being written: skipped."""
    since_dt = _parse_time(since, "--since") if since else None
    found: list[DeadLetter] = []
    bad = 0
    for path in dead_letter_paths(settings):
        if not path.exists():
            continue
        done = _read_replayed(path)
        with path.open("rb") as fh:
            for number, raw in enumerate(fh, 1):
                if not raw.endswith(b"\n"):
                    if not _being_written(fh):
                        bad += 1
                        logger.warning("%s:%d: torn last line (a write was cut short); "
                                       "ignored", path, number)
                    break
                if not raw.strip():
                    continue
                try:
                    rec = json.loads(raw)
                    failed_at = _parse_time(str(rec["failed_at"]), "failed_at")
                    if not isinstance(rec["topic"], str):
                        raise TypeError("topic")
                except (ValueError, KeyError, TypeError, OpsError):
                    bad += 1
                    logger.warning("%s:%d: not a dead-letter line; ignored", path, number)
                    continue
                if topic is not None and rec["topic"] != topic:
                    continue
                if since_dt is not None and failed_at < since_dt:
                    continue
                found.append(DeadLetter(path, number, rec, _identity(rec) in done))
    return found, bad


def replay_group(dlq_topic: str) -> str:
    """The consumer group whose committed offsets mark a dead-letter topic's replays."""
    return f"kstage-dlq-replay-{dlq_topic}"


def topic_letter(dlq_topic: str, msg: Any) -> dict[str, Any] | None:
    """The dead-letter line a record of the dead-letter topic stands for; None when the
    record has no ``kstage.error.topic`` header (not a kstage dead letter)."""
    errors: dict[str, str] = {}
    own: list[list[str | None]] = []
    for key, value in msg.headers or ():
        if key.startswith(HEADER_PREFIX):
            errors[key[len(HEADER_PREFIX):]] = (value or b"").decode("utf-8", "replace")
        else:
            own.append([key, None if value is None else base64.b64encode(value).decode()])
    if not errors.get("topic"):
        return None

    def number(name: str) -> int:
        try:
            return int(errors.get(name, ""))
        except ValueError:
            return -1

    def b64(data: bytes | None) -> str | None:
        return None if data is None else base64.b64encode(data).decode("ascii")

    # a row a sink refused: the sink it goes back to
    sink: dict[str, Any] = {field: errors[name] for name, field in SINK_HEADER_FIELDS
                            if name in errors}
    if "status" in sink:
        sink["status"] = number("status")
    return {**sink, "group": errors.get("group"), "topic": errors["topic"],
            "partition": number("partition"), "offset": number("offset"),
            "timestamp": msg.timestamp, "key": b64(msg.key), "value": b64(msg.value),
            "headers": own, "processor": errors.get("processor"),
            "error_type": errors.get("type"), "error": errors.get("message"),
            "attempts": number("attempts"), "failed_at": errors.get("failed_at"),
            "dead_letter_topic": dlq_topic, "dead_letter_partition": msg.partition,
            "dead_letter_offset": msg.offset}


_READ_TIMEOUT_S = 60.0  # reading a dead-letter topic to its end


async def _topic_consumer(settings: Settings, dlq_topic: str) -> Any:
    """A consumer of every partition of ``dlq_topic`` that joins no group and commits
    only when told (the replay's bookkeeping), started."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_of(settings),
                                client_id=f"{settings.kafka.client_id}-dlq",
                                group_id=replay_group(dlq_topic), enable_auto_commit=False,
                                auto_offset_reset="earliest", **connection_kwargs(settings))
    await consumer.start()
    try:
        # The partitions from a metadata request of their own: the consumer's metadata
        # knows no topic before it is given one (Apache Kafka 4 answers its bootstrap
        # request, which names none, with none).
        async with admin_client(settings) as admin:
            try:
                tps = (await topic_partitions(admin, [dlq_topic]))[dlq_topic]
            except OpsError:
                raise OpsError(f"dead-letter topic {dlq_topic!r} does not exist on "
                               f"{bootstrap_of(settings)}") from None
        consumer.assign(tps)
        await consumer.seek_to_beginning()
    except BaseException:
        await consumer.stop()
        raise
    return consumer


async def _read_topic(consumer: Any, dlq_topic: str) -> list[Any]:
    """Every record of the assigned partitions, from the beginning to the fetch
    high-water mark seen (``end_offsets`` is not trusted: see ENVIRONMENT notes)."""
    records: list[Any] = []
    tps = consumer.assignment()
    try:
        async with asyncio.timeout(_READ_TIMEOUT_S):
            while True:
                batch = await consumer.getmany(timeout_ms=500)
                for msgs in batch.values():
                    records.extend(msgs)
                behind = 0
                for tp in tps:
                    end = consumer.highwater(tp)
                    behind += end is None or await consumer.position(tp) < end
                if not behind:
                    return records
    except TimeoutError:
        raise OpsError(f"could not read dead-letter topic {dlq_topic!r} to its end within "
                       f"{_READ_TIMEOUT_S:.0f}s") from None


async def load_topic(settings: Settings, dlq_topic: str, *, topic: str | None = None,
                     since: str | None = None, consumer: Any = None
                     ) -> tuple[list[DeadLetter], int]:
    """The records of dead-letter topic ``dlq_topic`` as dead-letter lines (filtered like
    :func:`load`), replayed when below the replay group's committed offset, and the count
    of records that are not kstage dead letters."""
    since_dt = _parse_time(since, "--since") if since else None
    own = consumer is None
    if own:
        consumer = await _topic_consumer(settings, dlq_topic)
    try:
        records = await _read_topic(consumer, dlq_topic)
        done = {tp.partition: await consumer.committed(tp) for tp in consumer.assignment()}
    finally:
        if own:
            await consumer.stop()
    found: list[DeadLetter] = []
    bad = 0
    for msg in sorted(records, key=lambda m: (m.partition, m.offset)):
        rec = topic_letter(dlq_topic, msg)
        where = f"{dlq_topic}[{msg.partition}]@{msg.offset}"
        if rec is None:
            bad += 1
            logger.warning("%s: not a dead-letter record (no %stopic header); ignored",
                           where, HEADER_PREFIX)
            continue
        if topic is not None and rec["topic"] != topic:
            continue
        if since_dt is not None:
            try:
                if _parse_time(str(rec["failed_at"]), "failed_at") < since_dt:
                    continue
            except OpsError:
                pass
        mark = done.get(msg.partition)
        found.append(DeadLetter(Path(f"{dlq_topic}[{msg.partition}]"), msg.offset, rec,
                                mark is not None and msg.offset < mark))
    return found, bad


def shown_record(letter: DeadLetter) -> dict[str, Any]:
    """A dead-letter line as ``show --json`` prints it: the line's record, where it is and
    whether it was replayed; the values of headers named like credentials (authorization,
    cookie, token, password, secret, api-key ...) read ``**********``."""
    record = dict(letter.record)
    headers = record.get("headers")
    if isinstance(headers, list):
        record["headers"] = [
            [h[0], MASK if h[1] is not None else None]
            if isinstance(h, list | tuple) and len(h) == 2 and secret_header(h[0]) else h
            for h in headers]
    return {**record, "file": str(letter.path), "line": letter.line,
            "replayed": letter.replayed}


def render_json(lines: list[DeadLetter]) -> str:
    """The ``show --json`` output: one JSON object per dead-letter line."""
    return "\n".join(json.dumps(shown_record(d), ensure_ascii=False) for d in lines)


def render(lines: list[DeadLetter], unreadable: int = 0) -> str:
    """The ``show`` table; ``SINK`` names the sink that refused the row for good, ``-``
    for a message that failed before any sink (decoding, processing)."""
    head = ("TOPIC", "PARTITION", "OFFSET", "SINK", "ERROR_TYPE", "ERROR", "FAILED_AT",
            "REPLAYED")
    body = [(str(d.record.get("topic")), str(d.record.get("partition")),
             str(d.record.get("offset")), str(d.record.get("sink", "-")),
             str(d.record.get("error_type", "")),
             " ".join(str(d.record.get("error", "")).split())[:80],
             str(d.record.get("failed_at")), "yes" if d.replayed else "no") for d in lines]
    widths = [max(len(cells[i]) for cells in (head, *body)) for i in range(len(head))]
    out = ["  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
           for cells in (head, *body)]
    done = sum(d.replayed for d in lines)
    out.append(f"{len(lines)} dead-lettered, {done} replayed, {len(lines) - done} not replayed"
               + (f", {unreadable} unreadable line(s) ignored" if unreadable else ""))
    return "\n".join(out)


class Progress:
    """A progress bar on ``stream``: redrawn in place on a TTY; elsewhere (logs, CI) a
    line per 10% for long runs. Silent for short runs without a TTY."""

    def __init__(self, total: int, stream: IO[str] | None = None) -> None:
        self.total, self.done = total, 0
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self.enabled = total > 0 and (self._tty or total > _PROGRESS_MIN_LINES)
        self._started = time.monotonic()
        self._drawn = self._started - 1.0  # draw the first step at once
        self._step = -1

    def advance(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        step = self.done * 10 // self.total
        if self._tty and (now - self._drawn >= 0.1 or self.done == self.total):
            self._stream.write("\r" + self._text(now) + "\x1b[K")  # clear to end of line
        elif not self._tty and step != self._step:
            self._stream.write(self._text(now) + "\n")
        else:
            return
        self._drawn, self._step = now, step
        self._stream.flush()

    def _text(self, now: float) -> str:
        width = 30
        filled = width * self.done // self.total
        rate = self.done / max(now - self._started, 1e-6)
        eta = (self.total - self.done) / rate if rate else 0.0
        return (f"replay [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                f"{rate:.0f}/s eta {eta:.0f}s")

    def close(self) -> None:
        if self.enabled and self._tty:
            self._stream.write("\n")
            self._stream.flush()


@dataclass(slots=True)
class ReplayResult:
    replayed: list[DeadLetter] = field(default_factory=list)
    failed: list[tuple[DeadLetter, str]] = field(default_factory=list)
    skipped: list[tuple[DeadLetter, str]] = field(default_factory=list)
    already: int = 0
    unreadable: int = 0
    filtered: int = 0  # of replayed: kept from the processor by the topic's filter


class _Marker:
    """The append-only, fsynced sidecar of one dead-letter file, locked for one replay."""

    def __init__(self, path: Path) -> None:
        side = sidecar_of(path)
        side.parent.mkdir(parents=True, exist_ok=True)
        created = not side.exists()
        self._fd = os.open(side, os.O_RDWR | os.O_APPEND | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise OpsError(f"another replay of {path} is running (lock on {side})") from None
        if torn_tail(self._fd, os.fstat(self._fd).st_size):
            write_all(self._fd, b"\n")  # end a line torn by a crash; it stays ignored
        if created:
            fsync_dir(side.parent)

    def mark(self, letter: DeadLetter, via: str) -> None:
        r = letter.record
        entry = {"group": r.get("group"), "topic": r.get("topic"),
                 "partition": r.get("partition"), "offset": r.get("offset"),
                 "failed_at": r.get("failed_at"), "line": letter.line, "via": via,
                 "replayed_at": datetime.now(UTC).isoformat(timespec="seconds")
                 .replace("+00:00", "Z")}
        write_all(self._fd, (json.dumps(entry) + "\n").encode())
        os.fsync(self._fd)
        letter.replayed = True

    def close(self) -> None:
        os.close(self._fd)  # releases the lock


def _b64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


class _Target:
    """A configured topic's record pipeline and sink (bound as the worker binds it: the
    processor's columns and table, the settings, refused rows dead-lettered), started on
    first use."""

    def __init__(self, settings: Settings, group: GroupSettings, topic: TopicSettings,
                 cls: type[Processor], registry: Any, id_type: str,
                 resources: Resources) -> None:
        self._started = self._open = False
        reader = load_schema(topic.reader_schema) if topic.reader_schema else None
        label = f"dlq replay {settings.group_id(group)}/{topic.topic}"
        # Failures are not retried here (a walk without the policy raises them): a line
        # that fails again stays unreplayed.
        failure = topic.failure or group.failure
        self.pipeline = RecordPipeline(
            topic=topic, processor=cls(topic.options), group_id=settings.group_id(group),
            label=label, failure=FailurePolicy(failure, no_wait),
            avro=None if registry is None or topic.format not in REGISTRY_FORMATS else
            decoder_for(topic.format, registry, settings.schema_registry,  # type: ignore[arg-type]
                        reader_schema=reader, validate=topic.validate_schema,
                        budget_s=topic.validate_budget_s),
            avro_keys=AvroDecoder(registry, id_type) if registry is not None else None,
            # rows the sinks refuse again go to the dead-letter topic too
            dead_letter_topic=None if failure.dead_letter_topic is None else DeadLetterTopic(
                failure.dead_letter_topic, bootstrap_of(settings),
                f"{settings.kafka.client_id}-dlq", connection_kwargs(settings)))
        self.processor = self.pipeline.processor
        self.sinks: dict[str, BoundSink] = {
            bound.name: bound for bound in bound_sinks(settings, topic, cls, label=label,
                                                       refuse=self.pipeline.dead_letters.refuser,
                                                       group=settings.group_id(group),
                                                       resources=resources)}
        self._opened: set[str] = set()
        self._stack: AsyncExitStack | None = None
        self.holding = False  # the sinks gather every row handed over (hold_flushes)

    async def start(self, stack: AsyncExitStack) -> None:
        """Start the processor (once; stopped by ``stack``, which closes the sinks opened
        on first use too)."""
        self._stack = stack
        if not self._started:
            await self.processor.start()
            self._started = True
            stack.push_async_callback(self.processor.stop)
            stack.push_async_callback(self.pipeline.close)  # dead-letter topic, children

    async def _sink(self, name: str) -> BoundSink:
        """The sink ``name``, opened on first use (closed by the stack of :meth:`start`)."""
        bound = self.sinks[name]
        if name not in self._opened:
            await bound.sink.open()
            self._opened.add(name)
            assert self._stack is not None  # noqa: S101 - start() comes first
            self._stack.push_async_callback(bound.sink.close)
            if self.holding:
                bound.sink.hold_flushes()
        return bound

    def hold(self) -> None:
        """The replay hands over letters without waiting: the sinks gather them into one
        write (one append per table) until :meth:`release`."""
        if not self.holding:
            self.holding = True
            for name in self._opened:
                self.sinks[name].sink.hold_flushes()

    def release(self) -> None:
        """Every letter was handed over: the sinks write what they gathered now."""
        if self.holding:
            self.holding = False
            for name in self._opened:
                self.sinks[name].sink.release_flushes()

    def flush_soon(self) -> None:
        for name in self._opened:
            self.sinks[name].sink.flush_soon()

    async def replay(self, rec: dict[str, Any]) -> Handed:
        """Decode, transform and hand one dead-lettered message to every sink of its
        topic (raises on failure; the writes' errors come from :meth:`Handed.durable`); a
        row one sink refused goes to that sink only, as it is (the others had it)."""
        key, value = _b64(rec.get("key")), _b64(rec.get("value"))
        if "sink" in rec:  # the sink refused this row for good: offer it again as it is
            name = str(rec["sink"])
            if name not in self.sinks:
                return Handed(f"refused by sink {name!r}, which topic {rec.get('topic')!r} "
                              f"no longer has (its sinks: {', '.join(self.sinks)})")
            return Handed(writes=[await self._write(await self._sink(name),
                                                    [json.loads(value or b"null")])])
        record = Record(str(rec["topic"]), int(rec["partition"]), int(rec["offset"]),
                        int(rec.get("timestamp") or 0), key, value,
                        tuple((str(k), _b64(v)) for k, v in rec.get("headers") or ()),
                        int(rec.get("timestamp_type", -1)))
        await self.pipeline.load_schemas([record])  # raises what the registry answered
        stats = self.pipeline.stats
        filtered = stats["filtered"]
        route = Collect()
        await self.pipeline.walk([record], route, policy=False)
        if stats["filtered"] > filtered:  # the topic's filter keeps it out: no write
            return Handed()
        # each its own list: a sink may empty the one it gets
        return Handed(writes=[await self._write(await self._sink(name), list(route.rows))
                              for name in self.sinks])

    async def _write(self, bound: BoundSink, rows: list[Any]) -> asyncio.Task[None]:
        """Hand ``rows`` to the sink: the write, durable once it is done. It starts now
        (a held micro-batching sink gathers it with the letters after it)."""
        write = asyncio.ensure_future(bound.sink.write(rows))
        await asyncio.sleep(0)  # the write reaches its sink before the next letter
        return write


@dataclass(slots=True)
class Handed:
    """One letter handed to its sinks: why it was skipped (None: replayed once its
    writes are durable), and its writes."""

    skipped: str | None = None
    writes: list[asyncio.Task[None]] = field(default_factory=list)

    async def durable(self, flush_soon: Callable[[], None]) -> str | None:
        """Wait until every write is durable (raises a write's error); ``flush_soon``
        is called while waiting, as the worker does when its pipeline is full, so a
        micro-batching sink (spark, jdbc) writes now rather than after its
        ``flush_max_interval_s``."""
        for write in self.writes:
            while not write.done():
                flush_soon()
                await asyncio.wait([write], timeout=0.05)
        for write in self.writes:
            await write
        return self.skipped


class Handler(abc.ABC):
    """Replays dead-letter records: hands each over (``__call__``), while the sinks
    gather them (:meth:`hold`) until :meth:`release`."""

    @abc.abstractmethod
    async def __call__(self, rec: dict[str, Any]) -> Handed:
        """Hand one dead-letter record over (raises when it cannot be)."""

    def hold(self) -> None:  # noqa: B027 - optional hook
        """Gather what is handed over from now on into as few writes as possible."""

    def release(self) -> None:  # noqa: B027 - optional hook
        """Write what was gathered now."""

    def flush_soon(self) -> None:  # noqa: B027 - optional hook
        """Write now what waits in a micro-batching sink."""


_REPLAY_CHUNK = 10_000  # letters handed over before the replay waits for their writes


class _Processors(Handler):
    """Replays through each letter's topic's processor and sinks (:class:`_Target`)."""

    def __init__(self, handle: Callable[[dict[str, Any]], Awaitable[Handed]],
                 targets: dict[tuple[str, str], _Target]) -> None:
        self._handle, self._targets = handle, targets
        self._holding = False

    async def __call__(self, rec: dict[str, Any]) -> Handed:
        return await self._handle(rec)

    def hold(self) -> None:
        self._holding = True
        for target in self._targets.values():
            target.hold()

    def release(self) -> None:
        self._holding = False
        for target in self._targets.values():
            target.release()

    @property
    def holding(self) -> bool:
        return self._holding

    def flush_soon(self) -> None:
        for target in self._targets.values():
            target.flush_soon()


class _ToKafka(Handler):
    def __init__(self, handle: Callable[[dict[str, Any]], Awaitable[str | None]]) -> None:
        self._handle = handle

    async def __call__(self, rec: dict[str, Any]) -> Handed:
        return Handed(await self._handle(rec))


async def _processor_handler(settings: Settings, stack: AsyncExitStack,
                             result: ReplayResult | None = None) -> Handler:
    from actors.master import resolve_processors  # loads plugins

    classes = resolve_processors(settings)
    # The replay's SparkActor (spark and jdbc sinks), stopped after the sinks are closed.
    resources = Resources(settings.spark)
    stack.push_async_callback(resources.close)
    registry: Any = None
    if settings.schema_registry is not None:
        from actors.codecs.registries import registry_from_settings

        registry = await stack.enter_async_context(
            registry_from_settings(settings.schema_registry))
    id_type = settings.schema_registry.id_type if settings.schema_registry else "int"
    exact = {(settings.group_id(g), t.topic): (g, t) for g in settings.groups for t in g.topics}
    by_topic: dict[str, list[tuple[GroupSettings, TopicSettings]]] = {}
    for g, t in exact.values():
        by_topic.setdefault(t.topic, []).append((g, t))
    targets: dict[tuple[str, str], _Target] = {}

    async def handle(rec: dict[str, Any]) -> Handed:
        # the line's (group, topic); else its topic, when one configured group reads it;
        # else the entry the line's group's topic_pattern makes for it
        found = exact.get((str(rec.get("group")), str(rec.get("topic"))))
        candidates = by_topic.get(str(rec.get("topic")), [])
        found = found or (candidates[0] if len(candidates) == 1 else None)
        found = found or _by_pattern(settings, str(rec.get("group")), str(rec.get("topic")))
        if found is None:
            return Handed("topic not in the configuration")
        group, topic = found
        key = (settings.group_id(group), topic.topic)
        if key not in targets:
            targets[key] = _Target(settings, group, topic,
                                   for_options(classes[topic.processor], topic.options),
                                   registry, id_type, resources)
            if handler.holding:
                targets[key].hold()
        target = targets[key]
        await target.start(stack)
        filtered = target.pipeline.stats["filtered"]
        handed = await target.replay(rec)
        if result is not None:
            result.filtered += target.pipeline.stats["filtered"] - filtered
        return handed
    handler = _Processors(handle, targets)
    return handler


def _by_pattern(settings: Settings, group_id: str, topic: str
                ) -> tuple[GroupSettings, TopicSettings] | None:
    """The entry a ``topic_pattern`` of group ``group_id`` makes for ``topic``, if any."""
    for group in settings.groups:
        if settings.group_id(group) == group_id:
            entry = pattern_entry(group, topic)
            if entry is not None:
                return group, entry
    return None


async def _kafka_handler(settings: Settings, stack: AsyncExitStack) -> Handler:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_of(settings),
                                client_id=f"{settings.kafka.client_id}-replay",
                                acks="all", **connection_kwargs(settings))
    await producer.start()
    stack.push_async_callback(producer.stop)

    async def handle(rec: dict[str, Any]) -> str | None:
        if "sink" in rec:
            return "a row refused by the sink, not a Kafka message: replay it without --to-kafka"
        partition = rec.get("partition")
        await producer.send_and_wait(
            str(rec["topic"]), value=_b64(rec.get("value")), key=_b64(rec.get("key")),
            headers=[(str(k), _b64(v)) for k, v in rec.get("headers") or ()],
            partition=partition if isinstance(partition, int) and partition >= 0 else None)
        return None
    return _ToKafka(handle)


async def replay_async(settings: Settings, *, topic: str | None = None,
                       since: str | None = None, to_kafka: bool = False,
                       progress_stream: IO[str] | None = None) -> ReplayResult:
    """Replay every not-yet-replayed dead-letter line (filtered); see the module doc."""
    letters, unreadable = load(settings, topic=topic, since=since)
    result = ReplayResult(already=sum(d.replayed for d in letters), unreadable=unreadable)
    todo = [d for d in letters if not d.replayed]
    if not todo:
        return result
    progress = Progress(len(todo), progress_stream)
    markers: dict[Path, _Marker] = {}
    async with AsyncExitStack() as stack:
        stack.callback(progress.close)
        for path in dict.fromkeys(d.path for d in todo):
            markers[path] = _Marker(path)
            stack.callback(markers[path].close)
        via = "kafka" if to_kafka else "processor"
        handle = await (_kafka_handler(settings, stack) if to_kafka
                        else _processor_handler(settings, stack, result))
        for start in range(0, len(todo), _REPLAY_CHUNK):
            # The letters are handed over first, then waited for: a table sink writes
            # them in one append per table, not one per letter.
            handed: list[tuple[DeadLetter, Handed]] = []
            handle.hold()
            for letter in todo[start:start + _REPLAY_CHUNK]:
                progress.advance()
                try:
                    handed.append((letter, await handle(letter.record)))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the line stays unreplayed
                    result.failed.append((letter, f"{type(exc).__name__}: {exc}"))
            handle.release()
            for letter, one in handed:
                try:
                    skipped = await one.durable(handle.flush_soon)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the line stays unreplayed
                    result.failed.append((letter, f"{type(exc).__name__}: {exc}"))
                    continue
                if skipped is not None:
                    result.skipped.append((letter, skipped))
                    continue
                markers[letter.path].mark(letter, via)  # only after the work is durable
                result.replayed.append(letter)
    return result


async def replay_topic_async(settings: Settings, dlq_topic: str, *, to_kafka: bool = False,
                             progress_stream: IO[str] | None = None) -> ReplayResult:
    """Replay every record of dead-letter topic ``dlq_topic`` past the replay group's
    committed offset, in order per partition; see the module doc."""
    from aiokafka import TopicPartition

    consumer = await _topic_consumer(settings, dlq_topic)
    try:
        letters, unreadable = await load_topic(settings, dlq_topic, consumer=consumer)
        result = ReplayResult(already=sum(d.replayed for d in letters), unreadable=unreadable)
        todo = [d for d in letters if not d.replayed]
        if not todo:
            return result
        progress = Progress(len(todo), progress_stream)
        held: dict[int, str] = {}  # partition -> the record the others wait behind
        async with AsyncExitStack() as stack:
            stack.callback(progress.close)
            handle = await (_kafka_handler(settings, stack) if to_kafka
                            else _processor_handler(settings, stack, result))
            for letter in todo:
                progress.advance()
                partition = int(letter.record["dead_letter_partition"])
                if partition in held:
                    result.skipped.append((letter, f"waits behind {held[partition]}, "
                                                   "which was not replayed"))
                    continue
                try:
                    # one at a time: a letter that fails holds its partition's next ones
                    skipped = await (await handle(letter.record)).durable(handle.flush_soon)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the record stays unreplayed
                    result.failed.append((letter, f"{type(exc).__name__}: {exc}"))
                    held[partition] = f"{dlq_topic}[{partition}]@{letter.line}"
                    continue
                if skipped is not None:
                    result.skipped.append((letter, skipped))
                    held[partition] = f"{dlq_topic}[{partition}]@{letter.line}"
                    continue
                # only after the work is durable; committing it again is harmless
                await consumer.commit({TopicPartition(dlq_topic, partition): letter.line + 1})
                letter.replayed = True
                result.replayed.append(letter)
        return result
    finally:
        await consumer.stop()


def render_replay(result: ReplayResult, to_kafka: bool = False) -> str:
    lines = [f"failed again: {d.describe()}: {why}" for d, why in result.failed]
    lines += [f"skipped: {d.describe()}: {why}" for d, why in result.skipped]
    where = "re-produced to Kafka" if to_kafka else "replayed"
    filtered = f" ({result.filtered} filtered by the topic's filter)" if result.filtered else ""
    lines.append(f"{len(result.replayed)} {where}{filtered}, {len(result.failed)} failed, "
                 f"{len(result.skipped)} skipped, {result.already} already replayed"
                 + (f", {result.unreadable} unreadable line(s) ignored"
                    if result.unreadable else ""))
    return "\n".join(lines)


def show(settings: Settings, topic: str | None = None, since: str | None = None,
         from_topic: str | None = None) -> tuple[list[DeadLetter], int]:
    """Synchronous entry point of ``dlq show``."""
    if from_topic is not None:
        return asyncio.run(load_topic(settings, from_topic, topic=topic, since=since))
    return load(settings, topic=topic, since=since)


def replay(settings: Settings, topic: str | None = None, since: str | None = None,
           to_kafka: bool = False, from_topic: str | None = None) -> ReplayResult:
    """Synchronous entry point of ``dlq replay``."""
    if from_topic is not None:
        if topic is not None or since is not None:
            raise OpsError("--topic and --since do not apply to replay --from-topic: it "
                           "replays each partition of the dead-letter topic in order, "
                           "marking progress with the replay group's committed offset")
        return asyncio.run(replay_topic_async(settings, from_topic, to_kafka=to_kafka))
    return asyncio.run(replay_async(settings, topic=topic, since=since, to_kafka=to_kafka))
