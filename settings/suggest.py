""""Did you mean" for the near misses of a configuration: a key the model does not know,
a value outside a fixed set, an unknown processor or sink type.

:func:`did_you_mean` is the one wording (problems end with ``; did you mean 'x'?``);
:func:`keys_at` finds the keys the settings model allows where a typo'd key stands, so
``kstage validate`` can say which one was meant.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

_QUOTED = re.compile(r"'([^']*)'")


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` when ``word`` is close to one of ``choices`` (and is not
    one of them); else ``""``."""
    if not isinstance(word, str):
        return ""
    options = [c for c in choices if c != word]
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def quoted(text: str) -> list[str]:
    """The single-quoted words of ``text`` (pydantic's ``Input should be 'a', 'b' or 'c'``)."""
    return _QUOTED.findall(text)


def _members(tp: Any) -> list[Any]:
    """``tp`` without ``Annotated``, ``Optional`` and unions: the types it can be."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _members(get_args(tp)[0])
    if origin is Union or type(tp).__name__ == "UnionType":
        return [m for arg in get_args(tp) for m in _members(arg)]
    return [tp]


def _children(tp: Any, part: str | int) -> list[Any]:
    out: list[Any] = []
    for member in _members(tp):
        origin = get_origin(member)
        if isinstance(part, int):
            if origin in (list, tuple, Sequence) and get_args(member):
                out += _members(get_args(member)[0])
        elif isinstance(member, type) and issubclass(member, BaseModel):
            for name, field in member.model_fields.items():
                if part in (name, field.alias):
                    out += _members(field.annotation)
        elif origin is dict and get_args(member):
            out += _members(get_args(member)[1])
    return out


def keys_at(root: type[BaseModel], path: Sequence[str | int], data: Any) -> set[str]:
    """The keys the model ``root`` allows in the mapping at ``path`` of ``data`` (a sink
    mapping's: those of its ``type``'s settings model)."""
    # imported here: settings.models words its own problems with did_you_mean
    from settings.models import SinkSettings, sink_settings_model

    types: list[Any] = [root]
    node: Any = data
    for part in path:
        types = [child for tp in types for child in _children(tp, part)]
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            node = None
        refined = []
        for tp in types:
            if tp is SinkSettings and isinstance(node, dict):
                name = node.get("type", "null")
                tp = (sink_settings_model(name) if isinstance(name, str) else None) or tp
            refined.append(tp)
        types = refined
    keys: set[str] = set()
    for tp in types:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            for name, field in tp.model_fields.items():
                keys.add(field.alias or name)
    return keys


__all__ = ["did_you_mean", "keys_at", "quoted"]
