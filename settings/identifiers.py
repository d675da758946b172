"""SQL identifiers: the one check of the table names a configuration or a processor gives.

A staging table name is spliced into Spark SQL and JDBC DDL (quoted, but a quote, a dot or
a blank inside it would still change its meaning or fail at the first write), so it must
be a plain identifier: a letter or ``_``, then letters, digits or ``_``.
``schema.name`` is allowed only where a sink supports schemas (JDBC).

Use :data:`SqlIdentifier` / :data:`QualifiedSqlIdentifier` as pydantic field types (a bad
name is then a validation error naming the key and its line), or :func:`sql_identifier`
directly.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def sql_identifier(value: str, *, qualified: bool = False) -> str:
    """Return ``value`` if it is a SQL identifier (``schema.name`` too when ``qualified``).

    Raises:
        ValueError: naming the value and what is allowed.
    """
    parts = value.split(".") if qualified else [value]
    if len(parts) > 2 or not all(IDENTIFIER.match(part) for part in parts):
        allowed = "`name` or `schema.name`" if qualified else "a name"
        raise ValueError(f"{value!r} is not a SQL identifier: write {allowed} made of letters, "
                         "digits and _ (not starting with a digit)")
    return value


def _qualified(value: str) -> str:
    return sql_identifier(value, qualified=True)


SqlIdentifier = Annotated[str, AfterValidator(sql_identifier)]
"""A table name: letters, digits and ``_``, not starting with a digit."""

QualifiedSqlIdentifier = Annotated[str, AfterValidator(_qualified)]
"""A table name, or ``schema.name``."""

TOPIC_PLACEHOLDER = "{topic}"
"""In a sink's table (or file) setting: the topic's name made safe (:func:`table_part`)."""


def table_part(topic: str) -> str:
    """``topic`` as part of a table name: every character that is not ``[A-Za-z0-9_]``
    made ``_``, lower-cased (``dbz.public.Orders`` -> ``dbz_public_orders``)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", topic).lower()


TABLE_PLACEHOLDER = "{table}"
"""In a routed topic's sink (table or file): the table of the message's route
(:mod:`settings.routes`)."""


def _template(value: str, *, qualified: bool = False) -> str:
    try:
        sql_identifier(value.replace(TOPIC_PLACEHOLDER, "t").replace(TABLE_PLACEHOLDER, "t"),
                       qualified=qualified)
    except ValueError:
        sql_identifier(value, qualified=qualified)  # the message names the value as written
    return value


def _qualified_template(value: str) -> str:
    return _template(value, qualified=True)


TableTemplate = Annotated[str, AfterValidator(_template)]
"""A table name that may hold ``{topic}`` (replaced by the topic's :func:`table_part`)
and ``{table}`` (a routed topic's table, :mod:`settings.routes`)."""

QualifiedTableTemplate = Annotated[str, AfterValidator(_qualified_template)]
"""A table name, or ``schema.name``, that may hold ``{topic}``."""
