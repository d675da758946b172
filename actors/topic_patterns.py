"""Topic patterns: which topics of the cluster each ``topic_pattern`` entry claims.

A group's entry with ``topic_pattern`` (a regular expression, full match) claims every
topic of the cluster it matches, except: a topic the group names in a ``topic`` entry
(the explicit entry wins), a topic an earlier pattern entry of the group claimed (the
first entry wins), internal topics (``__`` prefix) and the group's dead-letter topics.
Each claimed topic gets a fixed entry of its own (:meth:`TopicSettings.for_topic
<settings.models.TopicSettings.for_topic>`: ``{topic}`` in its sinks' table or file
replaced by its name made safe). Two topics of one entry whose sinks would write the same
destination (``a.b`` and ``a_b`` both make ``stg_a_b``) are a conflict: the second is
not started, and the conflict names both. The master lists the topics every
``kafka.metadata_refresh_s`` and hands them to :meth:`PatternWatch.update`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from settings.models import GroupSettings, TopicSettings

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class PatternEntry:
    """One ``topic_pattern`` entry of a group and the topics it claims now."""

    group: str
    index: int  # its place in the group's topics
    settings: TopicSettings
    topics: dict[str, TopicSettings] = field(default_factory=dict)
    destinations: dict[str, str] = field(default_factory=dict)  # destination -> topic
    problems: dict[str, str] = field(default_factory=dict)  # topic -> why not started

    @property
    def pattern(self) -> str:
        assert self.settings.topic_pattern is not None  # noqa: S101 - pattern entries only
        return self.settings.topic_pattern

    def status(self) -> dict[str, object]:
        """The entry in ``/status``: its pattern, the topics it runs, the ones refused."""
        return {"pattern": self.pattern, "topics": sorted(self.topics),
                "count": len(self.topics),
                "refused": [f"{t}: {why}" for t, why in sorted(self.problems.items())]}


@dataclass(frozen=True, slots=True)
class Changes:
    """What a listing changed: (group, entry) of each topic to start, and the
    ``group/topic`` names of the workers to stop (their topic is gone)."""

    started: list[tuple[GroupSettings, TopicSettings]]
    gone: list[str]


class PatternWatch:
    """The pattern entries of every group and the topics each claims."""

    def __init__(self, groups: list[tuple[str, GroupSettings]]) -> None:
        self._groups = groups
        self.entries: list[PatternEntry] = [
            PatternEntry(gid, k, t) for gid, g in groups
            for k, t in enumerate(g.topics) if t.topic_pattern is not None]

    def __bool__(self) -> bool:
        return bool(self.entries)

    def status(self, group: str) -> list[dict[str, object]]:
        return [e.status() for e in self.entries if e.group == group]

    def update(self, cluster: set[str]) -> Changes:
        """Match the cluster's topics; what to start and what to stop."""
        started: list[tuple[GroupSettings, TopicSettings]] = []
        gone: list[str] = []
        for gid, group in self._groups:
            fixed = {t.topic for t in group.topics if t.topic_pattern is None}
            dead = {f.dead_letter_topic for f in (group.failure, *(
                t.failure for t in group.topics if t.failure is not None))
                if f.dead_letter_topic is not None}
            claimed: set[str] = set()
            for entry in (e for e in self.entries if e.group == gid):
                pattern = entry.settings.pattern
                assert pattern is not None  # noqa: S101 - pattern entries only
                matched = sorted(
                    t for t in cluster if pattern.fullmatch(t) and t not in fixed
                    and t not in claimed and t not in dead and not t.startswith("__"))
                claimed.update(matched)
                for topic in [t for t in entry.topics if t not in matched]:
                    del entry.topics[topic]
                    entry.destinations = {d: t for d, t in entry.destinations.items()
                                          if t != topic}
                    logger.warning("%s/%s: the topic is gone from the cluster (pattern %r): "
                                   "stopping its worker", gid, topic, entry.pattern)
                    gone.append(f"{gid}/{topic}")
                for topic in [t for t in entry.problems if t not in matched]:
                    del entry.problems[topic]
                for topic in matched:
                    if topic in entry.topics or topic in entry.problems:
                        continue
                    settings = self._claim(entry, topic)
                    if settings is not None:
                        started.append((group, settings))
        return Changes(started, gone)

    def _claim(self, entry: PatternEntry, topic: str) -> TopicSettings | None:
        try:
            settings = entry.settings.for_topic(topic)
        except ValueError as exc:
            why = " ".join(str(exc).split())
            return self._refuse(entry, topic, f"its entry is refused: {why}")
        # The destinations named after the topic ({topic} in them), not the shared ones.
        places = [new.settings.destination() for new, old in zip(
            settings.named_sinks(), entry.settings.named_sinks(), strict=True)
            if new.settings.destination() != old.settings.destination()]
        for place in places:
            other = entry.destinations.get(place)
            if other is not None:
                return self._refuse(entry, topic, f"topics {other!r} and {topic!r} both map "
                                    f"to {place}; rename one, or give it an entry of "
                                    "its own")
        for place in places:
            entry.destinations[place] = topic
        entry.topics[topic] = settings
        logger.info("%s/%s: topic matches pattern %r: starting its worker", entry.group,
                    topic, entry.pattern)
        return settings

    @staticmethod
    def _refuse(entry: PatternEntry, topic: str, why: str) -> None:
        entry.problems[topic] = why
        logger.error("%s/%s: matches pattern %r but is not started: %s", entry.group, topic,
                     entry.pattern, why)
        return None


def pattern_entry(group: GroupSettings, topic: str) -> TopicSettings | None:
    """The entry the first ``topic_pattern`` of ``group`` matching ``topic`` makes for it
    (for the tools that meet a topic outside the running process: ``kstage dlq
    replay``); None when none matches, or the name makes no valid entry."""
    if topic.startswith("__"):
        return None
    for entry in group.topics:
        if entry.pattern is not None and entry.pattern.fullmatch(topic):
            try:
                return entry.for_topic(topic)
            except ValueError:
                return None
    return None


__all__ = ["Changes", "PatternEntry", "PatternWatch", "pattern_entry"]
