"""The keys the settings model allows where a key stands in a configuration, so
``kstage validate`` can say which one a typo'd key meant (:func:`keys_at`; the wording is
:func:`settings.suggest.did_you_mean`'s)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

from settings.sink_types import SinkSettings, sink_settings_model


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


__all__ = ["keys_at"]
