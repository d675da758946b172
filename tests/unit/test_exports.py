"""Package surfaces: ``__all__`` lists exactly the public names, and light imports stay light."""

from __future__ import annotations
import __future__

import importlib
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["actors", "actors.codecs.schema_registry", "actors.deadletters", "actors.sinks.http",
            "actors.worker", "processors", "settings", "service", "service.ops",
            "service.ops.dlq", "service.dev"]


def public_names(package: types.ModuleType) -> set[str]:
    """Names bound at package level that are public: not ``_x``, not a submodule, and not
    the ``annotations`` feature that ``from __future__ import annotations`` binds."""
    prefix = package.__name__ + "."
    return {
        name
        for name, value in vars(package).items()
        if not name.startswith("_")
        and not (isinstance(value, types.ModuleType) and value.__name__.startswith(prefix))
        and value is not __future__.annotations
    }


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_complete_and_exact(name: str) -> None:
    package = importlib.import_module(name)
    exported = list(package.__all__)
    for item in exported:  # a package that imports its names on first use binds them now
        getattr(package, item, None)
    assert len(exported) == len(set(exported)), f"{name}.__all__ has duplicates"
    assert set(exported) == public_names(package)
    for item in exported:
        assert hasattr(package, item), f"{name}.__all__ names missing {item!r}"


@pytest.mark.parametrize("name", PACKAGES)
def test_star_import_gives_exactly_all(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {name} import *", namespace)  # noqa: S102 - fixed, trusted code
    namespace.pop("__builtins__", None)
    assert set(namespace) == set(importlib.import_module(name).__all__)


def test_processors_and_settings_do_not_import_pyspark() -> None:
    code = "import processors, settings, sys; assert 'pyspark' not in sys.modules"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # fails too if either package imported pyspark while it is not installed
    assert proc.returncode == 0, proc.stderr
