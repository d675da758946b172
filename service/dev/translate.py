"""Translate WhereHows Kafka consumer jobs and DataHub Actions pipelines to kstage configs.

``kstage config from-wherehows FILE`` / ``from-datahub FILE`` print the result as YAML.
Translation never guesses: what has no kstage equivalent raises a
:class:`TranslationError` with one ``FILE:LINE: KEY: why`` line per problem; what kstage
does differently but safely becomes a *note*, printed as a comment above the YAML.

* WhereHows job files are Java properties: ``group.id``, ``schemaRegistryUrl``,
  ``bootstrap.servers`` and three comma-separated lists paired by position,
  ``kafka.topics``, ``kafka.processors`` (Java classes, matched by simple name to
  :data:`WHEREHOWS_PROCESSORS`) and ``kafka.db.tables`` (each must be the table of the
  kstage processor, whose rows follow that table's DDL).
* DataHub Actions pipelines are YAML: ``name``, ``source`` (``type: kafka``, ``config``:
  ``connection``, ``topic_routes``, commit options) and ``options`` (``failure_mode``,
  ``retry_count``, ``failed_events_dir``) and ``filter`` (``event_type``: topics whose
  event type is not listed are left out; ``event``: a ``topics[].filter`` include, nested
  mappings as dotted paths, under ``payload.value`` for platform events, whose
  EntityChangeEvent kstage reads from the PlatformEvent's JSON payload). ``transform``,
  ``action`` and ``datahub`` have no counterpart: kstage lands every event as a staging
  row.

``${VAR}`` and ``${VAR:-default}`` are copied verbatim (kstage expands them at load); a
bare ``$VAR`` or a malformed ``${...`` is an error, since kstage would not expand it.
Kafka client keys are checked against those kstage's consumer supports
(:mod:`actors.kafka`), so a translated file does not fail on them at start.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from actors.kafka_keys import KEYS, SSL_KEYS
from processors import registry
from settings.errors import SettingsError

WHEREHOWS_PROCESSORS: dict[str, str] = {
    "GobblinTrackingCompactionProcessor": "gobblin_compaction",
    "GobblinTrackingDistcpNgProcessor": "gobblin_distcp",
    "GobblinTrackingLumosProcessor": "gobblin_lumos",
    "MetastoreAuditProcessor": "metastore_audit",
}
"""WhereHows processor class (simple name) -> kstage processor."""
DATAHUB_ROUTES: dict[str, str] = {
    "mcl": "datahub_mcl", "mcl_timeseries": "datahub_mcl", "pe": "datahub_entity_change"}
"""DataHub Actions Kafka source route -> kstage processor."""
DATAHUB_EVENT_TYPES: dict[str, str] = {
    "mcl": "MetadataChangeLogEvent_v1", "mcl_timeseries": "MetadataChangeLogEvent_v1",
    "pe": "EntityChangeEvent_v1"}
"""DataHub Actions Kafka source route -> the event type its events have in a filter."""
_DH_EVENT_PREFIX = {"pe": "payload.value."}  # where kstage's decoded value holds the event
DATAHUB_DEFAULT_ROUTES: dict[str, str] = {
    "mcl": "MetadataChangeLog_Versioned_v1", "mcl_timeseries": "MetadataChangeLog_Timeseries_v1",
    "pe": "PlatformEvent_v1"}
"""The topics DataHub's Kafka source reads when ``topic_routes`` is not given."""

# Kafka client keys that are consumer-group settings in kstage (Java and librdkafka names).
_GROUP_KEYS = {
    "auto.offset.reset": "auto_offset_reset", "session.timeout.ms": "session_timeout_ms",
    "heartbeat.interval.ms": "heartbeat_interval_ms", "max.poll.records": "max_poll_records",
    "max.poll.interval.ms": "max_poll_interval_ms", "fetch.max.wait.ms": "fetch_max_wait_ms",
    "fetch.wait.max.ms": "fetch_max_wait_ms"}
_RESETS = {"earliest": "earliest", "smallest": "earliest", "beginning": "earliest",
           "latest": "latest", "largest": "latest", "end": "latest", "none": "none"}
