"""Read the configuration file: YAML composed with the safe loader, ``${VAR}`` references
expanded scalar by scalar, and the line of every key and item (steps 1-3 of
:func:`settings.loader.load_settings`, whose docstring states the rules)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from settings.errors import ConfigFileError, UndefinedVariableError
from settings.secrets import redact, secret_name

PathKey = str | int
ConfigPath = tuple[PathKey, ...]
"""Where a setting is: ``("groups", 0, "topics", 1, "processor")``."""

_REF = re.compile(
    r"\$(?:(?P<escape>\$)"
    r"|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<sep>:-(?P<default>[^}]*))?\}"
    r"|(?P<bad>\{))"
)
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"
_NULL_TAG = "tag:yaml.org,2002:null"
MAX_VALUES = 100_000
"""Keys and items a file may expand to (aliases repeat their anchor's content): a
configuration is far smaller; ten nested aliases of ten items would be 10^10 (a "billion
laughs" file would hang the loader and every walk of the data after it)."""



class _Loader(yaml.SafeLoader):
    """Safe loader that remembers which scalars were plain and untagged."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.implicit_plain: set[int] = set()

    def compose_scalar_node(self, anchor: Any) -> ScalarNode:
        event = self.peek_event()  # type: ignore[no-untyped-call]  # untyped in types-PyYAML
        node = super().compose_scalar_node(anchor)
        if getattr(event, "implicit", (False, False))[0]:
            self.implicit_plain.add(id(node))
        return node


def read_yaml(
    path: str | os.PathLike[str], source: str, environ: Mapping[str, str],
    found: Substituted | None = None,
) -> tuple[dict[str, Any], dict[ConfigPath, int]]:
    """The file's data and the line of every key and item; ``found`` (if given) learns
    the values ``${...}`` references put in."""
    found = Substituted() if found is None else found
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigFileError(f"{source}: cannot read configuration file: {reason}") from exc

    try:
        loader = _Loader(text)  # reads the text: a control character is a ReaderError
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"{source}: invalid YAML: {exc}") from None
    try:
        root = loader.get_single_node()
        if root is None or (
            isinstance(root, ScalarNode) and root.tag == _NULL_TAG and not root.value
        ):
            return {}, {}
        if not isinstance(root, MappingNode):
            kind = "list" if isinstance(root, SequenceNode) else "scalar"
            raise ConfigFileError(
                f"{source}:{root.start_mark.line + 1}: the top level must be a mapping "
                f"of settings, not a {kind}"
            )
        _expand_tree(root, loader, source, environ, found)
        lines: dict[ConfigPath, int] = {(): root.start_mark.line + 1}
        _record_lines(root, (), lines, source, set())
        data: dict[str, Any] = loader.construct_document(root)  # a MappingNode gives a dict
        if not all(isinstance(key, str) for key in data):  # e.g. `1: x`, or a lone `?`
            key_node = next((k for k, _ in root.value if k.tag not in (_STR_TAG, _MERGE_TAG)),
                            root)
            raise ConfigFileError(f"{source}:{key_node.start_mark.line + 1}: a top-level "
                                  "key is not a setting name (not a string)")
    except yaml.MarkedYAMLError as exc:
        # a substituted value may be quoted (``!!int ${X}``): never echo one
        raise ConfigFileError(redact(_yaml_problem(source, exc), found.values)) from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise ConfigFileError(redact(f"{source}: invalid YAML: {exc}", found.values)) from None
    finally:
        loader.dispose()
    return data, lines


def _yaml_problem(source: str, exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
    problem = exc.problem or exc.context or "invalid YAML"
    if exc.context and exc.problem and exc.context_mark is not None:
        problem = f"{problem} ({exc.context} at line {exc.context_mark.line + 1})"
    return f"{where}: {problem}"


def _expand_tree(
    root: Node, loader: _Loader, source: str, environ: Mapping[str, str], found: Substituted
) -> None:
    """Expand ``${...}`` in every scalar of the tree, once per node (aliases share nodes),
    and keep every scalar under a secret name a string (:mod:`settings.secrets`); the
    substituted values go to ``found``."""
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, secret = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, MappingNode):
            for key_node, value_node in node.value:
                stack.append((key_node, secret))
                stack.append((value_node, secret or (
                    isinstance(key_node, ScalarNode) and secret_name(key_node.value))))
        elif isinstance(node, SequenceNode):
            stack.extend((item, secret) for item in node.value)
        elif isinstance(node, ScalarNode):
            expanded = "$" in node.value
            if expanded:
                _expand_scalar(node, loader, source, environ, found, secret)
            if secret and (expanded or node.tag != _NULL_TAG):
                # a password of digits is text, not an int: whatever its YAML type, a
                # secret stays the text written (only a literal empty or ~ means unset)
                node.tag = _STR_TAG


class Substituted:
    """The values ``${...}`` references put into the file: all of them, and the secret
    ones (of a variable named like a secret, or put under a secret setting)."""

    def __init__(self) -> None:
        self.values: set[str] = set()
        self.secrets: set[str] = set()


def _expand_scalar(
    node: ScalarNode, loader: _Loader, source: str, environ: Mapping[str, str],
    found: Substituted, secret: bool,
) -> None:
    raw: str = node.value
    where = f"{source}:{node.start_mark.line + 1}"
    node.value = _expand(raw, environ, where, found, secret)
    if id(node) not in loader.implicit_plain:
        return  # quoted or explicitly tagged: the tag stays as written
    whole = _REF.fullmatch(raw)
    if whole is not None and whole["name"] is not None:
        node.tag = loader.resolve(  # type: ignore[no-untyped-call]  # untyped in types-PyYAML
            ScalarNode, node.value, (True, False)
        )
    else:
        node.tag = _STR_TAG


def _expand(text: str, environ: Mapping[str, str], where: str,
            found: Substituted | None = None, secret: bool = False) -> str:
    def substitute(match: re.Match[str]) -> str:
        value = lookup(match)
        if found is not None and match["name"] is not None:
            found.values.add(value)
            if secret or secret_name(match["name"]):
                found.secrets.add(value)
        return value

    def lookup(match: re.Match[str]) -> str:
        if match["escape"] is not None:
            return "$"
        if match["bad"] is not None:
            raise ConfigFileError(
                f"{where}: malformed variable reference (write ${{NAME}} or "
                "${NAME:-default}, or $$ for a literal $)"
            )
        name = match["name"]
        value = environ.get(name)
        if match["sep"] is not None:
            return value if value else match["default"]
        if value is None:
            raise UndefinedVariableError(
                f"{where}: environment variable {name} is not set "
                f"(write ${{{name}:-default}} to give a default)"
            )
        return value

    return _REF.sub(substitute, text)


def _record_lines(
    node: Node,
    path: ConfigPath,
    lines: dict[ConfigPath, int],
    source: str,
    active: set[int],
    merged: bool = False,
) -> None:
    """Record the 1-based line of every key and item below ``node`` under its path."""
    if id(node) in active:  # recursive alias
        return
    if len(lines) > MAX_VALUES:
        raise ConfigFileError(
            f"{source}:{node.start_mark.line + 1}: the file expands to more than "
            f"{MAX_VALUES} keys and items through its aliases (*name); write them out")
    active.add(id(node))
    if isinstance(node, MappingNode):
        merges: list[Node] = []
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merges.extend(
                    value_node.value if isinstance(value_node, SequenceNode) else [value_node]
                )
            elif isinstance(key_node, ScalarNode):
                key: str = key_node.value
                if merged and (*path, key) in lines:
                    continue  # keys written in the mapping win over merged ones
                if key in seen:
                    mark = key_node.start_mark
                    raise ConfigFileError(
                        f"{source}:{mark.line + 1}:{mark.column + 1}: duplicate key {key!r}"
                    )
                seen.add(key)
                lines[(*path, key)] = key_node.start_mark.line + 1
                _record_lines(value_node, (*path, key), lines, source, active)
        for merge in merges:
            _record_lines(merge, path, lines, source, active, merged=True)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            _record_lines(item, (*path, index), lines, source, active)
    active.discard(id(node))
