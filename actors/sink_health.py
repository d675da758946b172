"""Whether a sink's writes keep failing: the sink half of ``/readyz``.

Every sink write is retried forever (see :func:`actors.sinks.run_sink`): nothing is acked,
nothing committed, nothing dropped while the sink is down. That is safe but silent, so
each worker keeps one :class:`SinkHealth` that the retry loop (and a sink retrying inside
its own ``write``, like the HTTP sink) tells about every failed and every successful
attempt. :meth:`SinkHealth.reason` turns it into the text ``/readyz`` shows.

Failures are tracked per key (a partition, ``(topic, partition)``): a partition whose
writes keep failing is not hidden by another partition whose writes go through. A key
is failing from the start of its first failed attempt until its next success, or until
the partition is taken from the worker (its write is fenced: the new owner retries it).

The worker is not ready while some key has been failing for at least ``unready_after_s``
seconds, or at once when its last failure was a credentials error (an expired token
does not heal by waiting). Error texts come from the sinks, which keep secrets out of
them (the HTTP sink masks its tokens and shows URLs without their query).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass

_REASON_CHARS = 300


@dataclass(slots=True)
class _Failing:
    since: float
    error: str
    attempts: int
    auth: bool


class SinkHealth:
    """Failing writes of one sink, for readiness.

    Args:
        unready_after_s: how long writes may keep failing before the sink counts as not
            ready (0: at the first failure).
        clock: monotonic seconds (tests inject a fake).
    """

    def __init__(self, unready_after_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.unready_after_s = unready_after_s
        self._clock = clock
        self._failing: dict[Hashable, _Failing] = {}

    def __repr__(self) -> str:
        return f"<SinkHealth failing={len(self._failing)} {self.reason()!r}>"

    def failed(self, key: Hashable, error: str, *, since: float | None = None,
               auth: bool = False) -> None:
        """An attempt to write ``key``'s rows failed; it started at ``since`` (monotonic)."""
        now = self._clock()
        start = now if since is None else min(since, now)
        state = self._failing.get(key)
        if state is None:
            self._failing[key] = _Failing(start, error, 1, auth)
        else:
            state.since = min(state.since, start)
            state.error, state.auth = error, auth
            state.attempts += 1

    def succeeded(self, key: Hashable) -> None:
        """A write (or one request of it) of ``key``'s rows went through."""
        self._failing.pop(key, None)

    def forget(self, keys: Iterable[Hashable]) -> None:
        """``keys`` are no longer this worker's (revoked, or fenced on a lost membership):
        their failing writes were cancelled and are retried by the new owner, so they no
        longer make this worker unready."""
        for key in keys:
            self._failing.pop(key, None)

    def failures(self) -> dict[Hashable, tuple[float, str]]:
        """Every key failing now: the monotonic start of its failure and its last error."""
        return {key: (state.since, state.error) for key, state in self._failing.items()}

    @property
    def failing_since(self) -> float | None:
        """Monotonic start of the oldest failure still going on, None when healthy."""
        return min((s.since for s in self._failing.values()), default=None)

    def reason(self) -> str | None:
        """Why the sink is not ready, None while it is (or fails for less than the
        threshold); the oldest failure first, with its last error."""
        now = self._clock()
        worst: _Failing | None = None
        for state in self._failing.values():
            if not (state.auth or now - state.since >= self.unready_after_s):
                continue
            if worst is None or (state.auth, -state.since) > (worst.auth, -worst.since):
                worst = state
        if worst is None:
            return None
        what = "sink credentials refused" if worst.auth else "sink failing"
        error = worst.error if len(worst.error) <= _REASON_CHARS else (
            worst.error[:_REASON_CHARS] + "...")
        return (f"{what} for {now - worst.since:.0f}s ({worst.attempts} failed "
                f"attempt(s)): {error}")


def sinks_reason(healths: Mapping[str, SinkHealth]) -> str | None:
    """Why a topic's sinks are not ready (None: they are): the one sink's reason, or each
    failing sink of a fan-out named."""
    if len(healths) == 1:
        return next(iter(healths.values())).reason()
    reasons = [f"sink {name!r}: {reason}" for name, health in healths.items()
               if (reason := health.reason()) is not None]
    return "; ".join(reasons) or None