_CLIENT_KEYS = {"group.id": "group_id", "bootstrap.servers": "bootstrap", "client.id": "client_id"}
SUPPORTED_KAFKA_KEYS = frozenset(KEYS) | frozenset(SSL_KEYS) | frozenset(_GROUP_KEYS)
_SR_TLS = {"ssl.ca.location": "ca_file", "ssl.certificate.location": "client_cert",
           "ssl.key.location": "client_key"}
_WH_LISTS = ("kafka.topics", "kafka.processors", "kafka.db.tables")
_WH_REQUIRED = ("group.id", "schemaRegistryUrl", "bootstrap.servers", *_WH_LISTS)
_WH_IGNORED = ("zookeeper.", "job.", "auto.commit.enable", "enable.auto.commit")
_DH_KEYS: dict[tuple[str, ...], tuple[str, ...]] = {
    (): ("name", "enabled", "source", "filter", "transform", "action", "datahub", "options"),
    ("source",): ("type", "config"),
    ("source", "config"): ("connection", "topic_routes", "async_commit_enabled",
                           "async_commit_interval", "commit_retry_count", "commit_retry_backoff"),
    ("source", "config", "connection"): ("bootstrap", "schema_registry_url", "consumer_config",
                                         "schema_registry_config", "client_timeout_seconds"),
    ("options",): ("failure_mode", "retry_count", "failed_events_dir"),
    ("filter",): ("event_type", "event")}
_CONN = ("source", "config", "connection")
_REF = re.compile(r"\$(?:(?P<esc>\$)|(?P<ref>\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\})"
                  r"|(?P<bad>\{)|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")
_WHOLE_REF = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\}")
_USER_INFO = re.compile(r"((?:\$\{[^}]*\}|[^:$])+):(.+)", re.DOTALL)  # USER:PASSWORD
_NAME = re.compile(r"^\S+$")
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_KIND = {"wherehows": "a WhereHows Kafka consumer job", "datahub": "a DataHub Actions pipeline"}
_TYPES: dict[type, str] = {dict: "a mapping", str: "a string", int: "an integer", bool: "a boolean"}
_KeyPath = tuple[str | int, ...]


class TranslationError(SettingsError):
    """The source cannot be translated: one ``FILE:LINE: KEY: why`` line per problem
    (``FILE: KEY: why`` where the line is not known)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class Translation:
    """A kstage config (plain data) and notes on what kstage does differently."""

    config: dict[str, Any]
    notes: tuple[str, ...] = ()


@dataclass
class _Report:
    source: str
    problems: list[tuple[int, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def error(self, key: str, line: int | None, message: str) -> None:
        where = f"{self.source}:{line}" if line else self.source
        self.problems.append((line or 0, f"{where}: {key}: {message}"))

    def done(self, config: dict[str, Any]) -> Translation:
        if self.problems:  # in file order; problems without a line first
            raise TranslationError([p for _, p in sorted(self.problems, key=lambda p: p[0])])
        return Translation(config, tuple(self.notes))


def from_wherehows(text: str, source: str) -> dict[str, Any]:
    """The kstage config of a WhereHows Kafka consumer job file's ``text``."""
    return translate_wherehows(text, source).config


def from_datahub(text: str, source: str) -> dict[str, Any]:
    """The kstage config of a DataHub Actions pipeline file's ``text``."""
    return translate_datahub(text, source).config


def translate_file(kind: str, path: str) -> str:
    """Read ``path`` (``kind``: ``wherehows`` or ``datahub``) and return the kstage YAML."""
    translate = {"wherehows": translate_wherehows, "datahub": translate_datahub}[kind]
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise TranslationError([f"{path}: cannot read {_KIND[kind]}: {reason}"]) from exc
    return render(translate(text, path), path, kind)


def render(translation: Translation, source: str, kind: str) -> str:
    """The config as YAML, headed by comments naming the source and listing the notes."""
    head = [f"# kstage configuration translated by `kstage config from-{kind}` from {_KIND[kind]}:",
            f"#   {source}", "# Check it with `kstage validate -c FILE`."]
    for i, note in enumerate(translation.notes):
        lines = textwrap.wrap(note, 90) or [""]
        head += ["# Notes:"] if i == 0 else []
        head += [f"#   - {lines[0]}", *(f"#     {line}" for line in lines[1:])]
    body = yaml.safe_dump(translation.config, sort_keys=False, allow_unicode=True, width=100)
    return "\n".join(head) + "\n" + body


