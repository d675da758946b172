"""Evolution inside a staging table's nested columns (a struct's fields, a list's element,
a map's value), for a processor whose columns come from writer schemas.

The table's type of a nested column (read back from Spark or from pyiceberg as a
:mod:`processors.column_types` tree: :func:`spark_tree`, :func:`iceberg_tree`) is compared
with the declared one by :func:`processors.type_evolution.fit`: fields added inside
(nullable), flat types widened inside, and fields the declared type makes nullable where
the table holds them required (``loosened``: a field that was required in one writer
schema and is optional, or gone, in another). Anything else is an error naming the
field's path. Both append paths apply the result in one place each
(:func:`actors.sinks.spark.iceberg.evolve_staging` with ``ALTER TABLE``,
:func:`actors.sinks.spark.pyiceberg_tables.evolve_staging` with ``update_schema()``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from processors import column_types as ct
from processors.base import Column
from processors.column_types import Field, TypeNode, parse_type, type_string
from processors.type_evolution import Change, Unfit, fit

_SPARK_FLAT = {"string": "string", "integer": "int", "long": "long", "float": "float",
               "double": "double", "boolean": "boolean", "binary": "binary", "date": "date",
               "timestamp": "timestamp", "timestamp_ntz": "timestamp_ntz"}


@dataclass(slots=True)
class NestedEvolution:
    """What the table's nested columns need: ``changes`` (add or widen at a path),
    ``loosened`` (paths of required fields made optional), ``errors`` (one a column)."""

    changes: list[Change] = field(default_factory=list)
    loosened: list[tuple[str, ...]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def described(self) -> list[str]:
        """The changes made, as text (``added item.color``, ``made item.sku optional``)."""
        return ([f"{'added' if c.kind == 'add' else 'widened'} {'.'.join(c.path)}"
                 + ("" if c.kind == "add" else f" to {type_string(c.type)}")
                 for c in self.changes]
                + [f"made {'.'.join(p)} optional" for p in self.loosened])


def split(existing: Mapping[str, Any], declared: Sequence[Column],
          ) -> tuple[list[Column], list[Column]]:
    """``declared`` as (the nested columns the table already has, the others)."""
    nested: list[Column] = []
    rest: list[Column] = []
    for column in declared:
        inside = column.name in existing and ct.is_nested(parse_type(column.type))
        (nested if inside else rest).append(column)
    return nested, rest


def names(columns: Sequence[Column]) -> frozenset[str]:
    """The names of ``columns`` (the table's types are read back for these only)."""
    return frozenset(c.name for c in columns)


def nested_evolution(existing: Mapping[str, TypeNode], declared: Sequence[Column],
                     ) -> NestedEvolution:
    """Compare the table's types of the ``declared`` nested columns (``existing``, by
    column name) with the declared ones."""
    out = NestedEvolution()
    for column in declared:
        was, now = existing[column.name], parse_type(column.type)
        try:
            _, changes = fit((Field(column.name, was),), (Field(column.name, now),))
        except Unfit as exc:
            out.errors.append(f"column {'.'.join(exc.path)!r} is {type_string(exc.was)}, "
                              f"cannot become {type_string(exc.now)}")
            continue
        out.changes.extend(changes)
        _loosened((column.name,), was, now, out.loosened)
    return out


def _loosened(path: tuple[str, ...], was: TypeNode, now: TypeNode,
              out: list[tuple[str, ...]]) -> None:
    if isinstance(was, ct.Struct) and isinstance(now, ct.Struct):
        declared = {f.name: f for f in now.fields}
        for old in was.fields:
            new = declared.get(old.name)
            if not old.nullable and (new is None or new.nullable):
                out.append((*path, old.name))
            if new is not None:
                _loosened((*path, old.name), old.type, new.type, out)
    elif isinstance(was, ct.Array) and isinstance(now, ct.Array):
        _loosened((*path, "element"), was.element, now.element, out)
    elif isinstance(was, ct.Map) and isinstance(now, ct.Map):
        _loosened((*path, "value"), was.value, now.value, out)


def spark_tree(data_type: Any) -> TypeNode:
    """A Spark ``DataType`` of a staging table's column as a column type tree."""
    name = data_type.typeName()
    if name == "decimal":
        return ct.DecimalType(data_type.precision, data_type.scale)
    if name == "struct":
        return ct.Struct(tuple(Field(f.name, spark_tree(f.dataType), f.nullable)
                            for f in data_type.fields))
    if name == "array":
        return ct.Array(spark_tree(data_type.elementType))
    if name == "map":
        return ct.Map(spark_tree(data_type.keyType), spark_tree(data_type.valueType))
    return ct.Flat(_SPARK_FLAT[name])


def iceberg_tree(field_type: Any) -> TypeNode:
    """A pyiceberg type of a staging table's column as a column type tree (as Spark reads
    it: ``uuid`` a string, ``time`` a long, ``fixed`` binary)."""
    from pyiceberg import types as t  # only with appends: pyiceberg

    if isinstance(field_type, t.DecimalType):
        return ct.DecimalType(field_type.precision, field_type.scale)
    if isinstance(field_type, t.StructType):
        return ct.Struct(tuple(Field(f.name, iceberg_tree(f.field_type), not f.required)
                            for f in field_type.fields))
    if isinstance(field_type, t.ListType):
        return ct.Array(iceberg_tree(field_type.element_type))
    if isinstance(field_type, t.MapType):
        return ct.Map(iceberg_tree(field_type.key_type), iceberg_tree(field_type.value_type))
    flat = {t.StringType: "string", t.UUIDType: "string", t.IntegerType: "int",
            t.LongType: "long", t.TimeType: "long", t.FloatType: "float",
            t.DoubleType: "double", t.BooleanType: "boolean", t.BinaryType: "binary",
            t.FixedType: "binary", t.TimestamptzType: "timestamp",
            t.TimestampType: "timestamp_ntz", t.DateType: "date"}
    for kind, name in flat.items():
        if isinstance(field_type, kind):
            return ct.Flat(name)
    raise ValueError(f"no column type for the Iceberg type {field_type}")


def spark_path(path: Sequence[str]) -> str:
    """A nested field's path in Spark SQL (```item`.`color```)."""
    return ".".join("`" + part.replace("`", "``") + "`" for part in path)


__all__ = ["NestedEvolution", "iceberg_tree", "names", "nested_evolution", "spark_path",
           "spark_tree", "split"]
