"""What ``run`` would refuse about a configuration's sinks, found before anything starts.

The settings model validates every topic's ``sink:`` against its type's settings model
when the file is loaded. What it cannot see needs the sink classes and the processors:

- a sink type whose Python packages are missing (:attr:`Sink.requires
  <actors.sinks.base.Sink.requires>`): one line per package to install, e.g. ``sink type
  'spark' needs pyspark, pyarrow (not installed): pip install 'kstage[spark]'``;
- what each sink, built with its settings and bound to its processor's columns and table
  (never opened), refuses (:meth:`Sink.check <actors.sinks.base.Sink.check>`): a table
  sink fed by a processor without columns, a table name that is not an identifier.

:mod:`actors.preflight` adds these problems to what ``kstage validate`` and ``run``
refuse at start (file, line and key of each, exit code 2), instead of workers that crash
at open and restart.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterable, Mapping

from actors.record_columns import record_column_names, sink_columns
from actors.sinks.base import SinkContext
from actors.sinks.registry import SinkTypeError, build_sink, load
from processors.base import Processor
from processors.registry import for_options
from settings.loader import ConfigPath
from settings.models import Settings

logger = logging.getLogger(__name__)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a broken spec
        return False


def missing_packages(sink_types: Iterable[str]) -> list[str]:
    """One line per ``pip install`` the given sink types need and lack, naming the sink
    type, the missing packages and what to install (empty when nothing is missing)."""
    lines: list[str] = []
    for name in dict.fromkeys(sink_types):
        try:
            cls = load(name)
        except SinkTypeError:
            continue  # not installed at all: the settings model reports it at sink.type
        wanted: dict[str, list[str]] = {}
        for module, install in cls.requires.items():
            if not _installed(module):
                wanted.setdefault(install, []).append(module)
        lines += [f"sink type {name!r} needs {', '.join(modules)} (not installed): "
                  f"pip install '{install}'" for install, modules in wanted.items()]
    return lines


SAMPLE_TOPIC = "topic"
"""The topic a ``topic_pattern`` entry's sinks are checked for (its templates are
validated with a placeholder already: any topic name makes the same kind of name)."""


SAMPLE_TABLE = "routed"
"""The table a routed topic's sinks are checked for (``{table}`` filled in; the route's
tables are SQL identifiers already)."""


def sink_problems(settings: Settings, processors: Mapping[str, type[Processor]],
                  ) -> list[tuple[ConfigPath, str]]:
    """Every problem of the configuration's sinks, as (settings path, why) pairs.

    ``processors``: the processor class of each name the topics use (see
    :func:`~actors.master.resolve_processors`); a topic whose processor is missing from
    it is skipped (its processor is the problem)."""
    problems: list[tuple[ConfigPath, str]] = []
    reported: set[str] = set()
    for gi, group in enumerate(settings.groups):
        for ti, entry in enumerate(group.topics):
            here: ConfigPath = ("groups", gi, "topics", ti)
            # A pattern's sinks as a matching topic's: {topic} filled in.
            topic = entry if entry.topic_pattern is None else entry.for_topic(SAMPLE_TOPIC)
            found = processors.get(topic.processor)
            cls = None if found is None else for_options(found, topic.options)
            for named in topic.named_sinks():
                where: ConfigPath = (*here, *named.path)
                kind = named.settings.type
                if kind not in reported:  # once per sink type, at its first use
                    reported.add(kind)
                    problems += [((*where, "type"), line)
                                 for line in missing_packages([kind])]
                if cls is None:
                    continue
                # built, never opened; a routed topic's as one of its tables
                sink = build_sink(named.settings if topic.route is None
                                  else named.settings.for_table(SAMPLE_TABLE))
                sink.bind(SinkContext(
                    label=f"{settings.group_id(group)}/{topic.topic}", topic=topic.topic,
                    processor=topic.processor, columns=sink_columns(topic, cls), table=cls.table,
                    record_columns=record_column_names(topic), key=tuple(cls.key),
                    emits_deletes=cls.emits_deletes, source_order=cls.source_order,
                    columns_from_schema=cls.columns_from_schema,
                    settings=settings))
                # a sink names its keys as under sink:; under sinks: they are sinks.K.<key>
                problems += [((*here, *_under(key, named.path)), why)
                             for key, why in sink.check()]
    return problems


def _under(key: tuple[str | int, ...], path: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """A sink's problem ``key`` (relative to the topic, ``("sink", ...)`` for its own
    keys) for the sink at ``path`` of the topic."""
    if key and key[0] == "sink":
        return (*path, *key[1:])
    return key
