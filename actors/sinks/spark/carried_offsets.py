"""The ``kstage.offsets`` of a pyiceberg append made again on the metadata its commit is
applied on: the Python twin of the fence jar's ``CarriedOffsets.onto`` (Spark's appends).

An append records every partition's offset in its snapshot: its own (those of its
``kstage.expect``) and the current snapshot's others, carried forward
(:func:`~actors.sinks.spark.iceberg.carried`), so the newest snapshot alone holds them all.
That is what a catalog serving the current snapshot only (a REST catalog such as Nessie)
shows, and what the pyiceberg snapshot expiry relies on. The writer computes the value
from the table as it loaded it; pyiceberg's optimistic retry after another writer's
commit (a compare-and-swap lost, a 409) applies the same summary on the reloaded base,
and the other writer's new offsets would leave the current snapshot (a reader of that
snapshot alone, or of the history once the other writer's snapshot expired, would resume
its partitions from older offsets and write their rows again).

:func:`onto` is called by both pyiceberg catalogs at the moment of the commit, on the base
the commit is applied on (:mod:`~actors.sinks.spark.pyiceberg_catalog`'s
``FencedSqlCatalog``, :mod:`~actors.sinks.spark.pyiceberg_rest`'s catalog): the value is
the base's current ``kstage.offsets`` with the append's own partitions, the higher of
each. A snapshot that records no offsets and no reset (a rewrite) gets the base's current
ones; one with offsets but no ``kstage.expect`` (set by hand: maintenance, a reset) keeps
its own. pyiceberg is imported only inside functions.
"""

from __future__ import annotations

from typing import Any

from actors.sinks.spark import iceberg
from actors.sinks.spark.iceberg import strict_offsets as strict
from actors.sinks.spark.offset_history import RESET


def merged(current: str | None, offsets: str, expect: str) -> str | None:
    """The ``kstage.offsets`` an append records on a base whose current snapshot records
    ``current`` (None: none; ignored when malformed, as readers ignore it): ``current``'s
    offsets with those of ``offsets`` for the partitions of ``expect`` (the append's own),
    the higher of each (:func:`~actors.sinks.spark.iceberg.carried`). None when
    ``offsets`` or ``expect`` is malformed (left as it is: the fence refuses a malformed
    expectation)."""
    mine, own = strict(offsets), strict(expect)
    if mine is None or own is None:
        return None
    base = (strict(current) or {}) if current is not None else {}
    return iceberg.format_offsets(iceberg.carried(
        base, {stream: offset for stream, offset in mine.items() if stream in own}))


def _redone(recorded: str | None, summary: dict[str, str]) -> str | None:
    """The ``kstage.offsets`` a snapshot added with ``summary`` gets on a base recording
    ``recorded``; None: left as it is."""
    offsets, expect = summary.get(iceberg.OFFSETS), summary.get(iceberg.EXPECT)
    if offsets is None:
        # a commit that records no offsets of its own (a rewrite): the current ones
        if recorded is not None and RESET not in summary and strict(recorded) is not None:
            return recorded
        return None
    if expect is None:
        return None  # offsets set by hand (maintenance, a reset): as they are
    value = merged(recorded, offsets, expect)
    if value is None or strict(value) == strict(offsets):
        return None
    return value


def onto(base: Any, updates: tuple[Any, ...]) -> tuple[Any, ...]:
    """``updates`` (a commit's pyiceberg table updates on the table metadata ``base``)
    with the ``kstage.offsets`` of each snapshot they add made again on ``base``
    (:func:`_redone`); ``updates`` itself when nothing changes or ``base`` is None (a new
    table)."""
    if base is None:
        return updates
    from pyiceberg.table.snapshots import Summary  # only with appends: pyiceberg
    from pyiceberg.table.update import AddSnapshotUpdate

    main = base.refs.get("main")  # the branch the fence reads (recorded_offsets)
    head = main.snapshot_id if main is not None else base.current_snapshot_id
    by_id = {snapshot.snapshot_id: snapshot for snapshot in base.snapshots}
    current = by_id.get(head) if head is not None else None
    recorded = None
    if current is not None and current.summary is not None:
        found = current.summary.additional_properties.get(iceberg.OFFSETS)
        recorded = None if found is None else str(found)
    known = set(by_id)
    redone: list[Any] = []
    changed = False
    for update in updates:
        snapshot = update.snapshot if isinstance(update, AddSnapshotUpdate) else None
        if snapshot is not None and snapshot.summary is not None \
                and snapshot.snapshot_id not in known:
            props = {k: str(v) for k, v in snapshot.summary.additional_properties.items()}
            value = _redone(recorded, props)
            if value is not None:
                props[iceberg.OFFSETS] = value
                summary = Summary(snapshot.summary.operation, **props)
                update = AddSnapshotUpdate(
                    snapshot=snapshot.model_copy(update={"summary": summary}))
                changed = True
        redone.append(update)
    return tuple(redone) if changed else updates


__all__ = ["merged", "onto"]
