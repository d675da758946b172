"""The offsets table of a JDBC append table (actors.sinks.jdbc_offsets): its name, and
``kstage validate``'s refusal of one PostgreSQL would truncate."""

from __future__ import annotations

from actors.sinks import SinkContext
from actors.sinks.jdbc import JdbcSink, JdbcSinkSettings
from actors.sinks.jdbc_offsets import offsets_table
from processors.gobblin import GobblinCompactionProcessor as PROCESSOR


def sink_for(table: str, mode: str = "append") -> JdbcSink:
    sink = JdbcSink(JdbcSinkSettings(table=table, url="jdbc:postgresql://h/db",  # type: ignore[arg-type]
                                     mode=mode))  # type: ignore[arg-type]
    sink.bind(SinkContext(columns=PROCESSOR.columns, table=PROCESSOR.table,
                          processor=PROCESSOR.name))
    return sink


def test_the_offsets_table_sits_beside_the_table() -> None:
    assert offsets_table("stg") == "stg_kafka_offsets"
    assert offsets_table("raw.stg") == "raw.stg_kafka_offsets"


def test_only_append_stores_offsets() -> None:
    assert sink_for("stg").capabilities.stores_offsets
    assert not sink_for("stg", "upsert").capabilities.stores_offsets


def test_an_offsets_table_name_past_postgresql_limit_is_refused() -> None:
    fine, long = "t" * 49, "t" * 50
    assert sink_for(fine).check() == []
    assert sink_for(f"raw.{fine}").check() == []
    assert sink_for(long).check() == [(("sink", "table"), (
        f"jdbc sink {long}: mode: append keeps the Kafka offsets of table {long} in the "
        f"table {long}_kafka_offsets, longer than PostgreSQL's 63-byte identifier limit (it "
        "would be truncated); name the table with at most 49 characters (sink.table)"))]


def test_the_way_out_of_a_refused_partition_is_the_offsets_table() -> None:
    """A JDBC table holding a partition past its high-water mark: the refusal names the
    DELETE from its offsets table, not the Iceberg tables' reset-offsets."""
    assert sink_for("raw.stg").offsets_reset("g", "events", 3) == (
        "with the group stopped, `DELETE FROM \"raw\".\"stg_kafka_offsets\" WHERE "
        "group_id = 'g' AND topic = 'events' AND partition = 3` in the database at "
        "jdbc:postgresql://h/db")
