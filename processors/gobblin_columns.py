"""The Gobblin mappings of :mod:`processors.gobblin` on a whole batch, as Arrow columns.

:meth:`GobblinProcessor.transform_columns <processors.gobblin.GobblinProcessor.transform_columns>`
calls these with a batch of decoded ``GobblinTrackingEvent`` values (``pyarrow.Table``).
They give the rows :meth:`~processors.gobblin.GobblinProcessor.transform` gives, value for
value, or None whenever one value of the batch is one :meth:`transform` would refuse
(a missing required key, a number that does not parse, a path that does not cut, a
writer schema of another shape): the batch then goes one message at a time, and the
message at fault is named and dead-lettered as ever. A metadata key given twice in one
map counts by its last value, as in the decoded dict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from processors.base import MappedColumns

# Java's Long.parseLong, as processors.gobblin.parse_long reads it: a sign, ASCII digits
_LONG = r"^[+-]?[0-9]+$"

# processors.gobblin._COMPACTION_OUTPUT (re.ASCII) in RE2: \w and \d are ASCII there too,
# and a path RE2 does not cut sends the batch to transform, which decides
_COMPACTION_OUTPUT = r"^(?P<dataset>/\w+/\w+/[\w-]+)/(?P<ptype>[\w-]+)/(?P<pname>\d.*)$"


class _Refused(Exception):
    """A value of the batch that transform must judge (see the module doc)."""


class _Events:
    """A batch of GobblinTrackingEvent values whose shape :class:`GobblinEvent
    <processors.gobblin.GobblinEvent>` accepts, and the lookups of their metadata."""

    def __init__(self, values: Any) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        self.pa, self.pc = pa, pc
        schema = values.schema
        for name, check in (("timestamp", pa.types.is_int64), ("name", pa.types.is_string),
                            ("metadata", pa.types.is_map)):
            if schema.get_field_index(name) < 0 or not check(schema.field(name).type):
                raise _Refused(name)
        meta = schema.field("metadata").type
        if not (pa.types.is_string(meta.key_type) and pa.types.is_string(meta.item_type)):
            raise _Refused("metadata")
        if schema.get_field_index("namespace") >= 0:
            if not pa.types.is_string(schema.field("namespace").type):
                raise _Refused("namespace")
            self.namespace = values["namespace"]
        else:  # transform reads a missing namespace as None
            self.namespace = pa.nulls(len(values), pa.string())
        self.timestamp, self.name = values["timestamp"], values["name"]
        self.metadata = values["metadata"].combine_chunks()
        if (self.timestamp.null_count or self.name.null_count or self.metadata.null_count
                or self.metadata.items.null_count):
            raise _Refused("a null")

    def keep(self, namespace: str, names: Sequence[str]) -> Any:
        """The events of ``namespace`` named one of ``names`` (the others give no row)."""
        pc = self.pc
        kept = pc.and_(pc.equal(self.namespace, namespace),
                       pc.is_in(self.name, value_set=self.pa.array(list(names))))
        return pc.indices_nonzero(pc.fill_null(kept, False))

    def take(self, rows: Any) -> _Events:
        """These events, of ``rows`` only."""
        taken = object.__new__(_Events)
        taken.pa, taken.pc = self.pa, self.pc
        taken.namespace = self.namespace.take(rows)
        taken.timestamp, taken.name = self.timestamp.take(rows), self.name.take(rows)
        taken.metadata = self.metadata.take(rows)
        return taken

    def get(self, key: str) -> Any:
        """Metadata ``key`` of each event (null when absent)."""
        return self.pc.map_lookup(self.metadata, self.pa.scalar(key), "last")

    def require(self, key: str, where: Any = None) -> Any:
        """Metadata ``key`` of each event; refused if absent in one (of ``where``)."""
        found = self.get(key)
        if found.null_count and (where is None or self.pc.any(
                self.pc.and_(self.pc.is_null(found), where)).as_py()):
            raise _Refused(key)
        return found

    def long(self, key: str, bits: int = 64, found: Any = None) -> Any:
        """Metadata ``key`` of each event as a ``bits``-bit integer (null when absent);
        refused if one does not parse as Java's ``Long.parseLong`` would: an optional
        sign and ASCII digits (checked first: Arrow's own parse also takes ``0x`` hex),
        within the range."""
        pa, pc = self.pa, self.pc
        text = self.get(key) if found is None else found
        if not pc.all(pc.match_substring_regex(text, _LONG), min_count=0).as_py():  # nulls skipped
            raise _Refused(key)
        if pc.any(pc.starts_with(text, "+")).as_py():  # Arrow's parse refuses the sign
            text = pc.replace_substring_regex(text, r"^\+", "")
        try:
            return pc.cast(text, pa.int32() if bits == 32 else pa.int64())
        except (pa.ArrowInvalid, OverflowError) as exc:  # out of range
            raise _Refused(key) from exc

    def cluster(self, clusters: Sequence[tuple[str, str]]) -> Any:
        """:func:`~processors.gobblin.match_cluster_code` of ``clusterIdentifier``
        (required)."""
        pc = self.pc
        identifier = self.require("clusterIdentifier")
        if not clusters:
            return identifier
        # the first code found wins, then the first short name: applied last to first
        result = identifier
        for code, short_name in reversed(clusters):
            result = pc.if_else(pc.match_substring(identifier, short_name), code, result)
        for code, _ in reversed(clusters):
            result = pc.if_else(pc.match_substring(identifier, code), code, result)
        return result

    def job(self, prefix: str) -> dict[str, Any]:
        """The Azkaban job columns (:meth:`GobblinProcessor.job
        <processors.gobblin.GobblinProcessor.job>`)."""
        return {
            "job_context": self.pc.binary_join_element_wise(f"{prefix}:", self.name, ""),
            "project_name": self.get("azkabanProjectName"),
            "flow_name": self.get("azkabanFlowId"),
            "job_name": self.get("azkabanJobId"),
            "flow_exec_id": self.long("azkabanExecId", bits=32),
            "log_event_time": self.timestamp,
        }


def _mapped(values: Any, namespace: str, names: Sequence[str], build: Any
            ) -> MappedColumns | None:
    import pyarrow as pa

    try:
        events = _Events(values)
        rows = events.keep(namespace, names)
        kept = events.take(rows)
        columns = build(kept) if len(rows) else {}
    except _Refused:
        return None
    if not len(rows):
        return MappedColumns(pa.table({}), rows)
    return MappedColumns(pa.table(columns), rows)


def compaction(values: Any, clusters: Sequence[tuple[str, str]], namespace: str,
               names: Sequence[str], prefix: str) -> MappedColumns | None:
    """:meth:`GobblinCompactionProcessor.row
    <processors.gobblin.GobblinCompactionProcessor.row>` on a batch."""

    def build(events: _Events) -> dict[str, Any]:
        pc = events.pc
        completed = pc.equal(events.name, "CompactionCompleted")
        counted = pc.invert(completed)
        urn = events.require("datasetUrn", completed)
        path = events.require("DatasetOutputPath", counted)
        cut = pc.extract_regex(path, _COMPACTION_OUTPUT)
        if pc.any(pc.and_(pc.is_null(cut), counted)).as_py():
            raise _Refused("DatasetOutputPath")
        cut_dataset, cut_ptype, cut_pname = (pc.struct_field(cut, [i]) for i in range(3))
        null = events.pa.scalar(None, events.pa.string())
        regular = events.long("RegularRecordCount", found=pc.if_else(
            counted, events.get("RegularRecordCount"), null))
        return {
            "cluster": events.cluster(clusters),
            "dataset": pc.if_else(completed, urn, cut_dataset),
            "partition_type": pc.if_else(completed, null, cut_ptype),
            "partition_name": pc.if_else(completed, events.get("partition"), cut_pname),
            "record_count": pc.if_else(completed, events.long("recordCount", found=pc.if_else(
                completed, events.get("recordCount"), null)), regular),
            "late_record_count": events.long("LateRecordCount", found=pc.if_else(
                counted, events.get("LateRecordCount"), null)),
            "dedupe_status": events.get("dedupeStatus"),
            **events.job(prefix),
        }

    return _mapped(values, namespace, names, build)


def distcp(values: Any, clusters: Sequence[tuple[str, str]], namespace: str,
           names: Sequence[str], prefix: str) -> MappedColumns | None:
    """:meth:`GobblinDistcpProcessor.row
    <processors.gobblin.GobblinDistcpProcessor.row>` on a batch."""

    def build(events: _Events) -> dict[str, Any]:
        return {
            "cluster": events.cluster(clusters),
            "dataset": events.require("datasetUrn"),
            "partition_type": events.pa.nulls(len(events.name), events.pa.string()),
            "partition_name": events.require("partition"),
            "upsteam_timestamp": events.long("upstreamTimestamp"),
            "origin_timestamp": events.long("originTimestamp"),
            "source_path": events.get("SourcePath"),
            "target_path": events.get("TargetPath"),
            **events.job(prefix),
        }

    return _mapped(values, namespace, names, build)


__all__ = ["compaction", "distcp"]
