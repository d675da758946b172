"""Errors of the processor layer.

Tree::

    ProcessorError           root
    ├── PoisonMessage        the message itself is bad (undecodable, wrong shape): not retriable
    ├── StopTopic            the topic cannot go on: its worker stops, nothing past is committed
    ├── RegistryError        loading processors failed: unknown, duplicate, topic claimed twice
    └── Retry                control flow: ask for this message to be retried (retriable)

Any other exception raised by ``transform`` counts as a processing failure of that
message and goes through the group's failure policy.
"""

from __future__ import annotations

from typing import Any


class ProcessorError(Exception):
    """Root of the processor errors."""

    retriable = False


class PoisonMessage(ProcessorError):
    """The message cannot be decoded or has the wrong shape; retrying will not help.

    ``details`` holds extra fields for the dead-letter line (e.g. schema id, first bytes).
    """

    details: dict[str, Any] = {}  # replaced per instance, never mutated


class StopTopic(ProcessorError):
    """The topic must not go past this message (e.g. an incompatible schema change under
    ``on_incompatible: stop``): whatever the group's failure policy, the worker fails
    with it (as ``failure.mode: throw`` does) and nothing from it on is committed."""


class RegistryError(ProcessorError):
    """A processor name is unknown or duplicated, or a topic is claimed twice."""


class Retry(ProcessorError):
    """Raised by a processor to ask for the message to be retried by the failure policy."""

    retriable = True
