"""Spark staging tables: the session actor, the writer and sink, and the merge into final tables."""
