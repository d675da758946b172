"""WhereHows' Gobblin Lumos publish events -> ``stg_kafka_gobblin_lumos``.

Lumos is LinkedIn's database-snapshot ingestion on Gobblin; it reports each published
snapshot or delta as a ``GobblinTrackingEvent``. The mapping follows WhereHows'
``GobblinTrackingLumosProcessor`` (``metadata-etl/src/main/java/metadata/etl/kafka/``,
read at commit 11158e0b9f16 of ``datahub-project/datahub``, formerly
``linkedin/WhereHows``) and its ``GobblinTrackingLumosRecord`` for the column order; no
code was copied. Shared helpers and the kstage-wide decisions (None instead of 0, poison
on unparsable numbers, the ``clusters`` option) are in :mod:`processors.gobblin`.
"""

from __future__ import annotations

import re

from processors.base import Column, Row
from processors.gobblin import JOB_COLUMNS, GobblinEvent, GobblinProcessor, parse_long

# 'prod-lva1' -> deployment env 'prod', datacenter 'lva1' (first match anywhere)
_COLO = re.compile(r"(\w+)-(\w+)", re.ASCII)
# the last '<digits>-<word>-<digits>' directory that has something after it
_DIR_PARTITION = re.compile(r"^.*/(\d+-\w+-\d+)/.*$", re.ASCII)
# '<digits>-<word>-<digits>' anywhere; group 1 is the leading number
_STAMPED = re.compile(r"(\d+)-\w+-\d+", re.ASCII)

DROPDATE_MIN = 1_460_000_000_000
"""A ``Dropdate`` below this (epoch ms, April 2016) is not trusted (WhereHows' cut-off)."""


def _leading_number(text: str | None, what: str) -> int | None:
    """The leading number of the first ``<n>-<word>-<m>`` in ``text``, else None."""
    match = _STAMPED.search(text) if text is not None else None
    return None if match is None else parse_long(match.group(1), what)


def is_epoch_stamped(partition: str) -> bool:
    """True when the partition's leading number is an epoch (seconds or milliseconds).

    WhereHows tested ``146\\d{7,10}-\\w+-\\d+``, which only recognised 2016 timestamps.
    kstage decision: a 10-digit number >= 1460000000 (epoch seconds) or a 13-digit one
    >= 1460000000000 (epoch ms) counts, i.e. the same cut-off from April 2016 onwards.
    """
    match = _STAMPED.search(partition)
    if match is None:
        return False
    digits = match.group(1)
    return (len(digits) == 10 and int(digits) >= DROPDATE_MIN // 1000) or (
        len(digits) == 13 and int(digits) >= DROPDATE_MIN
    )