# ----------------------------------------------------------------------------- WhereHows


def translate_wherehows(text: str, source: str) -> Translation:
    """Translate a WhereHows Kafka consumer job (Java properties) into a kstage config."""
    report = _Report(source)
    props = _properties(text)
    value = {key: v.strip() for key, (v, _) in props.items()}
    line = {key: ln for key, (_, ln) in props.items()}
    for key in props:
        _check_refs(report, key, line[key], props[key][0])
    for key in _WH_REQUIRED:
        if not value.get(key):
            hint = ("; kstage connects to the brokers, not to ZooKeeper: add "
                    "bootstrap.servers=HOST:9092") if key == "bootstrap.servers" else ""
            report.error(key, line.get(key), f"is {'empty' if key in props else 'missing'}{hint}")
    topics, classes, tables = (_items(report, key, value, line) for key in _WH_LISTS)
    if topics and classes and tables and not len(topics) == len(classes) == len(tables):
        report.error(", ".join(_WH_LISTS), line["kafka.topics"],
                     f"the three lists must have equal length (WhereHows pairs them by "
                     f"position): {len(topics)} topics, {len(classes)} processors, "
                     f"{len(tables)} tables")
    names = [WHEREHOWS_PROCESSORS.get(cls.rsplit(".", 1)[-1]) for cls in classes]
    known = ", ".join(f"{k} -> {v}" for k, v in WHEREHOWS_PROCESSORS.items())
    for i, cls in enumerate(classes):
        if names[i] is None:
            report.error("kafka.processors", line["kafka.processors"], f"unknown WhereHows "
                         f"processor class {cls!r} (entry {i + 1}); kstage translates {known}")
    out: list[dict[str, Any]] = []
    if topics and len(topics) == len(names) == len(tables):
        for i, (topic, name, table) in enumerate(zip(topics, names, tables, strict=True)):
            if name is None:
                continue
            expected = registry.load(name).table
            if table.rsplit(".", 1)[-1] != expected:
                report.error("kafka.db.tables", line["kafka.db.tables"],
                             f"entry {i + 1} is {table!r}, but topic {topic!r} goes to kstage's "
                             f"{name}, whose rows follow the DDL of {expected!r}; use that table")
            if any(t["topic"] == topic for t in out):
                report.error("kafka.topics", line["kafka.topics"], f"{topic!r} is listed twice")
            out.append(_topic(topic, name, expected))
    group_id = value.get("group.id", "")
    _check_name(report, "group.id", line.get("group.id"), group_id)
    brokers = value.get("bootstrap.servers", "").split(",")
    kafka: dict[str, Any] = {"bootstrap": ",".join(b.strip() for b in brokers if b.strip())}
    group: dict[str, Any] = {"group_id": group_id, "auto_offset_reset": "latest"}
    consumer: dict[str, Any] = {}
    ignored = [key for key in props if key.startswith(_WH_IGNORED)]
    for key in props:
        if key in _WH_REQUIRED or key in ignored:
            continue
        if key == "auto.commit.interval.ms":
            ms = _number(report, key, line[key], value[key], allow_ref=False)
            group["commit"] = {"mode": "batch", "max_interval_s": int(ms or 0) / 1000}
        else:
            _kafka_key(report, key, key, line[key], _typed(value[key]), kafka, group, consumer)
    if "auto.offset.reset" not in props:
        report.notes.append(
            "auto_offset_reset: latest is the default of WhereHows' Kafka consumer (largest): a "
            "group without committed offsets starts at the end of each topic. Set earliest to "
            "load what the topics retain (rows carry their Kafka coordinates: replays are "
            "idempotent downstream).")
    if ignored:
        report.notes.append("not translated (kstage uses Kafka's group coordinator and commits "
                            f"after the sink accepted the rows): {', '.join(ignored)}")
    report.notes += [
        "schema_registry.id_type: int (Confluent's 4-byte ids); WhereHows builds whose SchemaId "
        "was a long or a UUID need id_type: long or uuid.",
        "rows go to JSON lines under out/, one file per staging table."]
    group["topics"] = out
    return report.done({"name": group_id, "kafka": _with(kafka, consumer_config=consumer),
                        "schema_registry": {"url": value.get("schemaRegistryUrl", "")},
                        "groups": [group]})


