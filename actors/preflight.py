"""What ``kstage run`` refuses at start, found before anything starts.

Pydantic validates each setting on its own (settings/models.py); these checks need more
than the settings model: the processor registry (every processor is built with its
topic's ``options``, so an unknown option or a wrong type is found here, not by a worker
that would crash and be restarted), the sinks (each built with its settings and bound to
its processor, never opened: see :mod:`actors.sinks.checks`), the Kafka client's key
table and the OAUTHBEARER token provider's keys, the Avro reader schemas. Each problem
is a (path, why) pair:
:func:`settings.loader.load_settings` runs :func:`check` as one of its ``checks`` and
names the file, the line and the key of each; :func:`resolve_processors` and
:func:`resolve_sinks` raise the same problems without lines, for callers that build
settings in code.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from actors import kafka_keys
from actors.record_columns import column_problems
from actors.sinks.checks import sink_problems
from processors import registry
from processors.base import Processor
from processors.errors import RegistryError
from settings.identifiers import sql_identifier
from settings.loader import ConfigPath, dotted_key
from settings.models import Settings, TopicSettings
from settings.suggest import did_you_mean

logger = logging.getLogger(__name__)

Problem = tuple[ConfigPath, str]


def check(settings: Settings) -> list[Problem]:
    """Every problem ``run`` would refuse at start, as (path, why) pairs."""
    problems: list[Problem] = []
    if not settings.groups:
        problems.append((("groups",), "no consumer groups: add at least one group with its "
                                      "topics (there is nothing to run)"))
    consumer_config = settings.kafka.consumer_config
    for key in kafka_keys.unsupported_keys(consumer_config):
        problems.append((("kafka", "consumer_config", key),
                         f"key {key!r} is not supported by kstage's Kafka client "
                         f"(supported: {', '.join(kafka_keys.supported_keys())}, and the "
                         "token provider's sasl.oauthbearer.* keys)"))
    if any(key.startswith(kafka_keys.OAUTH_PREFIX) for key in consumer_config):
        from actors import tokens  # the token providers load aiokafka: only if used

        for key, why in tokens.options_problems(consumer_config):
            problems.append((("kafka", "consumer_config", key), why))
    classes: dict[str, type[Processor]] = {}
    problems.extend(_processor_problems(settings, classes))
    problems.extend(sink_problems(settings, classes))
    problems.extend(_spark_problems(settings))
    problems.extend(_tracing_problems(settings))
    return problems


def check_names(data: Mapping[str, Any]) -> list[Problem]:
    """The unknown processor names of a raw configuration mapping that the settings
    model refused (:func:`settings.loader.load_settings` runs it as a name check), so
    one pass of ``kstage validate`` names them beside the model's problems."""
    problems: list[Problem] = []
    groups = data.get("groups")
    installed = registry.available()
    for gi, group in enumerate(groups if isinstance(groups, list) else ()):
        topics = group.get("topics") if isinstance(group, dict) else None
        for ti, topic in enumerate(topics if isinstance(topics, list) else ()):
            name = topic.get("processor") if isinstance(topic, dict) else None
            if isinstance(name, str) and name not in installed:
                try:
                    registry.load(name)
                except RegistryError as exc:
                    problems.append((("groups", gi, "topics", ti, "processor"),
                                     _unknown(name, exc)))
    return problems


def _unknown(name: str, exc: RegistryError) -> str:
    """Why processor ``name`` cannot be loaded; a near miss of an installed name ends
    with "did you mean"."""
    installed = registry.available()
    return str(exc) + ("" if name in installed else did_you_mean(name, installed))


def _spark_problems(settings: Settings) -> Iterator[Problem]:
    """The Iceberg jars, when a spark sink writes a staging table (the merge of
    ``merge.interval_s`` needs a spark sink too): fetched, or named in ``spark.jars``."""
    if not settings.uses_sink("spark"):
        return
    from actors.sinks.spark.jars import jar_problems  # only with spark sinks

    for why in jar_problems(settings.spark):
        yield ("spark", "jars"), why
    if settings.spark.appends == "pyiceberg":
        from actors.sinks.spark.catalog_connection import connection_problems
        from actors.sinks.spark.pyiceberg_catalog import missing_modules

        # The catalog's connection (TLS included) means the same to libpq as to the
        # JDBC driver, or the setting is refused here.
        yield from connection_problems(settings.spark)

        for package in missing_modules(settings.spark):
            yield ("spark", "appends"), (f"appends: pyiceberg needs {package}, which is not "
                                         "installed: pip install 'kstage[spark]'")


def _tracing_problems(settings: Settings) -> Iterator[Problem]:
    """The OpenTelemetry packages tracing needs, when it is on (the settings or the
    ``OTEL_*`` variables of this environment)."""
    from actors import tracing

    if not tracing.enabled(settings.observability):
        return
    absent = tracing.missing(settings.observability)
    if absent:
        yield ("observability", "tracing"), (
            f"tracing is on but {', '.join(absent)} is not installed: pip install "
            "'kstage[otel]' (or turn tracing off: see docs/operations.md#tracing)")


