"""What ``kstage dlq show|replay`` print: the ``show`` table, or with ``--json`` every
line's record (the values of headers named like credentials masked, see
:func:`shown_record`); the replay's summary (:func:`render_replay`) and its progress
(:class:`Progress`)."""

from __future__ import annotations

import json
import sys
import time
from typing import IO, Any

from service.ops.dlq.letters import DeadLetter
from service.ops.dlq.result import ReplayResult
from settings.secrets import MASK, secret_header

_PROGRESS_MIN_LINES = 1000  # without a TTY, show progress only for replays this long


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
