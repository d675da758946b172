"""A group's ``topics:`` (with their ``filter:`` and named sinks) and the group itself."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NoReturn

from pydantic import (
    AfterValidator,
    Field,
    PlainValidator,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from settings.base import Model, check_name
from settings.columns import RecordColumn, distinct_columns
from settings.commits import CommitSettings, FailureSettings
from settings.identifiers import (
    TABLE_PLACEHOLDER,
)
from settings.routes import RouteSettings
from settings.sink_types import SinkSettings


def _filter_value(value: Any) -> str | bool | int | float | None:
    if value is None or isinstance(value, str | bool | int | float):
        return value
    raise PydanticCustomError(  # no input echoed: a value may be anything
        "filter_value", "filter values are strings, numbers, booleans or null, not a "
        "{kind}; match a field inside a mapping with a dotted path (a.b: [VALUE])",
        {"kind": type(value).__name__})


_FilterValues = Annotated[
    list[Annotated[str | bool | int | float | None, PlainValidator(_filter_value)]],
    Field(min_length=1)]


def _filter_path(value: str) -> str:
    if not value or any(not segment for segment in value.split(".")):
        raise ValueError(f"{value!r} is not a dotted path (an empty segment); write e.g. "
                         "entityType or aspect.value.removed")
    return value


_FilterPath = Annotated[str, AfterValidator(_filter_path)]


class FilterSettings(Model):
    """A topic's ``filter:``, before the processor (DataHub Actions' ``filter.event``
    semantics; see :mod:`actors.worker.filters`): a message passes when every
    ``include`` path holds one of its values and no ``exclude`` path does. Filtered
    messages are committed as done and counted in ``filtered``, never dead-lettered."""

    include: dict[_FilterPath, _FilterValues] = Field(
        default_factory=dict, description="PATH (dotted, into the decoded value) -> list of "
        "values; every PATH must hold one of its values (a missing PATH reads as null).")
    exclude: dict[_FilterPath, _FilterValues] = Field(
        default_factory=dict, description="PATH -> list of values; a message whose PATH "
        "holds one of them is filtered.")


class TopicSettings(Model):
    topic: str = Field("", description="Kafka topic name (or topic_pattern).")
    topic_pattern: str | None = Field(
        None, description="Instead of topic: a regular expression (full match) of topic "
        "names; every matching topic gets its own worker, and {topic} in its sink's table "
        "(or file) its own name made safe. Topics created while kstage runs are picked up "
        "within kafka.metadata_refresh_s; an explicit topic entry of the group wins.")
    processor: str = Field(description="Processor name (entry point in kstage.processors).")
    format: Literal["json", "bytes", "avro", "protobuf", "json_schema"] = Field(
        "json", description="Value encoding; avro, protobuf and json_schema are read in the "
        "schema registry's wire format with the writer's schema by id.")
    key_format: Literal["bytes", "string", "json", "avro"] = Field(
        "bytes", description="Key encoding (the processor sees the decoded key); string "
        "when columns.key is set and key_format is not."
    )
    reader_schema: str | None = Field(
        None, description="avro: reader schema .avsc file; writer data is resolved to it."
    )
    subject: str | None = Field(
        None, description="avro: registry subject of the value schema (default TOPIC-value)."
    )
    validate_schema: bool = Field(
        True, description="json_schema: validate each value against its writer JSON Schema "
        "(a value it refuses is poison); false only parses the JSON.")
    validate_budget_s: float = Field(
        2.0, gt=0, le=3600, description="json_schema: the most one value's validation may "
        "take, in seconds; it runs in a child process, killed past it: the value is then "
        "poison naming the budget, the schema id and its coordinates.")
    max_message_bytes: int = Field(
        16 * 1024 * 1024, ge=1, description="A value or key longer than this (bytes) is "
        "poison before any decoding (default 16 MiB: 16x Kafka's default message.max.bytes).")
    # SerializeAsAny: a dump holds the sink type's own keys, not only ``type``.
    sink: SerializeAsAny[SinkSettings] | None = Field(
        default_factory=lambda: SinkSettings.model_validate({"type": "null"}),
        description="Destination: ``type`` and that sink type's own keys (default: a null "
        "sink). None when the topic names its destinations in ``sinks``.")
    sinks: list[SerializeAsAny[SinkSettings]] | None = Field(
        None, min_length=1, description="Fan-out, instead of ``sink``: every row goes to "
        "every sink; an offset is committed once every sink accepted (or dead-lettered) "
        "its rows. Sinks have unique names (``name``) and distinct destinations.")
    failure: FailureSettings | None = Field(None, description="Overrides the group's failure.")
    filter: FilterSettings | None = Field(
        None, description="Messages the processor sees (include/exclude PATH: [VALUE, ...]); "
        "none: every message.")
    options: dict[str, Any] = Field(default_factory=dict, description="Processor options.")
    columns: list[RecordColumn] | None = Field(
        None, description="The record's key, headers and timestamp type as extra columns of "
        "every row: a list of {name, from: key|header|timestamp_type} (see "
        "settings.columns).")
    route: RouteSettings | None = Field(
        None, description="Each message's rows to the table a field of its value, a header "
        "or its key chooses: {by, tables, default} or {by, template, max_tables}; {table} "
        "in the sinks' table (or file) is that table (see settings.routes).")

    _processor = field_validator("processor")(check_name)
    _columns = field_validator("columns")(distinct_columns)

    @field_validator("topic")
    @classmethod
    def _topic_name(cls, value: str) -> str:
        return value if value == "" else check_name(value)

    @field_validator("topic_pattern")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"{value!r} is not a regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_topic_form(self) -> TopicSettings:
        self._check_route()
        if self.topic_pattern is not None:
            if self.topic:
                _topic_error("topic_pattern", "topic and topic_pattern are exclusive: name "
                             "one topic, or a pattern of topics in an entry of its own")
            return self
        if not self.topic:
            _topic_error("topic", "Field required: topic (or topic_pattern)")
        # {topic} in a fixed topic's sinks: its own name, as a pattern's topics get theirs.
        if self.sinks is not None:
            object.__setattr__(self, "sinks", [s.for_topic(self.topic) for s in self.sinks])
        elif self.sink is not None:
            object.__setattr__(self, "sink", self.sink.for_topic(self.topic))
        return self

    def _check_route(self) -> None:
        """A routed topic's sinks each name their destination by ``{table}``; a topic
        without ``route`` has no ``{table}``."""
        named = self.named_sinks()
        for one in named:
            keys = one.settings.routed_keys()
            where = ".".join(str(k) for k in one.path)
            if self.route is None and keys:
                _topic_error(str(one.path[0]), f"{where}.{keys[0]} holds {TABLE_PLACEHOLDER}, "
                             "which stands for a route's table: add route: to the topic, "
                             "or name the table")
            if self.route is not None and not keys and one.settings.topic_templates:
                _topic_error("route", f"the topic is routed but {where} names no "
                             f"{TABLE_PLACEHOLDER} in its "
                             f"{' or '.join(one.settings.topic_templates)}: every route "
                             "would write one place (write e.g. table: '{table}')")
            if self.route is not None and not one.settings.topic_templates:
                _topic_error("route", f"a {one.settings.type} sink ({where}) writes no "
                             "table or file a route could choose")

    @functools.cached_property
    def pattern(self) -> re.Pattern[str] | None:
        """The compiled ``topic_pattern`` (None for a fixed topic)."""
        return None if self.topic_pattern is None else re.compile(self.topic_pattern)

    def for_topic(self, topic: str) -> TopicSettings:
        """This pattern entry for one matching ``topic``: a fixed topic entry whose sinks
        name their table (or file) after it. ValueError when a name is refused."""
        data = self.model_dump(by_alias=True, exclude_unset=True, round_trip=True)
        data.pop("topic_pattern", None)
        data["topic"] = topic
        return TopicSettings.model_validate(data)

    @model_validator(mode="after")
    def _key_as_text(self) -> TopicSettings:
        if (self.columns is not None and any(c.source == "key" for c in self.columns)
                and "key_format" not in self.model_fields_set):
            object.__setattr__(self, "key_format", "string")  # frozen: set once, here
        return self

    @field_validator("sinks")
    @classmethod
    def _distinct_sinks(cls, sinks: list[SinkSettings] | None) -> list[SinkSettings] | None:
        if sinks is None:
            return None
        problems: list[InitErrorDetails] = []
        names: dict[str, int] = {}
        places: dict[str, int] = {}
        for k, (name, settings) in enumerate(zip(sink_names(sinks), sinks, strict=True)):
            if name in names:
                problems.append(InitErrorDetails(type=PydanticCustomError(
                    "sink_name", "sinks[{first}] is named '{name}' too; give each sink a "
                    "unique name", {"first": names[name], "name": name}),
                    loc=(k, "name"), input=name))
            names.setdefault(name, k)
            place = settings.destination()
            if place in places:
                problems.append(InitErrorDetails(type=PydanticCustomError(
                    "sink_destination", "sinks[{first}] writes the same destination "
                    "({place}): every row would be written twice", {
                        "first": places[place], "place": place[:200]}),
                    loc=(k,), input=None))
            places.setdefault(place, k)
        if problems:
            raise ValidationError.from_exception_data("TopicSettings", problems,
                                                      hide_input=True)
        return sinks

    @model_validator(mode="after")
    def _one_sink_form(self) -> TopicSettings:
        if self.sinks is not None:
            if self.sink is not None and "sink" in self.model_fields_set:
                _topic_error("sinks", "sink and sinks are exclusive: write one sink as "
                             "sink: {...}, several as sinks: [{...}, ...]")
            object.__setattr__(self, "sink", None)  # frozen: set once, here
        elif self.sink is None:
            _topic_error("sink", "sink: null is no sink; omit sink for a null sink")
        return self

    def named_sinks(self) -> list[NamedSink]:
        """The topic's sinks, one for ``sink:``: each with its name and settings path."""
        if self.sinks is None:
            sink = self.sink or SinkSettings.model_validate({"type": "null"})
            return [NamedSink(sink_names([sink])[0], sink, ("sink",))]
        return [NamedSink(name, sink, ("sinks", k)) for k, (name, sink) in
                enumerate(zip(sink_names(self.sinks), self.sinks, strict=True))]


