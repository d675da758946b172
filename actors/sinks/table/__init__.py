"""What the table sinks (Spark, JDBC) share: row checks against declared column
types and Arrow conversion."""
