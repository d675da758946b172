"""A group's ``commit:`` and ``failure:`` sections: when offsets are committed, and what
becomes of a message that cannot be processed."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from settings.base import Model

_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")

class CommitMode(StrEnum):
    NONE = "none"
    AUTO = "auto"
    PER_MESSAGE = "per_message"
    BATCH = "batch"
    SAVEPOINT = "savepoint"


class CommitSettings(Model):
    mode: CommitMode = Field(CommitMode.BATCH, description="When offsets are committed.")
    max_messages: int = Field(1000, ge=1, description="batch: commit after this many acked.")
    max_interval_s: float = Field(
        10, gt=0, description="batch: commit at least this often; auto: auto-commit interval."
    )
    max_in_flight: int = Field(
        100_000, ge=1, description="Messages fetched but not yet acked by the sink "
        "(backpressure); with max_in_flight_mb, whichever comes first.")
    max_in_flight_mb: float = Field(
        64, gt=0, description="MiB of messages fetched but not yet acked by the sink "
        "(their keys and values on the wire, estimated from the mean size of the fetched "
        "messages); with max_in_flight, whichever comes first.")
    wait_for_ack: bool = Field(
        False, description="Wait for each commit to be acknowledged before processing more."
    )


class FailureMode(StrEnum):
    CONTINUE = "continue"
    THROW = "throw"
    RETRY = "retry"


class FailureSettings(Model):
    mode: FailureMode = Field(FailureMode.CONTINUE, description="continue | throw | retry")
    max_retries: int = Field(3, ge=1, description="retry: attempts after the first failure.")
    min_backoff_ms: int = Field(60000, ge=0, description="retry: wait before the first retry.")
    max_backoff_ms: int = Field(100000, ge=0, description="retry: wait before the last retry.")
    then: Literal["continue", "throw"] = Field(
        "continue", description="retry: what to do once retries are exhausted."
    )
    dead_letter_path: str | None = Field(
        "failed_events.log", description="JSON-lines file of failed messages; null: "
        "none (dead_letter_topic only)."
    )
    dead_letter_topic: str | None = Field(
        None, description="Kafka topic that also receives failed messages (key, value and "
        "headers unchanged, plus kstage.error.* headers), acknowledged by all in-sync "
        "replicas (acks=all) before the offset is committed; written after the file.")

    @field_validator("dead_letter_topic")
    @classmethod
    def _topic_name(cls, name: str | None) -> str | None:
        if name is not None and (name in (".", "..") or not _TOPIC_NAME.fullmatch(name)):
            raise ValueError(f"{name!r} is not a valid Kafka topic name (1-249 characters "
                             "of a-z, A-Z, 0-9, '.', '_', '-'; not '.' or '..')")
        return name

    @model_validator(mode="after")
    def _backoff_order(self) -> FailureSettings:
        if self.max_backoff_ms < self.min_backoff_ms:
            raise ValueError("max_backoff_ms must be >= min_backoff_ms")
        if self.dead_letter_path is None and self.dead_letter_topic is None:
            raise ValueError("dead_letter_path is null and no dead_letter_topic is set: "
                             "failed messages need a place")
        return self

    def dead_letter_places(self) -> str:
        """Where dead letters go, for log lines: the file, the topic, or both."""
        places = [str(self.dead_letter_path)] if self.dead_letter_path is not None else []
        if self.dead_letter_topic is not None:
            places.append(f"topic {self.dead_letter_topic}")
        return " and ".join(places)

