"""Load the kstage YAML configuration file into a validated :class:`Settings`.

This module is responsible for turning one YAML file plus an environment mapping into a
``Settings`` object, and for translating every failure on the way into a
:class:`~settings.errors.SettingsError` that names the file, the line and the setting.

Steps of :func:`load_settings` (1-3 in :mod:`settings.yaml_file`):

1. The file is read and composed with PyYAML's safe loader into a node tree (an empty
   file is an empty mapping; any other top level than a mapping is an error).
2. Variable references are expanded on the node tree, scalar by scalar, so the line of
   every scalar is known and YAML syntax inside a variable's value is never re-parsed:

   * ``${VAR}`` is the value of ``VAR``; an unset ``VAR`` is an
     :class:`~settings.errors.UndefinedVariableError` naming the variable, file and line.
   * ``${VAR:-default}`` is the value of ``VAR``, or ``default`` when ``VAR`` is unset or
     empty (the default is taken literally; it is not expanded again).
   * ``$$`` is a literal ``$``; a ``$`` followed by anything else than ``{`` or ``$`` is
     kept as is; a malformed ``${...`` is a :class:`~settings.errors.ConfigFileError`.
   * References work in every scalar, keys included, several per scalar
     (``url: http://${HOST:-localhost}:${PORT:-8081}``).

   **Typing rule.** An expanded scalar stays a string, except when the whole scalar is a
   single ``${...}`` reference written plain (unquoted, untagged): then the expanded text
   is resolved with YAML's implicit scalar rules, as if it had been written there.  So
   ``max_poll_records: ${N:-500}`` gives the int ``500``, ``verify: ${V:-true}`` the bool
   ``True``, and an empty expansion gives ``null``; write ``"${N:-500}"`` (quoted) or
   ``!!str ${N}`` to keep a string.  Inside a flow collection (``{...}``, ``[...]``) YAML
   does not allow ``{`` in a plain scalar, so quote the reference there:
   ``supervisor: {shutdown_grace_s: "${GRACE:-30}"}`` (pydantic still reads ``"30"`` as
   a number for numeric settings). **Secrets are text**: every scalar under a setting
   named like a secret (``password``, ``bearer_token``, ``sasl.jaas.config``, an
   ``X-Api-Key`` header ..., see :mod:`settings.secrets`) is a string whatever its YAML
   type, written literally or substituted (``password: ${PG_PASSWORD}`` of digits is
   those digits as text, never an int); only a literal empty value or ``~`` means unset.
   Numbers in a ``KSTAGE_*`` variable's JSON under such a name become their text too.
3. The line of every mapping key and sequence item is recorded under its path, e.g.
   ``("groups", 0, "topics", 1, "processor")``, so validation errors can cite lines.
4. ``KSTAGE_*`` variables of the same mapping (``KSTAGE_NAME``,
   ``KSTAGE_KAFKA__BOOTSTRAP``, ``KSTAGE_SUPERVISOR__SHUTDOWN_GRACE_S`` ...; names match
   whatever their case) are read with pydantic-settings' own
   :class:`~pydantic_settings.EnvSettingsSource` (imported only when there is one) and
   win over the file, merged key by key; ``os.environ`` is never modified and, when a
   mapping is given, never read.
5. Checks the caller passes (``checks``: what ``run`` refuses at start beyond the model,
   e.g. processor options, which need the processor registry this package does not
   import) run on the validated settings and give (path, message) pairs, located the
   same way. When the model refuses the file, the caller's ``name_checks`` (e.g. unknown
   processor names) still run on the raw mapping, so one pass names every problem.
6. Validation reports every problem at once in a
   :class:`~settings.errors.ConfigValidationError`, one line per problem such as
   ``groups[0].topics[1].processor (line 17): Field required``, or ``(from environment)``
   when the value came from a ``KSTAGE_*`` variable; a near miss (a typo'd key, a value
   outside a fixed set) ends with ``; did you mean 'x'?`` (:mod:`settings.suggest`).

Secrets: problem lines never contain input values (pydantic's messages for the built-in
checks do not echo the input; only the name checks of ``models.py`` quote their
non-secret value), and the chained pydantic error is rebuilt with its inputs hidden, so a
password taken from ``${SR_PASSWORD}`` cannot leak through an error or a traceback. As a
second guard, problem and warning lines are redacted of every secret value (values under
secret names, and substitutions of variables named like secrets, such as ``DB_PASSWORD``);
a YAML error after substitution is redacted of every substituted value.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import ValidationError
from pydantic_core import InitErrorDetails

from settings.errors import ConfigValidationError
from settings.model_keys import keys_at
from settings.models import ENV_NESTED_DELIMITER, ENV_PREFIX, Settings
from settings.secrets import redact, secret_name, secret_values
from settings.suggest import did_you_mean, quoted
from settings.yaml_file import MAX_VALUES, ConfigPath, PathKey, Substituted, read_yaml

logger = logging.getLogger(__name__)

Check = Callable[[Settings], Iterable[tuple[ConfigPath, str]]]
"""A check of valid settings: yields (path of the offending key, why) per problem."""
NameCheck = Callable[[Mapping[str, Any]], Iterable[tuple[ConfigPath, str]]]
"""A check of the raw mapping, run when the model refused it (names, e.g. processors)."""

# pydantic loc parts that name validators or union members rather than settings.
_INTERNAL_LOC = re.compile(r"[\[\]()<>,]|^(function|lax-or-strict|json-or-python)")
_PLAIN_KEY = re.compile(r"^[^\s.\[\]'\"]+$")  # printed as .key, others as ['key']
_MISSING = object()


def load_settings(
    path: str | os.PathLike[str], environ: Mapping[str, str] | None = None, *,
    warnings: list[str] | None = None, checks: Iterable[Check] = (),
    name_checks: Iterable[NameCheck] = (),
) -> Settings:
    """Read, expand and validate the configuration file at ``path``.

    ``environ`` (default ``os.environ``) supplies both the ``${VAR}`` values and the
    ``KSTAGE_*`` overrides. Raises a :class:`~settings.errors.SettingsError` subclass.
    ``warnings``, if given, receives one line per valid but risky setting
    (:meth:`Settings.risks`), naming file, key and line like a problem. ``checks`` run
    on the validated settings; their problems are raised like validation problems.
    ``name_checks`` run on the raw mapping when the model refuses it, their problems
    listed with the model's (those at a path the model already names are left out).
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    source = str(path)
    substituted = Substituted()
    file_data, lines = read_yaml(path, source, env, substituted)
    return _validated(source, file_data, lines, env, substituted, warnings=warnings,
                      checks=checks, name_checks=name_checks)


