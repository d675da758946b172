"""The process shell of kstage: CLI, lifecycle, signals, logging, embedded broker.

``EmbeddedBroker`` is imported on first use (PEP 562): ``kstage --help`` and ``kstage
validate`` load no broker code."""

from __future__ import annotations

import typing as _typing

from service.errors import BrokerError, ServiceError

if _typing.TYPE_CHECKING:
    from service.broker import EmbeddedBroker


def __getattr__(name: str) -> object:
    if name == "EmbeddedBroker":
        from service.broker import EmbeddedBroker

        globals()[name] = EmbeddedBroker  # bound: asked once
        return EmbeddedBroker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BrokerError", "EmbeddedBroker", "ServiceError"]
