"""The dead-letter files and their sidecars: the lines ``kstage dlq show`` lists and
``dlq replay`` replays.

The files are the topics' ``failure.dead_letter_path`` (a topic's ``failure`` overrides
its group's). They stay **append-only**: a replay never rewrites or removes a line. What
was replayed is recorded beside each file in ``<path>.replayed``, one JSON line per
replayed dead-letter line (``group, topic, partition, offset, failed_at``, which identify
the line, plus ``replayed_at`` and ``via``), appended and fsynced right after the
line's work became durable (:class:`Marker`). A crash mid-replay therefore re-replays at
most the message in progress (its rows carry their Kafka coordinates, so that duplicate
is idempotent downstream), and a line that fails again simply stays unreplayed.
The sidecar is created ``0600``, like the dead-letter file. One replay per file at a time
(an exclusive lock on the sidecar).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from actors.appends import fsync_dir, torn_tail, write_all
from actors.deadletters.file import FILE_MODE
from service.ops.lag import OpsError
from settings.models import Settings

logger = logging.getLogger(__name__)


def sidecar_of(path: Path) -> Path:
    return path.with_name(path.name + ".replayed")


def _identity(rec: dict[str, Any]) -> tuple[Any, ...]:
    return (rec.get("group"), rec.get("topic"), rec.get("partition"), rec.get("offset"),
            rec.get("failed_at"))


def parse_time(text: str, what: str) -> datetime:
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
    since_dt = parse_time(since, "--since") if since else None
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
                    failed_at = parse_time(str(rec["failed_at"]), "failed_at")
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


class Marker:
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