def settings_from(
    data: Mapping[str, Any], environ: Mapping[str, str] | None = None, *,
    warnings: list[str] | None = None, checks: Iterable[Check] = (),
    name_checks: Iterable[NameCheck] = (), source: str = "<settings>",
) -> Settings:
    """Validate ``data`` (the mapping a configuration file holds) as
    :func:`load_settings` validates a file: the same model, checks and problem lines
    (named by ``source``, without line numbers; no ``${VAR}`` expansion). ``environ``
    supplies ``KSTAGE_*`` overrides; default: none (a test's settings do not depend on
    the environment it runs in)."""
    return _validated(source, dict(data), {}, {} if environ is None else environ,
                      Substituted(), warnings=warnings, checks=checks,
                      name_checks=name_checks)


def _validated(
    source: str, file_data: dict[str, Any], lines: dict[ConfigPath, int],
    env: Mapping[str, str], substituted: Substituted, *, warnings: list[str] | None,
    checks: Iterable[Check], name_checks: Iterable[NameCheck],
) -> Settings:
    """The settings of ``file_data`` (a file's mapping, its ``lines``) with the
    ``KSTAGE_*`` overrides of ``env``; see :func:`load_settings`."""
    env_data = _environment(source, env)
    try:
        settings = Settings.model_validate(_deep_merge(file_data, env_data))
    except ValidationError as exc:
        merged = _deep_merge(file_data, env_data)
        hidden = secret_values(merged) | substituted.secrets
        errors = exc.errors()
        found_at = [(_clean_loc(tuple(err["loc"]), merged),
                     redact(_problem(err, merged, lines, env_data), hidden)) for err in errors]
        named = {path for path, _ in found_at}
        found_at += [(tuple(path), redact(_located(tuple(path), why, lines, env_data), hidden))
                     for check in name_checks for path, why in check(merged)
                     if tuple(path) not in named]
        found_at.sort(key=lambda item: _line_of(item[0], lines) or 0)  # in file order
        raise ConfigValidationError(source, [problem for _, problem in found_at]) \
            from _without_inputs(exc)
    found = [(tuple(path), why) for check in checks for path, why in check(settings)]
    if found:
        merged = _deep_merge(file_data, env_data)
        hidden = secret_values(merged) | substituted.secrets
        raise ConfigValidationError(source, [
            redact(_located(_clean_loc(path, merged), why, lines, env_data), hidden)
            for path, why in found])
    if warnings is not None:
        hidden = secret_values(settings) | substituted.secrets
        for key, why in settings.risks():
            where = (" (from environment)" if _from_environment(key, env_data)
                     else f" (line {lines[key]})" if key in lines else "")
            warnings.append(redact(f"{source}: {_dotted(key)}{where}: {why}", hidden))
    logger.debug(
        "loaded %s: %d group(s), %d top-level environment override(s)",
        source,
        len(settings.groups),
        len(env_data),
    )
    return settings



