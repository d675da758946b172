"""WhereHows' Gobblin tracking events -> ``stg_kafka_gobblin_{compaction,distcp}`` + helpers.

Each processor reads one ``GobblinTrackingEvent`` (``timestamp``, ``namespace``, ``name``
and a ``metadata`` map of strings) and, for the events it tracks, emits one row whose
columns follow the staging DDL ``schemas/wherehows/kafka_tracking.sql``. The lumos
processor lives in :mod:`processors.gobblin_lumos` and shares the helpers below.

Where the mapping comes from: the WhereHows Kafka processors, read (not copied) from the
``datahub-project/datahub`` history (formerly ``linkedin/WhereHows``):

* ``wherehows-backend/app/models/kafka/GobblinTrackingCompactionProcessor.java``
  (commit 095831b6e560) and ``metadata-etl/.../kafka/GobblinTrackingCompactionProcessor.java``
  (078e90e8bd25);
* ``wherehows-backend/app/models/kafka/GobblinTrackingDistcpNgProcessor.java`` (9cc206dac0ca);
* ``metadata-etl/src/main/java/metadata/etl/kafka/GobblinTrackingLumosProcessor.java``
  (11158e0b9f16), for :mod:`processors.gobblin_lumos`;
* ``wherehows-common/.../utils/ClusterUtil.java`` (3d3b2a807502) for the cluster code,
  ``.../utils/StringUtil.java`` (3bdaff934f83) and the ``GobblinTracking*Record`` classes
  for the column order.

Deliberate differences from WhereHows (kstage decisions):

* WhereHows parsed numbers with a helper that turned a missing *or unparsable* value into
  ``0``. Here a missing value is ``None`` and an unparsable one raises
  :class:`~processors.errors.PoisonMessage` naming the metadata key and the value.
  Numbers follow Java's ``Long.parseLong``: optional sign, ASCII digits, no blanks.
* Values the NOT NULL columns need (cluster, dataset, the distcp partition, the lumos
  location) raise ``PoisonMessage`` when missing; WhereHows failed at the INSERT.
* ``ClusterUtil.matchClusterCode`` read its cluster list from the WhereHows database. Here
  it comes from the processor option ``clusters``: a list of ``{code, short_name}``
  mappings; with no list, the identifier is kept as is (what WhereHows did with no match).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from processors import gobblin_columns
from processors.base import (
    Column,
    MappedColumns,
    Message,
    NoOptions,
    Processor,
    Row,
    with_coordinates,
)
from processors.errors import PoisonMessage

_LONG = re.compile(r"[+-]?[0-9]+")
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_STR = frozenset({str})


def shown(value: object, limit: int = 80) -> str:
    """``repr`` of a bad value for an error message, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def parse_long(text: str | None, what: str, *, bits: int = 64) -> int | None:
    """Parse a decimal integer like Java's ``Long.parseLong`` / ``Integer.parseInt``.

    Returns None for None; raises PoisonMessage naming ``what`` for anything that is
    not a signed decimal integer of ``bits`` bits.
    """
    if text is None:
        return None
    # the common case first: ASCII digits only, too few to leave the range (18 of a
    # long, 9 of an int); anything else takes the exact check below
    if type(text) is str and len(text) < (19 if bits == 64 else 10) and text.isdigit() \
            and text.isascii():
        return int(text)
    lo, hi = (_LONG_MIN, _LONG_MAX) if bits == 64 else (_INT_MIN, _INT_MAX)
    if not isinstance(text, str) or not _LONG.fullmatch(text) or not lo <= int(text) <= hi:
        raise PoisonMessage(f"{what}={shown(text)} is not a {bits}-bit integer")
    return int(text)


def match_cluster_code(identifier: str, clusters: Sequence[tuple[str, str]]) -> str:
    """WhereHows' ``ClusterUtil.matchClusterCode``.

    The first cluster whose code occurs in ``identifier`` wins; failing that, the first
    whose short name occurs in it; failing that, ``identifier`` itself.

    Args:
        identifier: e.g. Gobblin's ``clusterIdentifier`` or a Metastore host name.
        clusters: (code, short name) pairs, in priority order.
    """
    for code, _ in clusters:
        if code in identifier:
            return code
    for code, short_name in clusters:
        if short_name in identifier:
            return code
    return identifier


