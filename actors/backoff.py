"""Retry waits: the one place that computes how long to wait before the next attempt.

:func:`backoff_s` is capped exponential backoff: attempt ``n`` (0 for the first retry)
waits ``min(max_s, min_s * 2**n)``, then jittered as its caller needs:

* :attr:`Jitter.NONE`: exactly that (sink and dead-letter write retries: one writer per
  partition, nothing to de-synchronise);
* :attr:`Jitter.FULL`: uniform in ``[0, d)`` (HTTP clients: the schema registry, the HTTP
  sink; many workers hitting one server must not retry in step);
* :attr:`Jitter.EQUAL`: half fixed, half uniform, in ``[d/2, d)`` (supervisor restarts:
  spread out, yet a crash loop never spins faster than half the wait).

:func:`linear_delays_s` is the other schedule, the failure policy's: ``n`` waits spread
evenly from ``min_s`` to ``max_s`` (layline's retry schedule).

The random source is a parameter (``rand``, returning a float in ``[0, 1)``) so tests
pass a fixed or seeded one. This module imports nothing of kstage, so any module of
``actors`` or ``service`` may use it without an import cycle.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from enum import StrEnum

__all__ = ["Jitter", "backoff_s", "linear_delays_s"]

# 2**60 times any sane min_s is past any sane cap; a larger exponent would only risk
# OverflowError (float) after a very long outage.
_MAX_EXPONENT = 60


class Jitter(StrEnum):
    """How a capped exponential wait ``d`` is randomised."""

    NONE = "none"    # d
    FULL = "full"    # uniform in [0, d)
    EQUAL = "equal"  # d/2 + uniform in [0, d/2)


def backoff_s(attempt: int, min_s: float, max_s: float, jitter: Jitter = Jitter.NONE,
              rand: Callable[[], float] = random.random) -> float:
    """The wait before retry ``attempt`` (0-based), in seconds.

    Args:
        attempt: retries already waited for (0: the first wait is ``min_s``).
        min_s: the first wait, doubled at every attempt.
        max_s: the cap of the wait before jitter.
        jitter: how the capped wait is randomised; see :class:`Jitter`.
        rand: a float in ``[0, 1)``; called once per wait, and only with jitter.
    """
    wait = min(max_s, min_s * 2.0 ** min(max(attempt, 0), _MAX_EXPONENT))
    if jitter is Jitter.FULL:
        return rand() * wait
    if jitter is Jitter.EQUAL:
        half = wait / 2
        return half + half * rand()
    return wait


def linear_delays_s(n: int, min_s: float, max_s: float) -> list[float]:
    """``n`` waits spread evenly from ``min_s`` to ``max_s`` (one wait: ``min_s``)."""
    if n == 1:
        return [min_s]
    step = (max_s - min_s) / (n - 1)
    return [min_s + i * step for i in range(n)]
