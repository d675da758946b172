"""The lakehouse table jobs on the spark sinks' Iceberg tables: the merge of staging
tables into final tables, their maintenance (expiry, snapshots), the migration of an
earlier version's Parquet tables, and the reset of the offsets a table holds."""
