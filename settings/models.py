"""The typed configuration model of kstage (pydantic).

One :class:`Settings` root; nested groups are plain ``BaseModel``s. Every field has a
default and a description; durations carry their unit in the name (``*_s``, or ``*_ms``
where the value goes to aiokafka unchanged). Unknown keys are errors, so typos surface.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum
from importlib.metadata import EntryPoint
from typing import Annotated, Any, ClassVar, Literal, NoReturn

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PlainValidator,
    SecretStr,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict

from settings.columns import RecordColumn, distinct_columns
from settings.identifiers import (
    TABLE_PLACEHOLDER,
    TOPIC_PLACEHOLDER,
    SqlIdentifier,
    table_part,
)
from settings.kafka_security import check_security
from settings.plugins import DuplicatePlugin, pick, registered
from settings.routes import RouteSettings
from settings.secrets import MaskedRepr, secret_name
from settings.suggest import did_you_mean

_NO_WHITESPACE = re.compile(r"^\S+$")
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


# One bootstrap address: host:port, the host a name or IPv4 address or a bracketed IPv6.
_HOST_PORT = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?)"
                        r":(?P<port>[0-9]{1,5})$")


def _bootstrap(value: str) -> str:
    if value.strip().lower() == "embedded":
        return value
    addresses = [a.strip() for a in value.split(",")]
    for address in addresses:
        match = _HOST_PORT.match(address)
        if match is None or not 1 <= int(match["port"]) <= 65535:
            raise ValueError(f"{address!r} is not host:port (port 1-65535); write a "
                             "comma-separated host:port list, or embedded")
    return ",".join(addresses)


def _name(value: str) -> str:
    if not _NO_WHITESPACE.match(value):
        raise ValueError(f"must be non-empty and contain no whitespace, got {value!r}")
    return value


class _Model(MaskedRepr):
    # hide_input_in_errors: a ValidationError (raised here or by a sink's own model at
    # run time, logged with its traceback) must not echo a password next to a typo.
    # MaskedRepr: free-form mappings (consumer_config, spark.conf, a sink's options) may
    # hold secrets by name; a repr shows them masked.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class KafkaSettings(_Model):
    bootstrap: str = Field(
        "embedded",
        description='Comma-separated host:port list, or "embedded" to start the bundled broker.',
    )
    consumer_config: dict[str, Any] = Field(
        default_factory=dict,
        description="Free-form Kafka client keys (security.protocol, sasl.*, ssl.*, ...).",
    )
    client_id: str = Field("kstage", description="Kafka client.id prefix.")
    metadata_refresh_s: float = Field(
        30.0, gt=0, le=3600, description="How often the topics are listed for the "
        "topic_pattern entries: a topic created (or deleted) is picked up (or its worker "
        "stopped) within this many seconds.")
    max_batch_inflated_bytes: int = Field(
        64 * 1024 * 1024, ge=1, description="A compressed record batch that inflates past "
        "this (bytes) is not inflated further: each of its offsets is poison (default 64 "
        "MiB; at least every topic's max_message_bytes). Bounds the memory a decompression "
        "bomb takes.")

    _check_bootstrap = field_validator("bootstrap")(_bootstrap)

    @field_validator("consumer_config")
    @classmethod
    def _check_security(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_security(value)  # case normalised; a key that cannot work is refused

    @field_validator("consumer_config")
    @classmethod
    def _hide_secrets(cls, value: dict[str, Any]) -> dict[str, Any]:
        return {
            k: SecretStr(str(v)) if secret_name(k) and not isinstance(v, SecretStr) else v
            for k, v in value.items()
        }

    @property
    def embedded(self) -> bool:
        return self.bootstrap.strip().lower() == "embedded"


class SupervisorSettings(_Model):
    shutdown_grace_s: float = Field(30, ge=0, description="Drain-and-commit phase of a stop.")
    abort_grace_s: float = Field(10, ge=0, description="Cancel phase of a stop, after the drain.")
    max_restarts: int = Field(5, ge=0, description="Crashes tolerated within restart_window_s.")
    restart_window_s: float = Field(60, gt=0, description="Window of the restart intensity.")
    min_backoff_s: float = Field(0.5, ge=0, description="First restart delay (full jitter).")
    max_backoff_s: float = Field(30, ge=0, description="Cap of the restart delay.")
    sink_unready_after_s: float = Field(
        10, ge=0, description="/readyz turns 503 once a worker's sink writes have failed "
        "for this long without a success (at once for refused credentials).")

    @model_validator(mode="after")
    def _backoff_order(self) -> SupervisorSettings:
        if self.max_backoff_s < self.min_backoff_s:
            raise ValueError("max_backoff_s must be >= min_backoff_s")
        return self


class CommitMode(StrEnum):
    NONE = "none"
    AUTO = "auto"
    PER_MESSAGE = "per_message"
    BATCH = "batch"
    SAVEPOINT = "savepoint"


class CommitSettings(_Model):
    mode: CommitMode = Field(CommitMode.BATCH, description="When offsets are committed.")
    max_messages: int = Field(1000, ge=1, description="batch: commit after this many acked.")
    max_interval_s: float = Field(
        10, gt=0, description="batch: commit at least this often; auto: auto-commit interval."
    )
    max_in_flight: int = Field(
        10000, ge=1, description="Messages fetched but not yet acked by the sink (backpressure)."
    )
    wait_for_ack: bool = Field(
        False, description="Wait for each commit to be acknowledged before processing more."
    )


class FailureMode(StrEnum):
    CONTINUE = "continue"
    THROW = "throw"
    RETRY = "retry"


class FailureSettings(_Model):
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


SINK_TYPES = "kstage.sinks"
"""Entry-point group of the sink types: name -> ``module:Sink`` class, whose
``settings_model`` validates ``sink:`` mappings of that ``type``."""


class SinkSettings(_Model):
    """A topic's ``sink:`` mapping, and the base of every sink type's settings model.

    ``SinkSettings.model_validate(mapping)`` is a union discriminated on ``type`` (default
    ``null``): it looks the type up in the entry-point group ``kstage.sinks`` (built-in and
    plugin sinks alike) and returns an instance of that sink's own ``settings_model``, a
    subclass of this one that narrows ``type`` to a ``Literal`` and declares the sink's
    keys (unknown keys are refused, values are frozen, inputs stay out of validation
    errors and the repr masks values named like secrets). An unknown type, a sink whose
    module cannot be imported, a typo'd key, a wrong value or a missing key are errors at
    ``sink.<key>``, with the file and line when the settings come from a file.
    """

    type: str = Field("null", description="Sink type: a name in the entry-point group "
                      "kstage.sinks (built-in: null, jsonl, http, spark, jdbc).")
    name: str | None = Field(
        None, pattern=r"^[A-Za-z0-9._-]{1,64}$", description="The sink's name in dead "
        "letters, metrics and /readyz (letters, digits, '.', '_', '-'); default: its type, "
        "or TYPE#K (K: its index in sinks) when a topic's sinks repeat the type.")

    def destination(self) -> str:
        """What the sink writes, for refusing two sinks of one topic that would write the
        same place: by default the sink's type and settings (its name aside); a sink
        whose destination is one key of several (a file's path, a table) narrows it."""
        return f"{self.type} sink {self.model_dump_json(exclude={'name'})}"

    topic_templates: ClassVar[tuple[str, ...]] = ()
    """The keys in which ``{topic}`` stands for the topic's name made safe
    (:func:`~settings.identifiers.table_part`): a table, a file's path."""

    def for_topic(self, topic: str) -> SinkSettings:
        """These settings for ``topic``: ``{topic}`` replaced in :attr:`topic_templates`,
        the result validated again (a name that is no SQL identifier is refused)."""
        data = self.model_dump(by_alias=True, exclude_unset=True)
        changed = False
        for key in self.topic_templates:
            value = getattr(self, key)
            if isinstance(value, str) and TOPIC_PLACEHOLDER in value:
                data[key] = value.replace(TOPIC_PLACEHOLDER, table_part(topic))
                changed = True
        return type(self).model_validate(data) if changed else self

    def routed_keys(self) -> list[str]:
        """The keys of :attr:`topic_templates` that hold ``{table}`` (a routed topic's
        table, see :mod:`settings.routes`)."""
        return [key for key in self.topic_templates
                if TABLE_PLACEHOLDER in str(getattr(self, key) or "")]

    def for_table(self, table: str) -> SinkSettings:
        """These settings for a routed topic's ``table``: ``{table}`` replaced by it in
        :attr:`topic_templates`, validated again."""
        keys = self.routed_keys()
        if not keys:
            return self
        data = self.model_dump(by_alias=True, exclude_unset=True)
        for key in keys:
            data[key] = str(getattr(self, key)).replace(TABLE_PLACEHOLDER, table)
        return type(self).model_validate(data)

    @model_validator(mode="wrap")
    @classmethod
    def _by_type(cls, data: Any, handler: ModelWrapValidatorHandler[SinkSettings],
                 ) -> SinkSettings:
        # Only the base class dispatches; a sink's own model validates as any model.
        if cls is not SinkSettings or not isinstance(data, dict):
            return handler(data)
        name = data.get("type", "null")
        model = sink_settings_model(name) if isinstance(name, str) else None
        if model is None:
            installed = ", ".join(sorted(sink_entry_points()))
            _sink_type_error(name, f"unknown sink type {name!r} (installed: {installed})"
                             + did_you_mean(name, sink_entry_points()))
        return model.model_validate(data)


@functools.cache
def sink_entry_points() -> dict[str, list[EntryPoint]]:
    """The installed sink types: name -> its entry points, not loaded (several targets:
    a duplicate, refused by :func:`sink_entry_point`)."""
    return registered(SINK_TYPES)


def sink_entry_point(name: str) -> EntryPoint | None:
    """The entry point of sink type ``name`` (None: not installed).

    Raises:
        DuplicatePlugin: two installed distributions register ``name`` differently.
    """
    return pick(sink_entry_points().get(name), name, "sink type")


def sink_settings_model(name: str) -> type[SinkSettings] | None:
    """The settings model of sink type ``name`` (None if no sink of that name is
    installed). Imports the sink's module, at validation time only: importing
    ``settings`` imports no sink. Raises a ValidationError at ``type`` when the module
    cannot be imported or its class declares no settings model."""
    try:
        ep = sink_entry_point(name)
    except DuplicatePlugin as exc:
        _sink_type_error(name, str(exc))
    if ep is None:
        return None
    try:
        cls = ep.load()
    except ImportError as exc:
        _sink_type_error(name, f"sink type {name!r} ({ep.value}) cannot be imported: {exc}")
    model = getattr(cls, "settings_model", None)
    if not (isinstance(model, type) and issubclass(model, SinkSettings)):
        _sink_type_error(name, f"sink type {name!r} ({ep.value}) declares no settings_model "
                         "(a subclass of SinkSettings)")
    return model


def _sink_type_error(name: object, message: str) -> NoReturn:
    raise ValidationError.from_exception_data("SinkSettings", [InitErrorDetails(
        type=PydanticCustomError("sink_type", message), loc=("type",), input=name)],
        hide_input=True)


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


class FilterSettings(_Model):
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


class TopicSettings(_Model):
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

    _processor = field_validator("processor")(_name)
    _columns = field_validator("columns")(distinct_columns)

    @field_validator("topic")
    @classmethod
    def _topic_name(cls, value: str) -> str:
        return value if value == "" else _name(value)

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


class GroupSettings(_Model):
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
    max_poll_records: int = Field(500, ge=1, description="Records per fetch.")
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
        return None if value is None else _name(value)

    @model_validator(mode="after")
    def _heartbeat(self) -> GroupSettings:
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be lower than session_timeout_ms")
        return self


class S3Settings(_Model):
    """``spark.catalog.s3``: the S3-compatible object store of an ``s3://`` warehouse
    (Iceberg's S3FileIO)."""

    endpoint: str | None = Field(
        None, description="S3 endpoint URL (none: AWS's own for the region).")
    region: str = Field("us-east-1", description="S3 region.")
    path_style_access: bool = Field(
        False, description="Path-style addressing (bucket in the path), as most "
        "S3-compatible servers need.")
    access_key_id: SecretStr | None = Field(
        None, description="Access key id (none: the AWS default credential chain).")
    secret_access_key: SecretStr | None = Field(
        None, description="Secret access key (never printed).")

    @field_validator("endpoint")
    @classmethod
    def _endpoint_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _key_pair(self) -> S3Settings:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("set access_key_id and secret_access_key together (or neither: "
                             "the AWS default credential chain)")
        return self


WAREHOUSE_SCHEMES = ("s3://", "s3a://")
"""URI schemes of a remote warehouse (Iceberg's S3FileIO); anything else is a local path."""


def _warehouse(value: str) -> str:
    if value.startswith("file://"):
        return value[len("file://"):] or "/"
    if value.startswith(WAREHOUSE_SCHEMES):
        if not re.match(r"^s3a?://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$", value):
            raise ValueError(f"{value!r} is not s3://bucket[/prefix] (a bucket name: 3-63 "
                             "lowercase letters, digits, '.' and '-')")
        return value.rstrip("/")
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", value):
        raise ValueError(
            f"{value!r}: a warehouse is a local (or shared) path, file://, or s3://bucket"
            "/prefix (an S3-compatible object store, with spark.catalog.s3)")
    return value


# The catalog property bounding Iceberg's retries of a table metadata read
# (io.kstage.iceberg.BoundedMetadataReads; docs/spark.md), and Iceberg's own count.
METADATA_READ_RETRIES = "kstage.metadata-read-retries"
ICEBERG_METADATA_READ_RETRIES = 20


class CatalogSettings(_Model):
    """``spark.catalog``: the Apache Iceberg catalog of the staging and final tables."""

    name: SqlIdentifier = Field("kstage", description="The Spark catalog name.")
    type: Literal["jdbc", "rest"] = Field(
        "jdbc", description="jdbc: an Iceberg JDBC catalog in SQLite (one host) or "
        "PostgreSQL (several hosts); rest: an Iceberg REST catalog server.")
    uri: str | None = Field(
        None, description="jdbc:sqlite:PATH, jdbc:postgresql://HOST/DB or the REST "
        "catalog's http(s) URL (default, jdbc: jdbc:sqlite:<warehouse>/catalog.db; never "
        "printed with its credentials).")
    warehouse: str | None = Field(
        None, description="Where the tables' files live: a local path or s3://bucket/prefix "
        "(default: spark.warehouse).")
    namespace: SqlIdentifier = Field(
        "kstage", description="The namespace of the tables (they keep their names).")
    user: str | None = Field(None, description="jdbc: the catalog database's user.")
    password: SecretStr | None = Field(
        None, description="jdbc: the catalog database's password (never printed).")
    s3: S3Settings | None = Field(
        None, description="The S3-compatible store of an s3:// warehouse.")
    properties: dict[str, str] = Field(
        default_factory=dict, description="More Iceberg catalog properties "
        "(spark.sql.catalog.<name>.<key>), e.g. a REST catalog's credential.")

    @field_validator("warehouse")
    @classmethod
    def _warehouse_uri(cls, value: str | None) -> str | None:
        return None if value is None else _warehouse(value)

    @field_validator("properties")
    @classmethod
    def _metadata_read_retries(cls, value: dict[str, str]) -> dict[str, str]:
        # io.kstage.iceberg.BoundedMetadataReads refuses it too, when the JVM starts.
        retries = value.get(METADATA_READ_RETRIES)
        if retries is not None and not (retries.strip().isdigit()
                                         and int(retries) <= ICEBERG_METADATA_READ_RETRIES):
            raise ValueError(f"{METADATA_READ_RETRIES} is a whole number from 0 to "
                             f"{ICEBERG_METADATA_READ_RETRIES} (Iceberg's own), not {retries!r}")
        return value

    @model_validator(mode="after")
    def _uri_kind(self) -> CatalogSettings:
        uri = self.uri
        if self.type == "jdbc" and uri is not None and not uri.startswith(
                ("jdbc:sqlite:", "jdbc:postgresql:")):
            raise ValueError("a jdbc catalog's uri is jdbc:sqlite:PATH or "
                             "jdbc:postgresql://HOST[:PORT]/DB")
        if uri is not None and uri.startswith("jdbc:sqlite:") and (
                uri == "jdbc:sqlite:" or ":memory:" in uri or "mode=memory" in uri):
            raise ValueError("an in-memory SQLite catalog loses the tables (each pooled "
                             "connection gets its own empty database): name a file, "
                             "jdbc:sqlite:/path/catalog.db")
        if self.type == "rest" and (uri is None or not re.match(r"^https?://", uri)):
            raise ValueError("a rest catalog needs its uri: http(s)://HOST[:PORT][/PATH]")
        return self


class MaintenanceSettings(_Model):
    """``spark.maintenance``: what ``kstage tables maintain`` does to each Iceberg table
    of the spark sinks (staging and final), and how often ``kstage run`` does it."""

    every_s: float | None = Field(
        None, gt=0, description="Maintain every spark table this often inside `kstage run` "
        "(on its Spark thread; a failure is logged and retried at the next interval); "
        "none: only `kstage tables maintain`.")
    snapshot_max_age_s: float = Field(
        3600, gt=0, description="Snapshots older than this are expired, except those Kafka "
        "offset recovery or the merge still needs; younger ones are kept (a reader's query "
        "planned on one keeps its files).")
    snapshot_min_keep: int = Field(
        10, ge=1, description="The newest snapshots of a table kept whatever their age.")
    target_file_mb: int = Field(
        128, ge=1, description="Compaction writes data files of about this size (MiB).")
    min_input_files: int = Field(
        5, ge=2, description="Compaction rewrites a partition's small files once it has at "
        "least this many.")
    orphan_min_age_s: float = Field(
        86400, ge=86400, description="Files in a table's directory that no snapshot "
        "references are removed once older than this (at least one day: a write still in "
        "progress has files no snapshot references yet).")
    kafka_timeout_s: float = Field(
        30, gt=0, description="How long maintenance waits for Kafka's committed offsets "
        "before it expires nothing.")


class SparkSettings(_Model):
    """The process-wide ``spark:`` section (one SparkSession per process)."""

    master: str = Field("local[2]", description="Spark master URL.")
    warehouse: str = Field(
        "./warehouse", description="Where the Iceberg tables' files live (the default of "
        "catalog.warehouse): a local or shared path, file://, or s3://bucket/prefix.")
    catalog: CatalogSettings = Field(
        default_factory=lambda: CatalogSettings(),
        description="The Iceberg catalog of the staging and final tables.")
    jars: Literal["fetched"] | list[str] = Field(
        "fetched", description="The JVM jars of the session: fetched (those `kstage jars "
        "fetch` put in the jar directory), or the paths of jars a cluster already has "
        "([] when its Spark has them on its class path).")
    conf: dict[str, str] = Field(
        default_factory=lambda: {"spark.driver.memory": "512m"},
        description="Extra Spark configuration (overrides kstage's defaults).",
    )
    flush_max_rows: int = Field(10000, ge=1, description="Flush a table at this many rows.")
    flush_min_rows: int = Field(
        1000, ge=1, description="Flush a table at this many rows when none of its appends "
        "is running (a busy table keeps Spark writing; a quiet one waits for the interval).")
    appends: Literal["spark", "pyiceberg"] = Field(
        "spark", description="What writes the staging appends: spark (the Arrow rows go to "
        "the JVM, Spark writes the Parquet files and commits), or pyiceberg (Apache "
        "Iceberg's Python library writes the files and commits from the Python process, to "
        "the same table in the same jdbc catalog; Spark still creates the tables, reads the "
        "offsets at assignment, merges and maintains).")
    staging_write_options: dict[str, str] = Field(
        default_factory=dict,
        description="Iceberg Spark write options of the staging appends (e.g. "
        "compression-codec); kstage sets the snapshot properties itself.")
    flush_max_interval_s: float = Field(
        5, gt=0, description="Longest wait of a row before its table is flushed."
    )
    flush_idle_s: float = Field(
        1, gt=0, description="Longest wait of a row while none of its table's appends runs: "
        "a quiet table is flushed within about this long, below flush_min_rows (at most "
        "about one append per flush_idle_s); at or above flush_max_interval_s: off.")
    flush_rest_ratio: float | None = Field(
        None, ge=0, le=100, description="After the appends of a staging table took d "
        "seconds, an append that flush_min_rows would start waits until d times this has "
        "passed since they ended, or until the oldest waiting row waited flush_idle_s "
        "(flush_max_rows, flush_max_interval_s and a worker at its max_in_flight do not "
        "wait): fewer, larger appends. Unset: 1 with appends: "
        "pyiceberg (each pyiceberg commit costs more CPU, in the process, the more "
        "snapshots the table keeps), 0 with appends: spark (back to back).")
    max_session_restarts: int = Field(
        3, ge=0, description="New SparkSessions started after the Spark JVM died (or while "
        "its replacement fails to start) within session_restart_window_s; one more death "
        "stops the process with exit code 1 (its orchestrator restarts it).")
    session_restart_window_s: float = Field(
        600, gt=0, description="Window of max_session_restarts, in seconds.")
    maintenance: MaintenanceSettings = Field(
        default_factory=lambda: MaintenanceSettings(),
        description="Snapshot expiry, compaction and orphan removal of the tables.")

    @field_validator("warehouse")
    @classmethod
    def _warehouse_uri(cls, value: str) -> str:
        return _warehouse(value)

    @model_validator(mode="after")
    def _catalog_place(self) -> SparkSettings:
        catalog = self.catalog
        if (catalog.warehouse is not None and "warehouse" in self.model_fields_set
                and catalog.warehouse != self.warehouse):
            raise ValueError(f"spark.warehouse ({self.warehouse!r}) and "
                             f"spark.catalog.warehouse ({catalog.warehouse!r}) differ: set "
                             "one of them")
        warehouse = self.table_warehouse
        remote = warehouse.startswith(WAREHOUSE_SCHEMES)
        if catalog.type == "jdbc" and catalog.uri is None and remote:
            raise ValueError(f"the warehouse {warehouse!r} is in object storage: set "
                             "spark.catalog.uri (jdbc:postgresql://HOST/DB for several hosts, "
                             "or jdbc:sqlite:/local/path/catalog.db for one)")
        if self.appends == "pyiceberg" and catalog.type != "jdbc":
            raise ValueError(f"appends: pyiceberg commits through a jdbc catalog (SQLite or "
                             f"PostgreSQL) only, not a {catalog.type} catalog: set "
                             "appends: spark")
        if self.appends == "pyiceberg" and self.staging_write_options:
            raise ValueError("staging_write_options are Spark write options, which "
                             "appends: pyiceberg does not use: set the table's write "
                             "properties instead, or appends: spark")
        if remote and catalog.s3 is None:
            raise ValueError(f"the warehouse {warehouse!r} is in object storage: set "
                             "spark.catalog.s3 (endpoint, region, credentials)")
        return self

    @property
    def table_warehouse(self) -> str:
        """The warehouse of the tables: ``catalog.warehouse``, else ``warehouse``."""
        return self.catalog.warehouse or self.warehouse


class MergeSettings(_Model):
    """The ``merge:`` section: merging staging into final tables inside the service."""

    interval_s: float | None = Field(
        None, gt=0, description="Merge every spark staging table this often while running "
        "(and once more at the end of --drain); none: only `kstage merge` merges.")


class ServiceSettings(_Model):
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Level.")
    log_format: Literal["text", "json"] = Field("text", description="Log line format.")
    status_interval_s: float = Field(30, gt=0, description="Period of the status log line.")
    http_port: int = Field(
        9108, ge=0, le=65535, description="Port of /metrics, /healthz, /readyz (0 disables)."
    )
    http_host: str = Field(
        "127.0.0.1", description="Address the status server binds. Loopback by default: "
        "/metrics and /readyz are unauthenticated and name topics, groups and sink errors; "
        "0.0.0.0 (all interfaces) only where the network is private, e.g. a container.")
    http_port_tries: int = Field(
        16, ge=1, le=1000,
        description="Ports tried from http_port up when it is taken (processes sharing one "
                    "config on one host get http_port, +1, +2 ...); then any free port.",
    )
    control_token: SecretStr | None = Field(
        None, min_length=16,
        description="Bearer token of the control API on the status server (GET /status, "
                    "POST /groups/{group}/topics/{topic}/pause|resume|restart; never "
                    "printed); none: the control endpoints are off (404). At least 16 "
                    "characters, no whitespace; a trailing newline (a Secret made from a "
                    "file) is dropped.")
    stall_after_s: float = Field(
        600, gt=0,
        description="/healthz answers 503 when a worker's fetch loop has not run for this long, "
                    "or a partition with lag, neither paused nor retrying, has not committed "
                    "for this long (a consumer alive but stuck: let the orchestrator restart "
                    "it). Longer than a rebalance may take (max_poll_interval_ms).")

    @field_validator("control_token", mode="before")
    @classmethod
    def _bearer_token(cls, value: Any) -> Any:
        """A trailing newline (what a file, and a Secret made from one, ends with) is
        dropped; any other whitespace is refused: a client's Authorization header cannot
        carry it (HTTP strips a value's edges, the inside splits it), so the token could
        never match. Checked before the length: blanks are not characters of a token."""
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if not isinstance(text, str):
            return value
        text = text.rstrip("\r\n")
        if any(c.isspace() for c in text):
            raise ValueError("a bearer token cannot contain whitespace (spaces, tabs, "
                             "line breaks): an HTTP header cannot carry it as it is")
        return text


class ObservabilitySettings(_Model):
    """The ``observability:`` section: OpenTelemetry tracing (docs/operations.md#tracing)."""

    tracing: bool = Field(
        False, description="Export OpenTelemetry spans over OTLP (needs the otel extra: "
        "pip install 'kstage[otel]'). Also on, whatever this says, when the environment "
        "sets OTEL_TRACES_EXPORTER=otlp or OTEL_EXPORTER_OTLP_ENDPOINT or "
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (and not OTEL_SDK_DISABLED=true).")
    endpoint: str | None = Field(
        None, description="The OTLP endpoint: http://HOST:4318 for http/protobuf (/v1/traces "
        "is added), http://HOST:4317 for grpc; none: the OTEL_EXPORTER_OTLP_(TRACES_)"
        "ENDPOINT variable, else the exporter's default on localhost.")
    protocol: Literal["http/protobuf", "grpc"] = Field(
        "http/protobuf", description="OTLP transport: http/protobuf or grpc; the "
        "OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL variable wins when set.")
    service_name: str | None = Field(
        None, description="The service.name resource attribute; none: OTEL_SERVICE_NAME, "
        "else the configuration's name.")
    sample_ratio: float = Field(
        1.0, ge=0, le=1, description="Fraction of traces sampled (parent-based: a message "
        "whose producer sampled its trace is sampled).")

    @field_validator("endpoint")
    @classmethod
    def _check_endpoint(cls, value: str | None) -> str | None:
        if value is not None:
            scheme, sep, rest = value.partition("://")
            if not sep or scheme not in ("http", "https") or not rest.split("/", 1)[0]:
                raise ValueError("must be http(s)://host[:port][/path]")
        return value


class Settings(BaseSettings):
    """Root of the configuration: the YAML file, overridden by ``KSTAGE_*`` variables."""

    model_config = SettingsConfigDict(
        env_prefix="KSTAGE_", env_nested_delimiter="__", extra="forbid", frozen=True,
        hide_input_in_errors=True,
    )

    name: Annotated[str, Field(description="Service name; default group id.")] = "kstage"
    kafka: KafkaSettings = Field(default_factory=KafkaSettings, description="Kafka client.")
    supervisor: SupervisorSettings = Field(
        default_factory=SupervisorSettings, description="Restarts and stop grace periods."
    )
    service: ServiceSettings = Field(default_factory=ServiceSettings, description="Process.")
    groups: list[GroupSettings] = Field(default_factory=list, description="Consumer groups.")
    spark: SparkSettings = Field(
        default_factory=lambda: SparkSettings(), description="Spark (sinks of type spark)."
    )
    schema_registry: SchemaRegistrySettings | None = Field(
        None, description="Schema registry for Avro topics (none: no registry)."
    )
    merge: MergeSettings = Field(
        default_factory=lambda: MergeSettings(), description="Merge into final tables."
    )
    observability: ObservabilitySettings = Field(
        default_factory=lambda: ObservabilitySettings(),
        description="OpenTelemetry tracing (off by default).")

    _service_name = field_validator("name")(_name)

    @model_validator(mode="after")
    def _unique_topics(self) -> Settings:
        seen: dict[tuple[str, str], int] = {}
        for gi, group in enumerate(self.groups):
            gid = group.group_id or self.name
            for topic in group.topics:
                key = (gid, topic.topic or f"/{topic.topic_pattern}/")
                if key in seen:
                    raise ValueError(
                        f"topic {key[1]!r} appears twice in group {gid!r} "
                        f"(groups[{seen[key]}] and groups[{gi}])"
                    )
                seen[key] = gi
        return self

    @model_validator(mode="after")
    def _batches_hold_a_message(self) -> Settings:
        cap = self.kafka.max_batch_inflated_bytes
        for gi, group in enumerate(self.groups):
            for ti, topic in enumerate(group.topics):
                if topic.max_message_bytes > cap:
                    raise ValueError(
                        f"kafka.max_batch_inflated_bytes ({cap}) is less than "
                        f"groups[{gi}].topics[{ti}].max_message_bytes "
                        f"({topic.max_message_bytes}): a batch of one message that size "
                        "could never be read")
        return self

    @model_validator(mode="after")
    def _merge_needs_spark(self) -> Settings:
        if self.merge.interval_s is not None and not any(
                s.settings.type == "spark" for g in self.groups for t in g.topics
                for s in t.named_sinks()):
            raise ValueError("merge.interval_s is set but no topic has a sink of type spark "
                             "(the merge folds spark staging tables)")
        return self

    @model_validator(mode="after")
    def _pattern_tables_unplanned(self) -> Settings:
        patterns = [f"topic_pattern {t.topic_pattern!r}" if t.topic_pattern is not None
                    else f"the route of topic {t.topic!r}" for g in self.groups
                    for t in g.topics
                    if (t.topic_pattern is not None or t.route is not None)
                    and any(s.settings.type == "spark" for s in t.named_sinks())]
        if patterns and (self.merge.interval_s is not None
                         or self.spark.maintenance.every_s is not None):
            raise ValueError(
                f"{patterns[0]} feeds spark tables, which the merge "
                "(merge.interval_s) and the table maintenance (spark.maintenance.every_s) "
                "do not cover yet: unset them, or name the topics (the tables) in topic "
                "entries")
        return self

    def group_id(self, group: GroupSettings) -> str:
        return group.group_id or self.name

    def risks(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Valid settings that can lose data, as (path, why) pairs; the loader adds the
        file and line, ``validate`` prints them and ``run`` logs them at start."""
        found: list[tuple[tuple[str | int, ...], str]] = []
        for gi, group in enumerate(self.groups):
            if group.commit.mode is CommitMode.AUTO:
                found.append((("groups", gi, "commit", "mode"),
                              "'auto' can lose data: Kafka's auto-commit commits the offsets "
                              "the consumer fetched every max_interval_s, whether or not the "
                              "sink wrote them, so a crash or a failed write skips those "
                              "messages; use 'batch' to commit only what the sink accepted"))
        return found


class SchemaRegistryBasicAuth(_Model):
    username: str = Field(description="Schema registry user.")
    password: SecretStr = Field(description="Schema registry password (never logged).")


class SchemaRegistryTls(_Model):
    verify: bool = Field(True, description="Verify the registry's certificate.")
    ca_file: str | None = Field(
        None, description="PEM bundle of trusted CAs; replaces the default trust store."
    )
    client_cert: str | None = Field(None, description="PEM client certificate (mutual TLS).")
    client_key: str | None = Field(
        None, description="PEM private key of client_cert (when not in the same file)."
    )

    @model_validator(mode="after")
    def _key_needs_cert(self) -> SchemaRegistryTls:
        if self.client_key and not self.client_cert:
            raise ValueError("client_key needs client_cert")
        return self


class SchemaRegistrySettings(_Model):
    """Where Avro writer schemas come from: Confluent-compatible REST, or ``file://DIR``."""

    url: str = Field(
        "http://localhost:8081",
        description="Comma-separated http(s) URLs tried in order (failover), or file://DIR.",
    )
    id_type: Literal["int", "long", "uuid"] = Field(
        "int", description="Schema id after the magic byte: int (4 bytes), long (8), uuid (16)."
    )
    basic_auth: SchemaRegistryBasicAuth | None = Field(None, description="HTTP basic auth.")
    bearer_token: SecretStr | None = Field(None, description="HTTP bearer token.")
    tls: SchemaRegistryTls = Field(default_factory=SchemaRegistryTls, description="TLS options.")
    timeout_s: float = Field(10, gt=0, description="Timeout of one HTTP request.")
    max_retries: int = Field(5, ge=0, description="Retry rounds after the first attempt.")
    min_backoff_s: float = Field(0.2, ge=0, description="First retry delay (full jitter).")
    max_backoff_s: float = Field(10, ge=0, description="Cap of the retry delay and Retry-After.")
    not_found_retry_s: float = Field(
        60, ge=0,
        description="How long a 404 for a schema id is retried (capped backoff; the partition "
        "waits, nothing is committed), from the id's first 404, before its messages count as "
        "poison (failure mode). Registries answer 404 for existing ids while they reload "
        "(Karapace ~5 s after a restart). 0: poison at once.",
    )

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        urls = [u.strip() for u in value.split(",") if u.strip()]
        if not urls:
            raise ValueError("must name at least one URL")
        if any(u.startswith("file://") for u in urls):
            if len(urls) > 1 or len(urls[0]) == len("file://"):
                raise ValueError("file://DIR must be the only URL and name a directory")
            return urls[0]
        for u in urls:
            scheme, sep, rest = u.partition("://")
            host = rest.split("/", 1)[0]
            if not sep or scheme not in ("http", "https") or not host:
                # the value is not echoed: it may hold credentials
                raise ValueError("each URL must be http(s)://host[:port] or file://DIR")
            if "@" in host:
                raise ValueError("credentials in the URL are not allowed; use basic_auth")
        return ",".join(u.rstrip("/") for u in urls)

    @model_validator(mode="after")
    def _check(self) -> SchemaRegistrySettings:
        if self.basic_auth is not None and self.bearer_token is not None:
            raise ValueError("set basic_auth or bearer_token, not both")
        if self.max_backoff_s < self.min_backoff_s:
            raise ValueError("max_backoff_s must be >= min_backoff_s")
        return self

    @property
    def urls(self) -> list[str]:
        """The http(s) base URLs in failover order (empty for ``file://``)."""
        return [] if self.file_dir is not None else self.url.split(",")

    @property
    def file_dir(self) -> str | None:
        """The directory of a ``file://DIR`` URL, else None."""
        return self.url[len("file://") :] if self.url.startswith("file://") else None


# Settings names SchemaRegistrySettings, defined after it: resolve the forward reference now
# (pydantic-settings warns about unresolved field annotations otherwise).
Settings.model_rebuild()
