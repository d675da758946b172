"""Errors raised while loading and validating settings.

Tree::

    SettingsError            root: something is wrong with the configuration
    ├── ConfigFileError      the file is missing, unreadable or not valid YAML
    ├── UndefinedVariableError  ``${VAR}`` without default and VAR unset
    └── ConfigValidationError   one or more values do not validate (all listed)

Configuration errors are never retriable: the operator has to fix the file.
"""

from __future__ import annotations


class SettingsError(Exception):
    """Root of every configuration error; ``str()`` is the message for the operator."""

    retriable = False


class ConfigFileError(SettingsError):
    """The configuration file cannot be read or parsed."""


class UndefinedVariableError(SettingsError):
    """A ``${VAR}`` reference without default names an unset variable."""


class ConfigValidationError(SettingsError):
    """Validation failed; ``problems`` holds one line per problem, each naming its path."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} configuration problem(s):\n{lines}")
