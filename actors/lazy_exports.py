"""Package names imported on first use (PEP 562), so that importing one module of a
package (``actors.preflight``, ``actors.sinks.checks``: what ``kstage validate`` loads)
does not load every module the package exports."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def exports(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """The ``__getattr__`` of ``package``: each name of ``homes`` imported from its module
    (``homes[name]``) when first asked for, then bound in the package. A home
    ``module:attribute`` exports the module's ``attribute`` under the package's name."""

    def getattr_(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = home.partition(":")
        value = getattr(importlib.import_module(module), attribute or name)
        setattr(sys.modules[package], name, value)
        return value

    return getattr_


__all__ = ["exports"]