class GobblinLumosProcessor(GobblinProcessor):
    """Lumos ``SnapshotPublished`` / ``DeltaPublished`` events -> ``stg_kafka_gobblin_lumos``.

    Accepts events named ``SnapshotPublished`` or ``DeltaPublished`` whatever their
    namespace (WhereHows did not check the namespace on this topic); other names give
    ``[]``.

    Mapping (metadata key -> column), from WhereHows unless marked *kstage*:

    * ``clusterIdentifier`` -> cluster (cluster-code match; required)
    * ``datasetUrn`` -> dataset (required); ``TargetDirectory`` -> location (required)
    * partition_type is always ``snapshot``.
    * SnapshotPublished: ``partition`` -> partition_name; subpartition_* stay None.
    * DeltaPublished: partition_name is the last ``<n>-<word>-<m>`` directory of
      ``TargetDirectory`` (None if there is none); subpartition_type ``_delta``,
      ``partition`` -> subpartition_name.
    * max_data_date_epoch3: ``Dropdate`` when it is >= 1460000000000; otherwise the
      leading number of ``TargetDirectory`` (snapshot) or of ``partition`` (delta).
      *kstage*: None when neither gives a number (WhereHows wrote 0).
    * max_data_key: the leading number of ``partition`` when that number is not an epoch
      timestamp (see :func:`is_epoch_stamped`, whose cut-off is a kstage
      generalisation), else None (WhereHows wrote 0).
    * ``recordCount`` -> record_count
    * ``DatasourceColo`` such as ``prod-lva1`` -> source_deployment_env ``prod`` and
      source_datacenter ``lva1``; without a dash, all of it is the datacenter and the
      env is None. ``Database`` -> source_database, ``Table`` -> source_table.
    * job columns: job_context ``Lumos:<name>``, ``azkabanProjectName`` -> project_name,
      ``azkabanFlowId`` -> flow_name, ``azkabanJobId`` -> job_name, ``azkabanExecId`` ->
      flow_exec_id; event ``timestamp`` -> log_event_time.
    """

    name = "gobblin_lumos"
    description = "WhereHows Gobblin Lumos snapshot/delta published -> stg_kafka_gobblin_lumos"
    table = "stg_kafka_gobblin_lumos"
    reader_schema = "wherehows/GobblinTrackingEvent_lumos.avsc"
    key = ("dataset", "cluster", "log_event_time")
    final_partition = ("log_date", "to_date(timestamp_millis(log_event_time))")
    columns = (
        Column("cluster", nullable=False, doc="metadata clusterIdentifier, cluster-code match"),
        Column("dataset", nullable=False, doc="metadata datasetUrn"),
        Column("location", nullable=False, doc="metadata TargetDirectory"),
        Column("partition_type", doc="always 'snapshot'"),
        Column("partition_name", doc="partition (snapshot) or cut from TargetDirectory"),
        Column("subpartition_type", doc="'_delta' for DeltaPublished"),
        Column("subpartition_name", doc="partition (DeltaPublished)"),
        Column("max_data_date_epoch3", "long", doc="Dropdate, or derived (epoch ms)"),
        Column("max_data_key", "long", doc="leading number of a non-epoch partition"),
        Column("record_count", "long", doc="metadata recordCount"),
        Column("source_datacenter", doc="DatasourceColo after the dash"),
        Column("source_deployment_env", doc="DatasourceColo before the dash"),
        Column("source_database", doc="metadata Database"),
        Column("source_table", doc="metadata Table"),
        *JOB_COLUMNS,
    )
    job_prefix = "Lumos"
    NAMES = frozenset({"SnapshotPublished", "DeltaPublished"})

    def row(self, event: GobblinEvent) -> Row | None:
        if event.name not in self.NAMES:
            return None
        target = event.require("TargetDirectory")
        partition = event.get("partition")
        what = "metadata 'partition'"
        if event.name == "SnapshotPublished":
            partition_name, sub_type, sub_name = partition, None, None
            fallback_epoch = _leading_number(target, "metadata 'TargetDirectory'")
        else:
            cut = _DIR_PARTITION.match(target)
            partition_name = cut.group(1) if cut else None
            sub_type, sub_name = "_delta", partition
            fallback_epoch = _leading_number(partition, what)
        dropdate = event.long("Dropdate")
        trusted = dropdate is not None and dropdate >= DROPDATE_MIN
        max_date = dropdate if trusted else fallback_epoch
        max_key = None
        if partition is not None and not is_epoch_stamped(partition):
            max_key = _leading_number(partition, what)
        env, datacenter = self._colo(event.get("DatasourceColo"))
        return {
            "cluster": self.cluster(event),
            "dataset": event.require("datasetUrn"),
            "location": target,
            "partition_type": "snapshot",
            "partition_name": partition_name,
            "subpartition_type": sub_type,
            "subpartition_name": sub_name,
            "max_data_date_epoch3": max_date,
            "max_data_key": max_key,
            "record_count": event.long("recordCount"),
            "source_datacenter": datacenter,
            "source_deployment_env": env,
            "source_database": event.get("Database"),
            "source_table": event.get("Table"),
            **self.job(event),
        }

    @staticmethod
    def _colo(colo: str | None) -> tuple[str | None, str | None]:
        """(deployment env, datacenter) of a ``DatasourceColo`` such as ``prod-lva1``."""
        if colo is None:
            return None, None
        match = _COLO.search(colo)
        return (match.group(1), match.group(2)) if match else (None, colo)
