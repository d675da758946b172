"""Finding processors through the ``kstage.processors`` entry-point group.

Built-ins are registered the same way as plugins (see pyproject.toml), so there is one
path. Classes are imported lazily, only for the names a configuration uses.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from importlib.metadata import EntryPoint
from typing import Any

from processors.base import Processor
from processors.errors import RegistryError

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "kstage.processors"


def for_options(cls: type[Processor], options: Mapping[str, Any] | None) -> type[Processor]:
    """The class describing a topic's rows (:meth:`Processor.configured
    <processors.base.Processor.configured>`); ``cls`` when the options are refused (what
    ``validate`` and ``run`` report at the topic's ``options``, before anything starts)."""
    try:
        return cls.configured(options)
    except Exception:  # noqa: BLE001 - reported as the topic's options problem
        return cls


def _entry_points() -> dict[str, list[EntryPoint]]:
    # imported here: importing `processors` must not import `settings`
    from settings.plugins import registered

    return registered(ENTRY_POINT_GROUP)


def available() -> dict[str, str]:
    """Installed processor names mapped to their ``module:Class`` target."""
    return {name: eps[0].value for name, eps in sorted(_entry_points().items())}


def load(name: str) -> type[Processor]:
    """Import the processor class registered as ``name``.

    Raises:
        RegistryError: the name is unknown, registered twice, or not a Processor.
    """
    from settings.plugins import DuplicatePlugin, pick  # see _entry_points

    found = _entry_points()
    try:
        ep = pick(found.get(name), name, "processor")
    except DuplicatePlugin as exc:
        raise RegistryError(str(exc)) from None
    if ep is None:
        known = ", ".join(found) or "none"
        raise RegistryError(f"unknown processor {name!r} (installed: {known})")
    try:
        cls = ep.load()
    except Exception as exc:  # any import failure is a registry problem
        raise RegistryError(f"processor {name!r} ({ep.value}) failed to import: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Processor)):
        raise RegistryError(f"processor {name!r} ({ep.value}) is not a Processor subclass")
    return cls


def check_topics(claims: Iterable[tuple[str, str, str]]) -> None:
    """Fail when one (group, topic) is claimed by two processors.

    Args:
        claims: (group_id, topic, processor name) triples.
    """
    owner: dict[tuple[str, str], str] = {}
    for group, topic, processor in claims:
        prev = owner.setdefault((group, topic), processor)
        if prev != processor:
            raise RegistryError(
                f"topic {topic!r} in group {group!r} is claimed by two processors: "
                f"{prev!r} and {processor!r}"
            )
