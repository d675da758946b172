"""A topic's ``columns:``: the Kafka record's key, chosen headers and timestamp type as
extra columns of every row, next to the coordinates (``_topic, _partition, _offset,
_timestamp``). A list, one column each, its ``name`` and where it comes ``from``::

    columns:
      - {name: message_key, from: key}              # the key, per the topic's key_format
      - {name: trace_parent, from: header, header: traceparent}   # UTF-8 text, or NULL
      - {name: sig, from: header, header: signature, type: binary}  # the bytes as they are
      - {name: ts_type, from: timestamp_type}       # CreateTime or LogAppendTime

The names are SQL identifiers, distinct; that they do not collide with the processor's
columns or the coordinates is checked where the processor is known
(:mod:`actors.record_columns`, by ``kstage validate`` and ``run``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from settings.identifiers import SqlIdentifier

Source = Literal["key", "header", "timestamp_type"]


class RecordColumn(BaseModel):
    """One extra column of a topic's rows (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True,
                              populate_by_name=True)

    name: SqlIdentifier = Field(description="The column's name.")
    source: Source = Field(
        alias="from", description="key: the record key, decoded per the topic's key_format "
        "(string when a key column is declared and key_format is not); header: the header "
        "named by `header`; timestamp_type: CreateTime or LogAppendTime.")
    header: str | None = Field(None, min_length=1, description="from: header: the header's "
                               "name (a record without it gives NULL; a repeated header, "
                               "its first value).")
    type: Literal["string", "binary"] | None = Field(
        None, description="from: header: string (default; the bytes decoded as UTF-8, a "
        "header that is not UTF-8 is poison) or binary (the bytes as they are).")

    @model_validator(mode="after")
    def _header_fields(self) -> RecordColumn:
        problems: list[InitErrorDetails] = []
        if self.source == "header" and self.header is None:
            problems.append(_problem("header", "from: header needs the header's name: "
                                     "header: NAME"))
        if self.source != "header":
            for key in ("header", "type"):
                if getattr(self, key) is not None:
                    problems.append(_problem(key, f"{key} is for from: header only (a "
                                             f"{self.source} column's type is fixed)"))
        if problems:
            raise ValidationError.from_exception_data("RecordColumn", problems,
                                                      hide_input=True)
        return self


def _problem(key: str | int, message: str) -> InitErrorDetails:
    return InitErrorDetails(type=PydanticCustomError("record_column", message), loc=(key,),
                            input=None)


def distinct_columns(columns: list[RecordColumn] | None) -> list[RecordColumn] | None:
    """``columns`` if their names are distinct (a ValidationError naming the repeat)."""
    if columns is None:
        return None
    seen: dict[str, int] = {}
    problems = [_problem(k, f"column '{c.name}' is declared twice (also by columns"
                         f"[{seen[c.name]}]); give each a name of its own")
                for k, c in enumerate(columns) if seen.setdefault(c.name, k) != k]
    if problems:
        raise ValidationError.from_exception_data("columns", [
            {**p, "loc": (*p["loc"], "name")} for p in problems], hide_input=True)
    return columns


__all__ = ["RecordColumn", "Source", "distinct_columns"]