class Cluster(BaseModel):
    """One entry of the ``clusters`` option (WhereHows' cluster table row)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    code: str = Field(description="Cluster code written to the row, e.g. ltx1-holdem.")
    short_name: str = Field(description="Short name also matched, e.g. holdem.")


class ClusterOptions(NoOptions):
    """Options of the Gobblin and Metastore processors."""

    clusters: list[Cluster] = Field(
        default_factory=list, description="Cluster codes matched against the identifier, in "
        "priority order (see match_cluster_code); empty: keep the identifier as is.")

    def pairs(self) -> tuple[tuple[str, str], ...]:
        """The clusters as (code, short name) pairs."""
        return tuple((c.code, c.short_name) for c in self.clusters)


class GobblinEvent(NamedTuple):
    """A decoded ``GobblinTrackingEvent`` with its shape checked.

    Attributes:
        timestamp: event time in epoch milliseconds.
        namespace: the event namespace (may be None).
        name: the event name.
        metadata: the metadata map (string to string).
    """

    timestamp: int
    namespace: str | None
    name: str
    metadata: Mapping[str, str]

    @classmethod
    def of(cls, value: object) -> GobblinEvent:
        """Check the shape of a decoded value; PoisonMessage names the bad field."""
        if type(value) is dict:  # what the decoders give: the checks without the ABC's
            ts, ns, name = value.get("timestamp"), value.get("namespace"), value.get("name")
            metadata = value.get("metadata", {})
            if (type(ts) is int and (ns is None or type(ns) is str) and type(name) is str
                    and type(metadata) is dict
                    and _STR.issuperset(map(type, metadata.values()))):
                return cls(ts, ns, name, metadata)
        if not isinstance(value, Mapping):
            raise PoisonMessage(
                f"expected a GobblinTrackingEvent record, got {type(value).__name__}"
            )
        ts, ns, name = value.get("timestamp"), value.get("namespace"), value.get("name")
        metadata = value.get("metadata", {})
        if not isinstance(ts, int) or isinstance(ts, bool):
            raise PoisonMessage(f"field timestamp={shown(ts)} is not a long")
        if ns is not None and not isinstance(ns, str):
            raise PoisonMessage(f"field namespace={shown(ns)} is not a string")
        if not isinstance(name, str):
            raise PoisonMessage(f"field name={shown(name)} is missing or not a string")
        if not (
            isinstance(metadata, Mapping) and all(isinstance(v, str) for v in metadata.values())
        ):
            raise PoisonMessage(f"field metadata={shown(metadata)} is not a map of strings")
        return cls(ts, ns, name, metadata)

    def get(self, key: str) -> str | None:
        """The metadata value of ``key``, None when absent."""
        return self.metadata.get(key)

    def require(self, key: str) -> str:
        """The metadata value of ``key``; PoisonMessage when absent (NOT NULL column)."""
        value = self.metadata.get(key)
        if value is None:
            raise PoisonMessage(f"{self.name} event: required metadata key {key!r} is missing")
        return value

    def long(self, key: str) -> int | None:
        """The metadata value of ``key`` as a long; None when absent."""
        return parse_long(self.metadata.get(key), f"metadata {key!r}")


JOB_COLUMNS = (
    Column("job_context", doc="'<prefix>:<event name>', e.g. 'Gobblin:CompactionCompleted'"),
    Column("project_name", doc="metadata azkabanProjectName"),
    Column("flow_name", doc="metadata azkabanFlowId"),
    Column("job_name", doc="metadata azkabanJobId"),
    Column("flow_exec_id", "int", doc="metadata azkabanExecId (32-bit integer)"),
    Column("log_event_time", "long", nullable=False, doc="event timestamp (epoch ms)"),
)


class GobblinProcessor(Processor):
    """Shared base of the Gobblin processors: shape check, cluster and Azkaban columns.

    Options:
        clusters: list of ``{code, short_name}`` for the cluster-code match (see
            :func:`match_cluster_code`); default: keep ``clusterIdentifier`` as is.
    """

    formats = ("avro", "json")
    job_prefix = ""
    NAMESPACE: ClassVar[str | None] = None  # the events' namespace (None: any)
    NAMES: ClassVar[frozenset[str]] = frozenset()  # the event names that give a row

    options_model = ClusterOptions
    options: ClusterOptions

    def __init__(self, options: Mapping[str, Any] | BaseModel | None = None) -> None:
        super().__init__(options)
        self._clusters = self.options.pairs()

    def transform(self, message: Message) -> Sequence[Row]:
        row = self.row(GobblinEvent.of(message.value))
        return [] if row is None else [with_coordinates(row, message)]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # a subclass's rows are its own: one message at a time (the built-in classes
        # map whole batches too: _COLUMN_MAPPINGS, at the end of the module)
        cls.maps_columns = False

    def row(self, event: GobblinEvent) -> Row | None:
        """The row for ``event`` (columns in DDL order), or None to filter it out."""
        raise NotImplementedError

    def transform_columns(self, values: Any) -> MappedColumns | None:
        mapping = _COLUMN_MAPPINGS.get(type(self))
        if mapping is None or self.NAMESPACE is None:
            return None
        return mapping(values, self._clusters, self.NAMESPACE, sorted(self.NAMES),
                       self.job_prefix)

    def cluster(self, event: GobblinEvent) -> str:
        """``cluster``: the matched code of metadata ``clusterIdentifier`` (required)."""
        return match_cluster_code(event.require("clusterIdentifier"), self._clusters)

    def job(self, event: GobblinEvent) -> Row:
        """The Azkaban job columns shared by the three tables."""
        metadata = event.metadata
        return {
            "job_context": f"{self.job_prefix}:{event.name}",
            "project_name": metadata.get("azkabanProjectName"),
            "flow_name": metadata.get("azkabanFlowId"),
            "job_name": metadata.get("azkabanJobId"),
            "flow_exec_id": parse_long(
                metadata.get("azkabanExecId"), "metadata 'azkabanExecId'", bits=32
            ),
            "log_event_time": event.timestamp,
        }


# '/data/tracking/<dataset>/<partition type>/<partition starting with a digit>'
_COMPACTION_OUTPUT = re.compile(r"^(/\w+/\w+/[\w-]+)/([\w-]+)/(\d.*)$", re.ASCII)


class GobblinCompactionProcessor(GobblinProcessor):
    """Gobblin compaction events -> ``stg_kafka_gobblin_compaction``.

    Accepts namespace ``compaction.tracking.events`` with name ``CompactionCompleted`` or
    ``CompactionRecordCounts`` (WhereHows' filter); every other event gives ``[]``.

    Mapping (metadata key -> column), from WhereHows:

    * ``clusterIdentifier`` -> cluster (cluster-code match; required)
    * CompactionCompleted: ``datasetUrn`` -> dataset (required), ``partition`` ->
      partition_name, ``recordCount`` -> record_count; partition_type and
      late_record_count stay None (WhereHows wrote 0 for the count).
    * CompactionRecordCounts: ``DatasetOutputPath`` such as
      ``/data/tracking/PageViewEvent/hourly/2016/07/13/00`` is cut into dataset (the
      first three segments), partition_type (the next) and partition_name (the rest,
      starting with a digit); a path that does not cut raises PoisonMessage (WhereHows
      left dataset null). ``RegularRecordCount`` -> record_count,
      ``LateRecordCount`` -> late_record_count.
    * ``dedupeStatus`` -> dedupe_status
    * job columns: job_context ``Gobblin:<name>``, ``azkabanProjectName`` ->
      project_name, ``azkabanFlowId`` -> flow_name, ``azkabanJobId`` -> job_name,
      ``azkabanExecId`` -> flow_exec_id; event ``timestamp`` -> log_event_time.
    """

    name = "gobblin_compaction"
    description = "WhereHows Gobblin compaction events -> stg_kafka_gobblin_compaction"
    table = "stg_kafka_gobblin_compaction"
    reader_schema = "wherehows/GobblinTrackingEvent.avsc"
    key = ("dataset", "cluster", "log_event_time")
    final_partition = ("log_date", "to_date(timestamp_millis(log_event_time))")
    columns = (
        Column("cluster", nullable=False, doc="metadata clusterIdentifier, cluster-code match"),
        Column("dataset", nullable=False, doc="datasetUrn, or cut from DatasetOutputPath"),
        Column("partition_type", doc="cut from DatasetOutputPath (CompactionRecordCounts)"),
        Column("partition_name", doc="partition, or cut from DatasetOutputPath"),
        Column("record_count", "long", doc="recordCount or RegularRecordCount"),
        Column("late_record_count", "long", doc="LateRecordCount (CompactionRecordCounts)"),
        Column("dedupe_status", doc="metadata dedupeStatus"),
        *JOB_COLUMNS,
    )
    job_prefix = "Gobblin"
    NAMESPACE = "compaction.tracking.events"
    NAMES = frozenset({"CompactionCompleted", "CompactionRecordCounts"})

    def row(self, event: GobblinEvent) -> Row | None:
        if event.namespace != self.NAMESPACE or event.name not in self.NAMES:
            return None
        counts: tuple[int | None, int | None]
        metadata = event.metadata
        if event.name == "CompactionCompleted":
            dataset, ptype, pname = event.require("datasetUrn"), None, metadata.get("partition")
            counts = (event.long("recordCount"), None)
        else:
            path = event.require("DatasetOutputPath")
            cut = _COMPACTION_OUTPUT.match(path)
            if cut is None:
                raise PoisonMessage(
                    f"metadata 'DatasetOutputPath'={shown(path)} is not "
                    "/<a>/<b>/<dataset>/<partition type>/<partition>"
                )
            dataset, ptype, pname = cut.group(1), cut.group(2), cut.group(3)
            counts = (event.long("RegularRecordCount"), event.long("LateRecordCount"))
        return {
            "cluster": self.cluster(event),
            "dataset": dataset,
            "partition_type": ptype,
            "partition_name": pname,
            "record_count": counts[0],
            "late_record_count": counts[1],
            "dedupe_status": metadata.get("dedupeStatus"),
            **self.job(event),
        }


class GobblinDistcpProcessor(GobblinProcessor):
    """Gobblin distcp-ng publish events -> ``stg_kafka_gobblin_distcp``.

    Accepts namespace ``gobblin.copy.CopyDataPublisher`` with name ``DatasetPublished``
    only, as WhereHows did (its ``FilePublished`` branch, which cut the partition out of
    ``TargetPath``, was disabled in the filter and is not reproduced); every other event
    gives ``[]``.

    Mapping (metadata key -> column), from WhereHows:

    * ``clusterIdentifier`` -> cluster (cluster-code match; required)
    * ``datasetUrn`` -> dataset (required), ``partition`` -> partition_name (required: it
      is NOT NULL and in the key; kept verbatim, e.g. ``["2016-07-10-00"]``);
      partition_type stays None.
    * ``upstreamTimestamp`` -> upsteam_timestamp (the DDL's spelling),
      ``originTimestamp`` -> origin_timestamp, ``SourcePath`` -> source_path,
      ``TargetPath`` -> target_path
    * job columns: job_context ``DistcpNG:<name>``, Azkaban keys as for compaction;
      event ``timestamp`` -> log_event_time.
    """

    name = "gobblin_distcp"
    description = "WhereHows Gobblin distcp-ng DatasetPublished -> stg_kafka_gobblin_distcp"
    table = "stg_kafka_gobblin_distcp"
    reader_schema = "wherehows/GobblinTrackingEvent_distcp_ng.avsc"
    key = ("dataset", "cluster", "partition_name", "log_event_time")
    final_partition = ("log_date", "to_date(timestamp_millis(log_event_time))")
    columns = (
        Column("cluster", nullable=False, doc="metadata clusterIdentifier, cluster-code match"),
        Column("dataset", nullable=False, doc="metadata datasetUrn"),
        Column("partition_type", doc="always None for DatasetPublished"),
        Column("partition_name", nullable=False, doc="metadata partition"),
        Column("upsteam_timestamp", "long", doc="metadata upstreamTimestamp"),
        Column("origin_timestamp", "long", doc="metadata originTimestamp"),
        Column("source_path", doc="metadata SourcePath"),
        Column("target_path", doc="metadata TargetPath"),
        *JOB_COLUMNS,
    )
    job_prefix = "DistcpNG"
    NAMESPACE = "gobblin.copy.CopyDataPublisher"
    NAMES = frozenset({"DatasetPublished"})

    def row(self, event: GobblinEvent) -> Row | None:
        if event.namespace != self.NAMESPACE or event.name not in self.NAMES:
            return None
        return {
            "cluster": self.cluster(event),
            "dataset": event.require("datasetUrn"),
            "partition_type": None,
            "partition_name": event.require("partition"),
            "upsteam_timestamp": event.long("upstreamTimestamp"),
            "origin_timestamp": event.long("originTimestamp"),
            "source_path": event.get("SourcePath"),
            "target_path": event.get("TargetPath"),
            **self.job(event),
        }


# The built-in mappings on a whole batch of Arrow columns (processors/gobblin_columns.py):
# these classes exactly; a subclass maps one message at a time (__init_subclass__).
_COLUMN_MAPPINGS: dict[type[GobblinProcessor], Callable[..., MappedColumns | None]] = {
    GobblinCompactionProcessor: gobblin_columns.compaction,
    GobblinDistcpProcessor: gobblin_columns.distcp,
}
for _mapped in _COLUMN_MAPPINGS:
    _mapped.maps_columns = True
