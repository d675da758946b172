"""The per-message failure policy: continue (dead-letter), throw, or retry then decide.

Retry waits follow layline's schedule: ``max_retries`` waits spread linearly from
``min_backoff_ms`` to ``max_backoff_ms`` (3 retries between 60 s and 100 s wait 60, 80
and 100 s). Waits go through an injectable ``sleep`` so tests use a fake clock, and
they end early when the worker stops (the message is then abandoned, not committed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Any

from actors.backoff import linear_delays_s
from actors.errors import MessageFailedError
from processors.errors import PoisonMessage, StopTopic
from settings.models import FailureMode, FailureSettings

logger = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[bool]]
"""Waits the given seconds; returns False when the wait was interrupted by a stop."""


class Outcome(Enum):
    """What became of a failed message."""

    RECOVERED = "recovered"        # a retry succeeded: its result is in ``value``
    DEAD_LETTERED = "dead_lettered"  # written to the dead-letter file, move on
    ABANDONED = "abandoned"        # stop requested while waiting: do not commit


def retry_delays_s(settings: FailureSettings) -> list[float]:
    """The waits before each retry, in seconds."""
    return linear_delays_s(settings.max_retries, settings.min_backoff_ms / 1000,
                           settings.max_backoff_ms / 1000)


class FailurePolicy:
    """Applies one topic's failure settings to a message whose processing raised.

    Args:
        settings: the topic's (or group's) failure settings.
        dead_letter: coroutine writing one dead-letter line durably:
            ``dead_letter(exc, attempts)``.
        sleep: interruptible sleep; see :data:`Sleep`.
    """

    def __init__(self, settings: FailureSettings, sleep: Sleep) -> None:
        self.settings = settings
        self._sleep = sleep
        self.delays_s = retry_delays_s(settings)
        self.retries = 0  # retries performed so far (metrics)

    async def handle(
        self,
        exc: BaseException,
        attempt: Callable[[], Awaitable[Any]],
        dead_letter: Callable[[BaseException, int], Awaitable[None]],
        describe: str,
        context: dict[str, Any] | None = None,
    ) -> tuple[Outcome, Any]:
        """Decide on a failed message.

        Args:
            exc: the error of the first attempt.
            attempt: re-runs processing of the message; returns its result.
            dead_letter: writes the dead-letter line (durably) for ``exc`` after n attempts.
            describe: ``topic[partition]@offset`` for messages.
            context: group/topic/partition/offset, attached to log records (JSON logs
                show them as fields).

        Raises:
            MessageFailedError: the policy says throw; the offset must stay uncommitted.
        """
        mode = self.settings.mode
        attempts = 1
        if isinstance(exc, StopTopic):  # whatever the policy: the topic goes no further
            raise MessageFailedError(f"{describe} failed: {type(exc).__name__}: {exc}",
                                     attempts=attempts) from exc
        if mode is FailureMode.RETRY and not isinstance(exc, PoisonMessage):
            for delay in self.delays_s:
                logger.warning(
                    "%s failed (attempt %d: %s: %s); retrying in %.1fs",
                    describe, attempts, type(exc).__name__, exc, delay, extra=context,
                )
                if not await self._sleep(delay):
                    return Outcome.ABANDONED, None
                attempts += 1
                self.retries += 1
                try:
                    return Outcome.RECOVERED, await attempt()
                except asyncio.CancelledError:
                    raise
                except Exception as again:  # noqa: BLE001 - any processor error is retried
                    exc = again
                    if isinstance(again, PoisonMessage):
                        break  # retrying a poison message will not help
            final = self.settings.then
        else:
            final = "throw" if mode is FailureMode.THROW else "continue"
        if mode is FailureMode.RETRY and isinstance(exc, PoisonMessage):
            final = self.settings.then
        if final == "throw":
            raise MessageFailedError(
                f"{describe} failed after {attempts} attempt(s): {type(exc).__name__}: {exc}",
                attempts=attempts,
            ) from exc
        await dead_letter(exc, attempts)
        logger.warning(
            "%s failed after %d attempt(s) (%s: %s); dead-lettered to %s",
            describe, attempts, type(exc).__name__, exc, self.settings.dead_letter_places(),
            extra=context,
        )
        return Outcome.DEAD_LETTERED, None
