"""Spark staging tables: the session actor, the catalog, the writer and the sink (the
table jobs on these tables, the merge among them: :mod:`actors.tables`)."""