def resolve_processors(settings: Settings) -> dict[str, type[Processor]]:
    """Load every processor the configuration names and build each with its topic's
    options; raise RegistryError listing every problem (one ``key: why`` line each)."""
    classes: dict[str, type[Processor]] = {}
    problems = list(_processor_problems(settings, classes))
    if problems:
        raise RegistryError("\n".join(f"{dotted_key(path)}: {why}" for path, why in problems))
    return classes


def resolve_sinks(settings: Settings, classes: Mapping[str, type[Processor]]) -> None:
    """Build every topic's sink with its settings and its processor (``classes``, from
    :func:`resolve_processors`), never opening it; raise RegistryError listing what they
    would refuse at open and the Python packages they lack (one ``key: why`` line each),
    for callers that build settings in code (the master, the demo)."""
    problems = sink_problems(settings, classes)
    if problems:
        raise RegistryError("\n".join(f"{dotted_key(path)}: {why}" for path, why in problems))


def _processor_problems(settings: Settings,
                        classes: dict[str, type[Processor]]) -> Iterator[Problem]:
    """Problems of the topics' processors; fills ``classes`` (name -> class)."""
    claims = []
    broken: set[str] = set()
    for gi, group in enumerate(settings.groups):
        for ti, topic in enumerate(group.topics):
            where: ConfigPath = ("groups", gi, "topics", ti)
            if topic.topic_pattern is None:  # a pattern's topics are claimed when found
                claims.append((settings.group_id(group), topic.topic, topic.processor))
            cls = classes.get(topic.processor)
            if cls is None:
                if topic.processor in broken:
                    continue
                try:
                    cls = classes[topic.processor] = registry.load(topic.processor)
                except RegistryError as exc:
                    broken.add(topic.processor)
                    yield (*where, "processor"), _unknown(topic.processor, exc)
                    continue
                if cls.table:
                    try:
                        sql_identifier(cls.table)
                    except ValueError as exc:
                        yield (*where, "processor"), (f"processor {topic.processor!r} declares "
                                                      f"the staging table {exc}")
            if topic.format not in cls.formats:
                yield (*where, "format"), (f"processor {topic.processor!r} accepts "
                                           f"{list(cls.formats)}, not {topic.format!r}")
            uses_avro = "avro" in (topic.format, topic.key_format)
            if uses_avro and settings.schema_registry is None:
                yield where, (f"topic {topic.topic!r} reads Avro but no schema_registry is "
                              "configured")
            yield from _format_problems(settings, topic, where)
            if topic.reader_schema is not None:
                yield from _reader_schema_problems(topic.reader_schema, where)
            yield from _option_problems(topic.processor, cls, topic.options,
                                        (*where, "options"))
            yield from column_problems(topic, cls, (*where, "columns"))
    try:
        registry.check_topics(claims)
    except RegistryError as exc:
        yield ("groups",), str(exc)


def _reader_schema_problems(path: str, where: ConfigPath) -> Iterator[Problem]:
    """The Avro reader schema at ``path``: read and parsed (fastavro, only if used)."""
    from fastavro.schema import SchemaParseException

    from actors.codecs.avro import load_schema

    try:
        load_schema(path)
    except (OSError, ValueError, SchemaParseException) as exc:
        yield (*where, "reader_schema"), f"{path}: {exc}"


def _format_problems(settings: Settings, topic: TopicSettings, where: ConfigPath
                     ) -> Iterator[Problem]:
    """``format: protobuf`` and ``json_schema``: a registry server, and the extra."""
    if topic.format not in ("protobuf", "json_schema"):
        return
    registry = settings.schema_registry
    if registry is None:
        yield (*where, "format"), (f"topic {topic.topic!r} reads {topic.format} but no "
                                   "schema_registry is configured")
    elif registry.file_dir is not None:
        yield (*where, "format"), (f"topic {topic.topic!r} reads {topic.format}: it needs a "
                                   "registry server (schema_registry.url http(s)://...), not "
                                   "a file:// directory of .avsc files")
    from actors.codecs.registries import missing_extra  # the codecs: only if used

    extra = missing_extra(topic.format)
    if extra is not None:
        yield (*where, "format"), (f"format {topic.format} needs the {extra} extra (not "
                                   f"installed): pip install 'kstage[{extra}]'")


def _option_problems(name: str, cls: type[Processor], options: dict[str, object],
                     where: ConfigPath) -> Iterator[Problem]:
    """Build the processor with ``options`` as a worker would; its refusals, located."""
    try:
        cls(options)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            message = err["msg"]
            if err["type"] == "value_error":
                message = message.removeprefix("Value error, ")
            elif err["type"] == "extra_forbidden":
                known = ", ".join(cls.options_model.model_fields) or "none"
                message = f"unknown option of processor {name!r} (options: {known})"
            yield (*where, *err["loc"]), message
    except Exception as exc:  # noqa: BLE001 - any refusal of its options is a config error
        yield where, (f"processor {name!r} refused its options: "
                      f"{type(exc).__name__}: {exc}")