def _environment(source: str, env: Mapping[str, str]) -> dict[str, Any]:
    """The settings the ``KSTAGE_*`` variables of ``env`` hold, as a nested mapping
    (secrets as text); ``{}`` without any, pydantic-settings not even imported."""
    prefix = ENV_PREFIX.lower()
    if not any(name.lower().startswith(prefix) for name in env):
        return {}
    from pydantic_settings import EnvSettingsSource
    from pydantic_settings import SettingsError as PydanticSettingsError

    class MappingEnvSource(EnvSettingsSource):
        """pydantic-settings' env source, reading ``env`` instead of ``os.environ``."""

        def _load_env_vars(self) -> Mapping[str, str | None]:
            return {name.lower(): value for name, value in env.items()}

    try:
        reader = MappingEnvSource(Settings,  # type: ignore[arg-type]  # a plain model
                                  case_sensitive=False, env_prefix=ENV_PREFIX,
                                  env_nested_delimiter=ENV_NESTED_DELIMITER)
        return dict(_secrets_as_text(reader(), False))
    except PydanticSettingsError as exc:
        reason = str(exc).split(" from source ")[0]  # drop our source class's name
        raise ConfigValidationError(source, [f"{reason} (from environment)"]) from None
    except RecursionError:  # a KSTAGE_* variable of JSON nested beyond the decoder's limit
        raise ConfigValidationError(source, [
            "a KSTAGE_* variable holds JSON nested too deeply (from environment)"]) from None


