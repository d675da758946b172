"""What the table sinks (Spark, JDBC) share, without Spark: the column types in one map
(:mod:`.columns`), row checks against them and Arrow conversion (:mod:`.rows`),
micro-batching of a table's rows (:mod:`.batching`) and the worker's handle on a table
(:mod:`.sink`)."""
