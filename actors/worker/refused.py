"""A compressed record batch refused at inflation (:mod:`actors.inflate`), in the fetch
loop: its offsets become poison, the partition flows on (issue 33).

The refusal is raised out of aiokafka's ``getmany`` while it iterates fetched batches,
and takes with it what that call had already taken: the records of the refused batch's
partition before the batch (``FetchResult.getall``'s list; that partition's position has
not moved) and whole lists of other partitions (``Fetcher.fetched_records``'
``drained``; their positions have moved past them). Both are in the refusal's
traceback, in those frames of aiokafka (pure Python): :func:`take_refused` takes them
from there, so nothing is fetched again and nothing is skipped. Then each offset of the
batch from the partition's position on becomes a
:class:`~actors.worker.records.RefusedRecord` (poison: dead-lettered with the batch's
coordinates, codec and cap, then committed like any message) and the partition is
sought past the batch.
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.consumer.fetcher import Fetcher as AIOKafkaFetcher
from aiokafka.consumer.fetcher import FetchResult

from actors.inflate import BatchRefused
from actors.worker.records import RefusedRecord

logger = logging.getLogger(__name__)

_GETALL = FetchResult.getall.__code__
_FETCHED = AIOKafkaFetcher.fetched_records.__code__


def _dropped(refusal: BatchRefused) -> tuple[dict[TopicPartition, list[Any]], list[Any]]:
    """What the raise took from ``getmany``: other partitions' records, and the refused
    partition's records before the batch (see the module doc)."""
    drained: dict[TopicPartition, list[Any]] = {}
    before: list[Any] = []
    tb = refusal.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code is _FETCHED:
            drained = dict(tb.tb_frame.f_locals["drained"])
        elif code is _GETALL:
            before = list(tb.tb_frame.f_locals["ret_list"])
        tb = tb.tb_next
    return drained, before


async def take_refused(consumer: AIOKafkaConsumer, refusal: BatchRefused, label: str
                       ) -> dict[TopicPartition, list[Any]]:
    """The records ``getmany`` would have returned, the refused batch's offsets as
    poison among them, and the partition sought past the batch (see the module doc)."""
    where = refusal.where
    if where is None:  # inflated outside aiokafka's fetcher: nothing to name
        raise refusal
    taken, before = _dropped(refusal)
    tp = where.tp
    if tp not in consumer.assignment():
        return taken  # revoked meanwhile: its new owner meets the batch
    # The position is not moved by the raise: the first offset taken before the call
    # (past the batch's first when a restart resumes inside the batch).
    first = max(await consumer.position(tp), where.first)
    reason = refusal.reason()
    logger.warning("%s: %s: offsets %d..%d are poison", label, reason, first, where.last)
    refused = [RefusedRecord(tp.topic, tp.partition, offset, where.timestamp, None, None,
                             reason=reason) for offset in range(first, where.last + 1)]
    consumer.seek(tp, where.last + 1)
    return {**taken, tp: [*before, *refused]}


__all__ = ["take_refused"]