def _items(report: _Report, key: str, value: dict[str, str], line: dict[str, int]) -> list[str]:
    if not value.get(key):
        return []
    items = [item.strip() for item in value[key].split(",")]
    while items and not items[-1]:  # Java's String.split drops trailing empty strings
        items.pop()
    if not items:
        report.error(key, line[key], "has no entries")
    for i, item in enumerate(items):
        if not _NAME.match(item):
            report.error(key, line[key], f"entry {i + 1} ({item!r}) is empty or has whitespace")
    return items


def _properties(text: str) -> dict[str, tuple[str, int]]:
    """``java.util.Properties.load``: key -> (value, first line); the last key wins."""
    props: dict[str, tuple[str, int]] = {}
    lines, i = text.splitlines(), 0
    while i < len(lines):
        start, logical = i + 1, lines[i].lstrip(" \t\f")
        i += 1
        if not logical or logical[0] in "#!":
            continue
        while (len(logical) - len(logical.rstrip("\\"))) % 2:  # odd: continued
            logical = logical[:-1] + (lines[i].lstrip(" \t\f") if i < len(lines) else "")
            i += 1
        j = 0
        while j < len(logical) and logical[j] not in "=: \t\f":
            j += 2 if logical[j] == "\\" else 1
        rest = logical[j:].lstrip(" \t\f")
        rest = rest[1:].lstrip(" \t\f") if rest[:1] in ("=", ":") else rest
        props[_unescape(logical[:j])] = (_unescape(rest), start)
    return props