def _secrets_as_text(data: Any, secret: bool) -> Any:
    """``data`` with every number or bool under a secret name turned into its text (a
    ``KSTAGE_*`` variable holding JSON may type a password of digits as a number)."""
    if isinstance(data, dict):
        return {k: _secrets_as_text(v, secret or secret_name(k)) for k, v in data.items()}
    if isinstance(data, list):
        return [_secrets_as_text(item, secret) for item in data]
    if secret and isinstance(data, bool):
        return "true" if data else "false"
    if secret and isinstance(data, int | float):
        return str(data)
    return data


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Merge like pydantic-settings: mappings merge key by key, anything else replaces."""
    merged = dict(base)
    for key, value in override.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            merged[key] = _deep_merge(current, value)
        else:
            merged[key] = value
    return merged


def _problem(
    err: Any, data: dict[str, Any], lines: dict[ConfigPath, int], env_data: dict[str, Any]
) -> str:
    path = _clean_loc(tuple(err["loc"]), data)
    message: str = err["msg"]
    if err["type"] == "value_error":
        message = message.removeprefix("Value error, ")
    elif err["type"] == "extra_forbidden" and path and isinstance(path[-1], str):
        message += did_you_mean(path[-1], keys_at(Settings, path[:-1], data))
    elif err["type"] in ("enum", "literal_error"):
        message += did_you_mean(_value_at(path, data),
                                quoted(str((err.get("ctx") or {}).get("expected", ""))))
    return _located(path, message, lines, env_data)


def _value_at(path: ConfigPath, data: Any) -> Any:
    """The value at ``path`` of ``data`` (None: not there)."""
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _located(
    path: ConfigPath, message: str, lines: dict[ConfigPath, int], env_data: dict[str, Any]
) -> str:
    """``key (line N): message``, or ``key (from environment): message``."""
    if _from_environment(path, env_data):
        return f"{_dotted(path)} (from environment): {message}"
    line = _line_of(path, lines)
    where = f" (line {line})" if line is not None else ""
    return f"{_dotted(path)}{where}: {message}"


def _clean_loc(loc: tuple[Any, ...], data: Any) -> ConfigPath:
    """Keep the loc parts that name settings; drop validator and union-member parts."""
    path: list[PathKey] = []
    current: Any = data
    for part in loc:
        if isinstance(current, dict) and part in current:
            path.append(part)
            current = current[part]
        elif isinstance(current, list) and isinstance(part, int):
            path.append(part)
            current = current[part] if 0 <= part < len(current) else _MISSING
        elif isinstance(part, int):
            path.append(part)
            current = _MISSING
        elif _INTERNAL_LOC.search(str(part)):
            continue
        elif isinstance(current, dict) or current is _MISSING:
            path.append(str(part))  # a missing or unknown key
            current = _MISSING
        # else: a name below a scalar or list is a union member tag
    return tuple(path)


def _line_of(path: ConfigPath, lines: dict[ConfigPath, int]) -> int | None:
    for end in range(len(path), -1, -1):
        line = lines.get(path[:end])
        if line is not None:
            return line
    return None


def _from_environment(path: ConfigPath, env_data: Any) -> bool:
    """Whether a ``KSTAGE_*`` variable supplied the value at ``path`` (or a whole parent)."""
    current = env_data
    for part in path:
        if isinstance(current, dict) and part in current:
            current = current[part]
        else:
            return False
        if not isinstance(current, dict):
            return True
    return False


def dotted_key(path: ConfigPath) -> str:
    """How problems name a setting: ``groups[0].topics[1].options.fields``."""
    return _dotted(path)


def _dotted(path: ConfigPath) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            text += f".{part}" if text else part
        else:
            text += f"[{part!r}]"
    return text or "(top level)"


def _without_inputs(exc: ValidationError) -> BaseException | None:
    """The same pydantic error with input values hidden, to chain without leaking secrets."""
    details: list[InitErrorDetails] = []
    for err in exc.errors(include_url=False):
        detail = InitErrorDetails(type=err["type"], loc=err["loc"], input=err["input"])
        if "ctx" in err:
            detail["ctx"] = err["ctx"]
        details.append(detail)
    try:
        return ValidationError.from_exception_data(exc.title, details, hide_input=True)
    except (TypeError, KeyError, ValueError):  # an error type that cannot be rebuilt
        return None


__all__ = [
    "MAX_VALUES",
    "Check",
    "ConfigPath",
    "NameCheck",
    "PathKey",
    "dotted_key",
    "load_settings",
    "settings_from",
]
