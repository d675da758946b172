"""kstage-example-sink: the ``csv`` sink plugin for kstage (rows -> CSV files, one per
partition and flush)."""

from __future__ import annotations

from kstage_example_sink.sink import CsvSink, CsvSinkSettings, cell

__all__ = ["CsvSink", "CsvSinkSettings", "cell"]
