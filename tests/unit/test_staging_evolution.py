"""How a staging table follows a processor whose columns come from writer schemas
(:func:`actors.sinks.spark.iceberg.evolution`): new nullable columns, widened types, the
table's other columns kept, anything else refused naming the column."""

from __future__ import annotations

from actors.sinks.spark.iceberg import evolution, widens
from processors.base import Column


def test_widenings_are_the_ones_iceberg_allows() -> None:
    assert widens("int", "bigint") is True
    assert widens("float", "double") is True
    assert widens("decimal(9,2)", "decimal(12,2)") is True
    assert widens("bigint", "int") is False  # narrower: written as it is
    assert widens("string", "string") is False
    assert widens("decimal(9,2)", "decimal(12,3)") is None
    assert widens("string", "int") is None


def test_evolution_adds_widens_keeps_and_refuses() -> None:
    existing = {"id": "string", "qty": "int", "old": "string", "n": "bigint"}
    declared = [Column("id", "string", False), Column("qty", "long"), Column("note"),
                Column("n", "int")]
    added, widened, errors = evolution(existing, declared)
    assert [(c.name, c.type, c.nullable) for c in added] == [("note", "string", True)]
    assert [c.name for c in widened] == ["qty"]
    assert errors == []
    _, _, errors = evolution({"id": "string"}, [Column("id", "int")])
    assert errors == ["column 'id' is string, cannot become int"]
