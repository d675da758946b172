"""WhereHows' Hive Metastore audit events -> ``stg_kafka_metastore_audit``.

Reads ``MetastoreTableAuditEvent`` and ``MetastorePartitionAuditEvent`` (WhereHows had
one topic for each and one processor for both) and emits one row per event, with the
columns of the staging DDL ``schemas/wherehows/kafka_tracking.sql``.

Where the mapping comes from: WhereHows' ``MetastoreAuditProcessor``, read (not copied)
in ``datahub-project/datahub`` (formerly ``linkedin/WhereHows``) at
``wherehows-backend/app/models/kafka/MetastoreAuditProcessor.java`` (commit 095831b6e560)
and ``metadata-etl/src/main/java/metadata/etl/kafka/MetastoreAuditProcessor.java``
(10339690a9ef), with ``wherehows-common/.../schemas/MetastoreAuditRecord.java``
(3d3b2a807502) for the column order. Differences are listed in the class docstring.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from processors.base import Column, Message, Processor, Row, with_coordinates
from processors.errors import PoisonMessage
from processors.gobblin import ClusterOptions, match_cluster_code, shown
from processors.jsonfast import bytes_as_base64, dumps_canonical

NO_PARTITION = "?"
"""time_partition (and instance) placeholder: both are NOT NULL and in the key."""

_KINDS = (
    # content field, event_name, old/new field names
    ("metastoreTableAuditContent", "MetastoreTableAuditEvent", "oldTable", "newTable"),
    (
        "metastorePartitionAuditContent",
        "MetastorePartitionAuditEvent",
        "oldPartition",
        "newPartition",
    ),
)


def _record(parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any] | None:
    value = parent.get(key)
    if value is not None and not isinstance(value, Mapping):
        raise PoisonMessage(f"field {where}{key}={shown(value)} is not a record")
    return value


def _str(rec: Mapping[str, Any], key: str, where: str) -> str | None:
    value = rec.get(key)
    return None if value is None else _req_str(rec, key, where)


def _req_str(rec: Mapping[str, Any], key: str, where: str) -> str:
    value = rec.get(key)
    if not isinstance(value, str):
        raise PoisonMessage(f"field {where}{key}={shown(value)} is missing or not a string")
    return value


def _long(rec: Mapping[str, Any], key: str, where: str) -> int:
    value = rec.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise PoisonMessage(f"field {where}{key}={shown(value)} is missing or not a long")
    return value


def _flag(rec: Mapping[str, Any], key: str, where: str) -> str:
    value = rec.get(key)
    if not isinstance(value, bool):
        raise PoisonMessage(f"field {where}{key}={shown(value)} is missing or not a boolean")
    return "true" if value else "false"


def info_json(record: Mapping[str, Any] | None) -> str | None:
    """JSON text of a table/partition record: sorted keys, compact, UTF-8 kept, bytes as
    standard base64 (the Table/Partition records have no bytes fields today)."""
    return None if record is None else dumps_canonical(record, bytes_as_base64)


def time_partition(values: object, where: str) -> str:
    """Partition values as WhereHows wrote them (Java ``List.toString``: ``[v1, v2]``);
    ``?`` when there are none (table events, or a partition without values)."""
    if values is None:
        return NO_PARTITION
    if not (isinstance(values, list) and all(isinstance(v, str) for v in values)):
        raise PoisonMessage(f"field {where}values={shown(values)} is not a list of strings")
    return "[" + ", ".join(values) + "]"


class MetastoreAuditProcessor(Processor):
    """Metastore table/partition audit events -> ``stg_kafka_metastore_audit``.

    The event type is told apart by its content field: ``metastoreTableAuditContent``
    or ``metastorePartitionAuditContent`` (neither: PoisonMessage, as in WhereHows).

    Mapping (field -> column), from WhereHows unless marked *kstage*:

    * auditHeader: ``server`` -> server (cluster-code match, see option ``clusters``),
      ``instance`` -> instance (*kstage*: ``?`` when null; WhereHows wrote the text
      ``null``), ``appName`` -> app_name
    * event_name: ``MetastoreTableAuditEvent`` or ``MetastorePartitionAuditEvent``
    * content: ``eventType`` -> event_type, ``timestamp`` -> log_event_time,
      ``metastoreThriftUri`` -> metastore_thrift_uri, ``metastoreVersion`` ->
      metastore_version (*kstage*: None when null, WhereHows sometimes wrote ``null``),
      ``isSuccessful`` / ``isDataDeleted`` -> is_successful / is_data_deleted as
      ``true`` / ``false``
    * the new table/partition, or the old one when there is no new one (drops); neither
      is a PoisonMessage: ``dbName`` -> db_name, ``tableName`` -> table_name,
      partition ``values`` -> time_partition (``[v1, v2]``, ``?`` for tables),
      ``location`` -> location, table ``owner`` -> owner (None for partitions),
      ``createTime`` -> create_time, ``lastAccessTime`` -> last_access_time
    * old_info / new_info: *kstage*: JSON text of the old / new record (see
      :func:`info_json`), None when absent. WhereHows first wrote Avro's ``toString``
      there, later nothing.

    ``reader_schema`` is None: the two event types are different Avro records, and a
    reader schema of one would not resolve the other (record names must match), so each
    is read with its writer schema (``wherehows/MetastoreTableAuditEvent.avsc`` and
    ``wherehows/MetastorePartitionAuditEvent.avsc``).

    Options:
        clusters: list of ``{code, short_name}`` to match ``server`` against (see
            :func:`processors.gobblin.match_cluster_code`); default: keep it as is.
    """

    name = "metastore_audit"
    formats = ("avro", "json")
    description = "WhereHows Metastore table/partition audit events -> stg_kafka_metastore_audit"
    table = "stg_kafka_metastore_audit"
    reader_schema = None
    key = ("db_name", "table_name", "time_partition", "instance", "log_event_time", "event_type")
    final_partition = ("log_date", "to_date(timestamp_millis(log_event_time))")
    columns = (
        Column("server", nullable=False, doc="auditHeader.server, cluster-code match"),
        Column("instance", nullable=False, doc="auditHeader.instance, '?' when null"),
        Column("app_name", nullable=False, doc="auditHeader.appName"),
        Column("event_name", nullable=False, doc="Metastore{Table,Partition}AuditEvent"),
        Column("event_type", nullable=False, doc="content eventType, e.g. ALTER_TABLE"),
        Column("log_event_time", "long", nullable=False, doc="content timestamp"),
        Column("metastore_thrift_uri", doc="content metastoreThriftUri"),
        Column("metastore_version", doc="content metastoreVersion"),
        Column("is_successful", doc="content isSuccessful: 'true' or 'false'"),
        Column("is_data_deleted", doc="content isDataDeleted: 'true' or 'false'"),
        Column("db_name", nullable=False, doc="new (else old) table/partition dbName"),
        Column("table_name", nullable=False, doc="new (else old) tableName"),
        Column("time_partition", nullable=False, doc="partition values '[a, b]', or '?'"),
        Column("location", doc="new (else old) location"),
        Column("owner", doc="new (else old) table owner; None for partitions"),
        Column("create_time", "long", doc="new (else old) createTime"),
        Column("last_access_time", "long", doc="new (else old) lastAccessTime"),
        Column("old_info", doc="JSON text of the old table/partition"),
        Column("new_info", doc="JSON text of the new table/partition"),
    )

    options_model = ClusterOptions
    options: ClusterOptions

    def __init__(self, options: Mapping[str, Any] | BaseModel | None = None) -> None:
        super().__init__(options)
        self._clusters = self.options.pairs()

    def transform(self, message: Message) -> Sequence[Row]:
        value = message.value
        if not isinstance(value, Mapping):
            raise PoisonMessage(f"expected a Metastore audit record, got {type(value).__name__}")
        content, (content_field, event_name, old_field, new_field) = self._content(value)
        header = _record(value, "auditHeader", "")
        if header is None:
            raise PoisonMessage("field auditHeader is missing")
        where = content_field + "."
        old = _record(content, old_field, where)
        new = _record(content, new_field, where)
        subject = new if new is not None else old
        if subject is None:
            raise PoisonMessage(f"{event_name}: both {where}{old_field} and {new_field} are null")
        at = f"{where}{new_field if new is not None else old_field}."
        row: Row = {
            "server": match_cluster_code(
                _req_str(header, "server", "auditHeader."), self._clusters
            ),
            "instance": _str(header, "instance", "auditHeader.") or NO_PARTITION,
            "app_name": _req_str(header, "appName", "auditHeader."),
            "event_name": event_name,
            "event_type": _req_str(content, "eventType", where),
            "log_event_time": _long(content, "timestamp", where),
            "metastore_thrift_uri": _str(content, "metastoreThriftUri", where),
            "metastore_version": _str(content, "metastoreVersion", where),
            "is_successful": _flag(content, "isSuccessful", where),
            "is_data_deleted": _flag(content, "isDataDeleted", where),
            "db_name": _req_str(subject, "dbName", at),
            "table_name": _req_str(subject, "tableName", at),
            "time_partition": time_partition(subject.get("values"), at),
            "location": _str(subject, "location", at),
            "owner": _str(subject, "owner", at),
            "create_time": _long(subject, "createTime", at),
            "last_access_time": _long(subject, "lastAccessTime", at),
            "old_info": info_json(old),
            "new_info": info_json(new),
        }
        return [with_coordinates(row, message)]

    @staticmethod
    def _content(value: Mapping[str, Any]) -> tuple[Mapping[str, Any], tuple[str, str, str, str]]:
        """The content record and its (field, event name, old, new field names)."""
        for kind in _KINDS:
            content = _record(value, kind[0], "")
            if content is not None:
                return content, kind
        raise PoisonMessage(
            "unknown Metastore audit event: neither "
            "metastoreTableAuditContent nor metastorePartitionAuditContent"
        )
