"""pyiceberg 0.12 rebuilds a list of structs without its validity (apache/iceberg-python
#3833): a NULL ``array<struct<...>>`` would be written, and read, as an empty list. kstage
carries the nulls over (:mod:`actors.sinks.spark.pyiceberg_nulls`): a real pyiceberg append
to a SQLite catalog keeps a NULL list of structs NULL in the Parquet file and in a scan."""

from __future__ import annotations

import glob
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog

from actors.sinks.spark import pyiceberg_nulls
from actors.sinks.spark.pyiceberg_tables import staging_schema
from processors.base import Column


def test_a_null_list_of_structs_stays_null_through_a_pyiceberg_append(tmp_path: Path) -> None:
    pyiceberg_nulls.install()
    catalog = SqlCatalog("c", uri=f"sqlite:///{tmp_path}/c.db",
                         warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    columns = [Column("o", "struct<id:long NOT NULL,lines:array<struct<q:int>>>"),
               Column("m", "map<string,array<struct<q:int>>>"),
               Column("xs", "array<struct<`q r`:int>>")]
    table = catalog.create_table("ns.t", schema=staging_schema(columns).select("o", "m", "xs"))
    rows = [{"o": {"id": 1, "lines": None}, "m": {"k": None}, "xs": None},
            {"o": {"id": 2, "lines": [{"q": 1}, None]}, "m": {"k": []}, "xs": [{"q r": 3}]},
            {"o": None, "m": None, "xs": []}]
    arrow = pa.Table.from_pylist(rows, schema=table.schema().as_arrow())
    table.append(arrow)
    written = pq.read_table(glob.glob(f"{tmp_path}/wh/**/*.parquet", recursive=True)[0])
    assert written.column("o").to_pylist()[0] == {"id": 1, "lines": None}
    assert written.column("xs").to_pylist() == [None, [{"q_x20r": 3}], []]
    scanned = table.scan().to_arrow().to_pylist()
    assert [(r["o"], dict(r["m"] or {}), r["xs"]) for r in scanned] == [
        ({"id": 1, "lines": None}, {"k": None}, None),
        ({"id": 2, "lines": [{"q": 1}, None]}, {"k": []}, [{"q r": 3}]),
        (None, {}, [])]