def _unescape(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if len(code) == 5:
            return chr(int(code[1:], 16))
        return {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(code, code)

    return _ESCAPE.sub(one, text)


# ------------------------------------------------------------------------------ DataHub


def translate_datahub(text: str, source: str) -> Translation:
    """Translate a DataHub Actions pipeline (YAML, Kafka source) into a kstage config."""
    report = _Report(source)
    data, lines = _yaml(text, source)
    if not isinstance(data, dict):
        raise TranslationError([f"{source}:1: (top level): a DataHub Actions pipeline is a "
                                "mapping with name, source, action and options"])

    def line(*path: str | int) -> int | None:
        return next((lines[path[:n]] for n in range(len(path), -1, -1) if path[:n] in lines),
                    None)

    def get(path: _KeyPath, kind: type, required: bool = False) -> Any:
        node: Any = data
        for n, key in enumerate(path):
            if not isinstance(node, dict) or node.get(key) is None:
                if required and isinstance(node, dict) and n == len(path) - 1:
                    report.error(_dotted(path), line(*path[:n]), "is missing")
                return None
            node = node[key]
        if not isinstance(node, kind) or (kind is int and isinstance(node, bool)):
            report.error(_dotted(path), line(*path),
                         f"must be {_TYPES[kind]}, not {type(node).__name__}")
            return None
        return node

    for path, scalar in _scalars(data, ()):
        if isinstance(scalar, str):
            _check_refs(report, _dotted(path), line(*path), scalar)
    for parent, keys in _DH_KEYS.items():
        for key in get(parent, dict) or {}:
            if key not in keys:
                report.error(_dotted((*parent, key)), line(*parent, key),
                             f"unknown key (DataHub reads {', '.join(keys)} here)")
    name = get(("name",), str, required=True) or ""
    _check_name(report, "name", line("name"), name)
    kind = get(("source", "type"), str, required=True)
    if kind is not None and kind != "kafka":
        report.error("source.type", line("source", "type"),
                     f"{kind!r} cannot be translated: kstage consumes Kafka (type: kafka)")
    get(("source", "config"), dict, required=kind == "kafka")
    get(_CONN, dict, required=True)
    kafka: dict[str, Any] = {"bootstrap": get((*_CONN, "bootstrap"), str, required=True)}
    registry_url = get((*_CONN, "schema_registry_url"), str, required=True)
    group: dict[str, Any] = {"group_id": name, "auto_offset_reset": "latest"}
    consumer: dict[str, Any] = {}
    for key, value in (get((*_CONN, "consumer_config"), dict) or {}).items():
        path = (*_CONN, "consumer_config", str(key))
        _kafka_key(report, str(key), _dotted(path), line(*path), value, kafka, group, consumer)
    if get(("source", "config", "async_commit_enabled"), bool):
        interval = get(("source", "config", "async_commit_interval"), int) or 10000
        group["commit"] = {"mode": "batch", "max_interval_s": interval / 1000}
    group["failure"] = _dh_failure(report, get, line, name)
    group["topics"] = _dh_topics(report, get, line, ("source", "config", "topic_routes") in lines)
    if get(("filter",), dict) is not None:
        group["topics"] = _dh_filter(report, get, line, group["topics"])
    for topic in group["topics"]:
        del topic["route"]
    report.notes.append(
        "DataHub committed offsets event by event (or asynchronously); kstage commits what its "
        "sink acknowledged in batches (commit.mode: batch), still at-least-once.")
    dropped = [key for key in ("transform", "action", "datahub") if key in data]
    if dropped:
        report.notes.append(f"not translated: {', '.join(dropped)} (kstage lands every event "
                            "of the topics as a staging row: act downstream).")
    if data.get("enabled") is False:
        report.notes.append("the pipeline was disabled (enabled: false); this config is not.")
    return report.done({"name": name, "kafka": _with(kafka, consumer_config=consumer),
                        "schema_registry": _dh_registry(report, get, line, registry_url),
                        "groups": [group]})


_Get = Callable[..., Any]
_Line = Callable[..., int | None]


def _dh_registry(report: _Report, get: _Get, line: _Line, url: str | None) -> dict[str, Any]:
    path = (*_CONN, "schema_registry_config")
    out: dict[str, Any] = {"url": url}
    for key, value in (get(path, dict) or {}).items():
        where, at, text = _dotted((*path, str(key))), line(*path, str(key)), str(value)
        user_info = _USER_INFO.fullmatch(text)
        if key == "basic.auth.user.info" and user_info:
            out["basic_auth"] = {"username": user_info[1], "password": user_info[2]}
        elif key == "basic.auth.credentials.source" and text.upper() == "USER_INFO":
            continue
        elif key in _SR_TLS:
            out.setdefault("tls", {})[_SR_TLS[key]] = text
        else:
            report.error(where, at, "not supported by kstage's schema registry client (it "
                         "reads basic.auth.user.info as USER:PASSWORD, "
                         f"basic.auth.credentials.source: USER_INFO, {', '.join(_SR_TLS)})")
    return out


def _dh_failure(report: _Report, get: _Get, line: _Line, name: str) -> dict[str, Any]:
    raw = get(("options", "failure_mode"), str)
    if (raw or "CONTINUE").upper() not in ("CONTINUE", "THROW"):
        report.error("options.failure_mode", line("options", "failure_mode"),
                     f"{raw!r} is not a DataHub failure mode (CONTINUE | THROW)")
    then = "throw" if (raw or "").upper() == "THROW" else "continue"
    retries = get(("options", "retry_count"), int) or 0
    failure: dict[str, Any] = {"mode": then}
    if retries < 0:
        report.error("options.retry_count", line("options", "retry_count"), "must be >= 0")
    elif retries:  # DataHub retries at once, without waiting
        failure = {"mode": "retry", "max_retries": retries, "min_backoff_ms": 0,
                   "max_backoff_ms": 0, "then": then}
    directory = get(("options", "failed_events_dir"), str)
    if directory:  # DataHub writes DIR/<normalised pipeline name>/failed_events.log
        folder = re.sub(r"[^A-Za-z0-9_\-]", "_", name.lower())
        failure["dead_letter_path"] = f"{directory.rstrip('/')}/{folder}/failed_events.log"
    report.notes.append("dead-letter lines hold the raw Kafka record (base64) and the error, "
                        "not DataHub's event JSON.")
    return failure


def _dh_topics(report: _Report, get: _Get, line: _Line, given: bool) -> list[dict[str, Any]]:
    path = ("source", "config", "topic_routes")
    routes = get(path, dict)
    if not given:
        routes = DATAHUB_DEFAULT_ROUTES
        report.notes.append("no topic_routes: DataHub's defaults are translated ("
                            + ", ".join(f"{k}: {v}" for k, v in routes.items()) + ").")
    elif not routes:
        report.error(_dotted(path), line(*path), "names no topic: nothing to consume")
    topics: list[dict[str, Any]] = []
    for route, topic in (routes or {}).items():
        where, at = _dotted((*path, str(route))), line(*path, str(route))
        processor = DATAHUB_ROUTES.get(str(route))
        if processor is None:
            report.error(where, at, f"unknown route (DataHub's Kafka source routes "
                                    f"{', '.join(DATAHUB_ROUTES)})")
        elif not isinstance(topic, str) or not _NAME.match(topic):
            report.error(where, at, "must be a topic name")
        elif any(t["topic"] == topic for t in topics):
            report.error(where, at, f"topic {topic!r} is routed twice")
        else:
            topics.append(_topic(topic, processor, registry.load(processor).table)
                          | {"route": str(route)})
    return topics


def _dh_filter(report: _Report, get: _Get, line: _Line,
               topics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Apply the pipeline's ``filter`` (DataHub's FilterTransformer) to ``topics``: keep
    those whose event type ``event_type`` lists, each with ``event`` as its include."""
    raw_types = get(("filter", "event_type"), object, required=True)
    types = [raw_types] if isinstance(raw_types, str) else raw_types
    if raw_types is not None and (not isinstance(types, list) or not types
                                  or not all(isinstance(t, str) for t in types)):
        report.error("filter.event_type", line("filter", "event_type"),
                     "must be an event type or a non-empty list of them")
        types = None
    include: dict[str, list[Any]] = {}
    odd: list[str] = []
    event = get(("filter", "event"), dict)
    for path, value in _event_paths(event or {}, ()):
        where, at = _dotted(("filter", "event", *path)), line("filter", "event", *path)
        values = value if isinstance(value, list) else [value]
        if any("." in p or not p for p in path):
            report.error(where, at, "a key with a dot (or an empty key) cannot be a kstage "
                         "filter path")
        elif isinstance(value, dict) or not values or any(
                isinstance(v, dict | list) for v in values):
            report.error(where, at, "cannot be translated: kstage filters compare a field "
                         "with scalar values (an empty mapping, an empty list or a list of "
                         "mappings or lists has no counterpart)")
        else:
            include[".".join(path)] = values
            if isinstance(value, list) and any(not isinstance(v, str) for v in values):
                odd.append(where)
    if odd:
        report.notes.append(f"{', '.join(odd)}: DataHub matches a list only against a "
                            "string, so its non-string entries never matched; kstage "
                            "compares them with the field's value (no coercion).")
    kept: list[dict[str, Any]] = []
    for topic in topics:
        route = topic["route"]
        if types is not None and DATAHUB_EVENT_TYPES[route] not in types:
            report.notes.append(f"filter.event_type does not list "
                                f"{DATAHUB_EVENT_TYPES[route]}: topic {topic['topic']} "
                                f"(route {route}) is not consumed.")
            continue
        if include:
            prefix = _DH_EVENT_PREFIX.get(route, "")
            topic["filter"] = {"include": {prefix + p: list(v) for p, v in include.items()}}
        kept.append(topic)
    if types is not None and topics and not kept:
        report.error("filter.event_type", line("filter", "event_type"),
                     f"lists none of the routed topics' event types "
                     f"({', '.join(sorted({DATAHUB_EVENT_TYPES[t['route']] for t in topics}))}"
                     "): nothing to consume")
    return kept


def _event_paths(event: dict[Any, Any], path: tuple[str, ...]
                 ) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, value) of every leaf of a DataHub ``filter.event`` (nested mappings are
    DataHub's nested matches, as dotted paths here)."""
    for key, value in event.items():
        if isinstance(value, dict) and value:
            yield from _event_paths(value, (*path, str(key)))
        else:
            yield (*path, str(key)), value


def _yaml(text: str, source: str) -> tuple[Any, dict[_KeyPath, int]]:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        lines: dict[_KeyPath, int] = {}
        if node is None:
            return None, lines
        _record_lines(node, (), lines, set())
        return loader.construct_document(node), lines
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        raise TranslationError([f"{where}: (YAML): {exc.problem or exc.context}"]) from exc
    except yaml.YAMLError as exc:
        raise TranslationError([f"{source}: (YAML): {exc}"]) from exc
    finally:
        loader.dispose()


def _record_lines(node: Node, path: _KeyPath, lines: dict[_KeyPath, int], active: set[int]) -> None:
    if id(node) in active:  # a recursive alias
        return
    active.add(id(node))
    for key, value in node.value if isinstance(node, MappingNode) else []:
        if isinstance(key, ScalarNode):
            lines[(*path, key.value)] = key.start_mark.line + 1
            _record_lines(value, (*path, key.value), lines, active)
    for index, item in enumerate(node.value if isinstance(node, SequenceNode) else []):
        lines[(*path, index)] = item.start_mark.line + 1
        _record_lines(item, (*path, index), lines, active)
    active.discard(id(node))


def _scalars(data: Any, path: _KeyPath) -> Iterator[tuple[_KeyPath, Any]]:
    children = data.items() if isinstance(data, dict) else (
        enumerate(data) if isinstance(data, list) else None)
    if children is None:
        yield path, data
        return
    for key, value in children:
        yield from _scalars(value, (*path, key if isinstance(key, int) else str(key)))


# ------------------------------------------------------------------------------- shared


def _topic(topic: str, processor: str, table: str) -> dict[str, Any]:
    return {"topic": topic, "processor": processor, "format": "avro",
            "sink": {"type": "jsonl", "path": f"out/{table}.jsonl"}}


def _with(mapping: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """``mapping`` plus the non-empty ``extra`` values."""
    return {**mapping, **{k: v for k, v in extra.items() if v}}


def _kafka_key(report: _Report, key: str, where: str, line: int | None, value: Any,
               kafka: dict[str, Any], group: dict[str, Any], consumer: dict[str, Any]) -> None:
    """Place one Kafka client key: kafka, group setting or ``kafka.consumer_config``."""
    if key in _CLIENT_KEYS:
        target = group if key == "group.id" else kafka
        target[_CLIENT_KEYS[key]] = str(value)
        if key == "group.id":
            _check_name(report, where, line, str(value))
    elif key == "auto.offset.reset":
        group["auto_offset_reset"] = _RESETS.get(str(value).lower())
        if group["auto_offset_reset"] is None:
            report.error(where, line, f"{value!r} is not one of {', '.join(_RESETS)}")
    elif key in _GROUP_KEYS:
        group[_GROUP_KEYS[key]] = _number(report, where, line, value)
    elif key in SUPPORTED_KAFKA_KEYS:
        consumer[key] = value
    else:
        supported = ", ".join(sorted(SUPPORTED_KAFKA_KEYS | set(_CLIENT_KEYS)))
        report.error(where, line, f"not supported by kstage's Kafka consumer "
                                  f"(supported: {supported})")


def _number(report: _Report, where: str, line: int | None, value: Any,
            allow_ref: bool = True) -> int | str | None:
    """An integer, or a whole ``${VAR}`` reference (kstage types it when it expands it)."""
    text = str(value).strip()
    if isinstance(value, int) and not isinstance(value, bool) or text.isdigit():
        return int(text)
    if allow_ref and _WHOLE_REF.fullmatch(text):
        return text
    report.error(where, line, f"must be a number, not {text!r}")
    return None


def _typed(value: str) -> Any:
    """A properties value typed as YAML would: digits become ints, true/false bools."""
    return int(value) if value.isdigit() else {"true": True, "false": False}.get(
        value.lower(), value)


def _check_name(report: _Report, key: str, line: int | None, value: str) -> None:
    if value and not _NAME.match(value):
        report.error(key, line, f"{value!r} must not contain whitespace (it names the "
                                "kstage consumer group)")


def _check_refs(report: _Report, key: str, line: int | None, value: str) -> None:
    for match in _REF.finditer(value):
        if match["bad"] is not None:
            report.error(key, line, "malformed variable reference (kstage expands ${NAME} "
                                    "and ${NAME:-default})")
        elif match["bare"] is not None:
            report.error(key, line, f"${match['bare']} is not expanded by kstage: write "
                                    f"${{{match['bare']}}}")


def _dotted(path: _KeyPath) -> str:
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" if _PLAIN_KEY.match(p)
             else f"[{p!r}]" for p in path]
    return "".join(parts).lstrip(".") or "(top level)"
