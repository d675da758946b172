"""Errors of the actor layer.

Tree::

    ActorError                 root
    ├── FatalError             stop the process, do not restart (retriable = False)
    │   ├── MessageFailedError failure mode ``throw``: a message failed; offset not committed
    │   ├── NoCommittedOffsetError  ``auto_offset_reset: none`` and no committed offset
    │   └── EscalationError    a supervisor exceeded its restart intensity
    ├── SinkError              a sink could not accept rows (retriable: back off, retry)
    │   └── SinkAuthError      ... because its credentials were refused (not ready at once)
    └── PermanentSinkError     a sink refused rows for good (HTTP 4xx): dead-lettered
"""

from __future__ import annotations


class ActorError(Exception):
    """Root of the actor-layer errors."""

    retriable = True


class FatalError(ActorError):
    """An error that must stop the service instead of restarting the worker."""

    retriable = False


class MessageFailedError(FatalError):
    """A message failed and the failure policy says throw."""

    def __init__(self, message: str, attempts: int = 1) -> None:
        super().__init__(message)
        self.attempts = attempts


class NoCommittedOffsetError(FatalError):
    """``auto_offset_reset: none`` and a partition has no committed offset."""


class EscalationError(FatalError):
    """Too many crashes within the restart window."""


class SinkError(ActorError):
    """A sink failed to accept a batch; the worker backs off and retries.

    ``auth`` is True when the failure is about the sink's credentials (HTTP 401, 403,
    407): no wait will fix it without an operator, so ``/readyz`` says so at once.
    """

    auth = False


class SinkAuthError(SinkError):
    """A sink's credentials were refused (expired token, missing permission): retried,
    never dead-lettered, and the worker is reported not ready at once."""

    auth = True


class PermanentSinkError(ActorError):
    """A sink refused rows for good (e.g. an HTTP 4xx other than 429); not retriable."""

    retriable = False
