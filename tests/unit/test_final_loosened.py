"""Which required columns and struct fields of a final table the merge makes optional
(``actors.tables.final_table.loosened``): those the staging table's columns now make
optional, and no others. The merge that does it, on Spark and Iceberg:
``tests/integration/test_merge_staged_nullability.py``."""

from __future__ import annotations

from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from actors.tables.final_table import loosened
from processors.base import Column

FINAL = StructType([
    StructField("id", StringType(), False),
    StructField("qty", IntegerType(), True),
    StructField("address", StructType([StructField("street", StringType(), False),
                                       StructField("zip", StringType(), False)]), True)])


def test_the_fields_the_staging_table_made_optional_are_loosened() -> None:
    declared = [Column("id", "string", True), Column("qty", "int", True),
                Column("address", "struct<street:string,zip:string NOT NULL>", True)]
    assert loosened(FINAL, declared) == [("id",), ("address", "street")]


def test_nothing_is_loosened_while_the_staging_table_keeps_them_required() -> None:
    declared = [Column("id", "string", False), Column("qty", "int", True),
                Column("address", "struct<street:string NOT NULL,zip:string NOT NULL>", True),
                Column("note", "string", True)]  # new: added, not loosened
    assert loosened(FINAL, declared) == []
