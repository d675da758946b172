"""The one loader of kstage's entry-point groups: processors (``kstage.processors``), sink
types (``kstage.sinks``) and token providers (``kstage.token_providers``).

Built-ins are registered like plugins, so there is one path. A name maps to one target
(``module:Class``); a name that installed distributions register with different targets
is refused wherever it is used (:class:`DuplicatePlugin`), never resolved by whichever
distribution the metadata happens to list last. Nothing is imported until a name is
:func:`load`-ed.
"""

from __future__ import annotations

import sys
from importlib.metadata import EntryPoint, EntryPoints, entry_points
from typing import Protocol


class DuplicatePlugin(LookupError):
    """A name registered more than once, with different targets."""


def registered(group: str) -> dict[str, list[EntryPoint]]:
    """Every name of entry-point ``group`` and its entry points (more than one target:
    a duplicate), names sorted."""
    found: dict[str, list[EntryPoint]] = {}
    for ep in _installed().select(group=group):
        found.setdefault(ep.name, []).append(ep)
    return dict(sorted(found.items()))


class _Installed(Protocol):
    """What :func:`importlib.metadata.entry_points` returns (its type depends on the
    Python version): the entry points of a group can be selected from it."""

    def select(self, *, group: str) -> EntryPoints: ...


_scan: tuple[tuple[str, ...], _Installed] | None = None


def _installed() -> _Installed:
    """Every installed entry point, of every group: the distributions are read once per
    ``sys.path`` (each read opens every distribution's metadata, ~20 ms here; a command
    asks for three groups), again when ``sys.path`` changed."""
    global _scan
    path = tuple(sys.path)
    if _scan is None or _scan[0] != path:
        _scan = (path, entry_points())
    return _scan[1]


def entry_point(group: str, name: str, kind: str) -> EntryPoint | None:
    """The one entry point of ``name`` in ``group`` (None: not installed).

    Raises:
        DuplicatePlugin: ``name`` has several targets (``kind`` names it in the message,
            e.g. "sink type").
    """
    return pick(registered(group).get(name), name, kind)


def pick(eps: list[EntryPoint] | None, name: str, kind: str) -> EntryPoint | None:
    """The one of ``eps`` (``name``'s, from :func:`registered`); see :func:`entry_point`."""
    if not eps:
        return None
    targets = sorted({ep.value for ep in eps})
    if len(targets) > 1:
        raise DuplicatePlugin(f"{kind} {name!r} is registered more than once: "
                              f"{', '.join(targets)}")
    return eps[0]


__all__ = ["DuplicatePlugin", "entry_point", "pick", "registered"]