def _topic_error(key: str, message: str) -> NoReturn:
    raise ValidationError.from_exception_data("TopicSettings", [InitErrorDetails(
        type=PydanticCustomError("sink_form", message), loc=(key,), input=None)],
        hide_input=True)


@dataclass(frozen=True, slots=True)
class NamedSink:
    """One sink of a topic: its name (dead letters, metrics, ``/readyz``), its settings
    and where they are, relative to the topic (``("sink",)`` or ``("sinks", K)``)."""

    name: str
    settings: SinkSettings
    path: tuple[str | int, ...]


def sink_names(sinks: list[SinkSettings]) -> list[str]:
    """Each sink's name: its ``name``, else its type, else ``TYPE#K`` when the type
    repeats in ``sinks`` (K: its index)."""
    types = [s.type for s in sinks]
    return [s.name or (s.type if types.count(s.type) == 1 else f"{s.type}#{k}")
            for k, s in enumerate(sinks)]


class GroupSettings(Model):
    group_id: str | None = Field(None, description="Consumer group id; defaults to `name`.")
    auto_offset_reset: Literal["earliest", "latest", "none"] = Field(
        "earliest", description="Where to start without a committed offset (none = refuse)."
    )
    start_from: Literal["committed", "latest", "earliest"] = Field(
        "committed", description="Where this process starts reading: committed (the "
        "group's committed offsets), latest (seek the partitions assigned at the process's "
        "start to their end, skipping the backlog; the skipped count is logged per "
        "partition) or earliest (seek them to the beginning, reading everything again). "
        "The sought position is committed at once. Applies once per process run: a "
        "worker restarted by the supervisor, and partitions assigned later by a "
        "rebalance, continue from the committed offsets.")
    max_poll_records: int = Field(
        2000, ge=1, description="Records per fetch: at most this many reach the worker as "
        "one batch (a backlog's batches are this large; a live topic's hold what arrived "
        "since the last fetch). Each batch has a fixed cost (its walk, its ship, a "
        "registry-Avro batch's decode as columns), so larger batches cost less CPU per "
        "event; the memory of what is fetched is bounded by the fetch sizes and "
        "commit.max_in_flight(_mb), not by this.")
    max_poll_interval_ms: int = Field(300000, ge=1000, description="Kafka max.poll.interval.ms.")
    session_timeout_ms: int = Field(10000, ge=1000, description="Kafka session.timeout.ms.")
    heartbeat_interval_ms: int = Field(3000, ge=100, description="Kafka heartbeat.interval.ms.")
    fetch_max_wait_ms: int = Field(500, ge=0, description="Kafka fetch.max.wait.ms.")
    rebalance_timeout_ms: int = Field(
        60000, ge=2000, description="Kafka rebalance.timeout.ms: how long the coordinator "
        "waits for a member to rejoin during a rebalance. A revoke drains in-flight work "
        "for at most half of it (and supervisor.shutdown_grace_s), then cancels the rest.")
    commit: CommitSettings = Field(default_factory=CommitSettings, description="Commit policy.")
    failure: FailureSettings = Field(
        default_factory=FailureSettings, description="Failure policy."
    )
    topics: list[TopicSettings] = Field(min_length=1, description="Topics of this group.")

    @field_validator("group_id")
    @classmethod
    def _group_name(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value)

    @model_validator(mode="after")
    def _heartbeat(self) -> GroupSettings:
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be lower than session_timeout_ms")
        return self

