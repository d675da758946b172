"""``kstage processors new NAME --dir DIR``: scaffold an installable processor plugin.

The generated project (``DIR/NAME/``) is a complete third-party plugin that passes its
own tests once installed::

    pyproject.toml          distribution kstage-NAME, entry point NAME in kstage.processors
    README.md               install, configure, ship
    NAME/__init__.py
    NAME/processor.py       NAMEProcessor (CamelCase): JSON object -> row, with options,
                            declared table/columns/key, PoisonMessage on bad input
    tests/test_processor.py tests with processors.testing and service.testing (no broker)

The templates are the ``*.tmpl`` files under ``service/dev/templates/plugin/`` (package data),
filled in with :class:`string.Template` (``${name}``, ``${cls}``, ``${dist}``,
``${table}``); the ``package/`` directory becomes ``NAME/``.
"""

from __future__ import annotations

import keyword
import logging
import re
import sys
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from importlib.util import find_spec
from pathlib import Path
from string import Template

from processors import registry
from service.errors import ServiceError

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
# Top-level packages of kstage itself: a plugin module with one of these names would
# shadow kstage's own code once installed.
_RESERVED = frozenset({"actors", "processors", "service", "settings", "tests", "kstage"})
_TEMPLATE_SUFFIX = ".tmpl"


class ScaffoldError(ServiceError):
    """The plugin name is not usable, or the target directory is not empty."""


@dataclass(frozen=True, slots=True)
class PluginNames:
    """The names a plugin called ``name`` gets.

    Attributes:
        name: entry-point name and Python package (``acme_rows``).
        cls: processor class (``AcmeRowsProcessor``).
        dist: distribution name (``kstage-acme-rows``).
        table: default staging table (``stg_acme_rows``).
    """

    name: str
    cls: str
    dist: str
    table: str

    @classmethod
    def of(cls, name: str) -> PluginNames:
        camel = "".join(part.capitalize() for part in name.split("_"))
        return cls(name=name, cls=f"{camel}Processor",
                   dist="kstage-" + name.replace("_", "-"), table=f"stg_{name}")


def check_name(name: str) -> PluginNames:
    """Validate ``name`` as a plugin name; raise ScaffoldError saying why it is not one."""
    if not _NAME.match(name):
        raise ScaffoldError(
            f"invalid processor name {name!r}: use lowercase letters, digits and underscores, "
            "starting with a letter (at most 63 characters), e.g. acme_rows")
    if keyword.iskeyword(name) or name in _RESERVED or name in sys.stdlib_module_names:
        raise ScaffoldError(f"invalid processor name {name!r}: it is a Python keyword or the "
                            "name of a standard or kstage module; choose another")
    if name in registry.available():
        raise ScaffoldError(f"a processor named {name!r} is already installed "
                            f"({registry.available()[name]}); choose another name")
    if find_spec(name) is not None:
        raise ScaffoldError(f"a module named {name!r} is already importable; the plugin "
                            "package would clash with it: choose another name")
    return PluginNames.of(name)


def _templates() -> Traversable:
    return resources.files("service.dev") / "templates" / "plugin"


def _walk(node: Traversable, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...],
                                                                       Traversable]]:
    found: list[tuple[tuple[str, ...], Traversable]] = []
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        if child.is_dir():
            found += _walk(child, (*prefix, child.name))
        elif child.name.endswith(_TEMPLATE_SUFFIX):
            found.append(((*prefix, child.name[: -len(_TEMPLATE_SUFFIX)]), child))
    return found


def scaffold(name: str, directory: str | Path) -> list[Path]:
    """Generate the plugin project ``directory/name``; return the files written.

    Raises:
        ScaffoldError: a bad name, or ``directory/name`` exists and is not empty (nothing
            is overwritten).
    """
    names = check_name(name)
    target = Path(directory) / name
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ScaffoldError(f"{target} already exists and is not empty; nothing was written")
    fields = {"name": names.name, "cls": names.cls, "dist": names.dist, "table": names.table}
    written: list[Path] = []
    for parts, template in _walk(_templates()):
        rel = [names.name if p == "package" else p for p in parts]
        path = target.joinpath(*rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(template.read_text(encoding="utf-8")).substitute(fields),
                        encoding="utf-8")
        written.append(path)
    logger.info("scaffolded processor plugin %s in %s", names.name, target)
    return written
