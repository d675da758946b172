"""Value codecs and the schema registries they read: Avro in the Confluent wire format and
WhereHows' variant (:mod:`~actors.codecs.avro`, with the cavro fast path checked against
fastavro in :mod:`~actors.codecs.avro_fast`), the schema registry HTTP client
(:mod:`~actors.codecs.schema_registry`), the ``file://`` registry
(:mod:`~actors.codecs.schema_files`) and the one a configuration names
(:mod:`~actors.codecs.registries`). Used by the worker's decoding, preflight and the
operator commands; processors get decoded values and never import this package."""
