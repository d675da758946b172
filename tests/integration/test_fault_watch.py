"""The cluster fault tests' watch (tests/fault_watch.py) judges commits against the
dead-letter topic only on a read of that topic to its end: a read cut short (its fetches
went to a killed leader) is no read, so it cannot report acknowledged dead letters it has
not fetched yet as offsets committed ahead of the sink (seen in CI: test_cluster_faults'
dead-letter topic leader killed)."""

from __future__ import annotations

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.conftest import Fresh
from tests.fault_watch import Watch
from tests.kafkautil import create_topic, unique

pytestmark = pytest.mark.kafka


async def dead_letters(bootstrap: str, dlq: str, topic: str, offsets: range) -> None:
    """One dead letter per offset of ``topic``'s partition 0, headed as kstage heads them."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for offset in offsets:
            headers = [("kstage.error.topic", topic.encode()),
                       ("kstage.error.partition", b"0"),
                       ("kstage.error.offset", str(offset).encode())]
            await producer.send_and_wait(dlq, b'{"i": %d}' % offset, headers=headers)
    finally:
        await producer.stop()


async def commit(fresh: Fresh, offset: int) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=fresh.bootstrap, group_id=fresh.group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(fresh.topic, 0)])
        await consumer.commit({TopicPartition(fresh.topic, 0): offset})
    finally:
        await consumer.stop()


async def test_a_dead_letter_topic_read_cut_short_is_no_read(fresh: Fresh) -> None:
    dlq = unique("dlq")
    await create_topic(fresh.bootstrap, dlq)
    await dead_letters(fresh.bootstrap, dlq, fresh.topic, range(3))
    await commit(fresh, 3)
    cut = Watch(fresh.bootstrap, fresh.group, fresh.topic, 1, sinks=[],
                dead_letter_topic=dlq, dead_letter_read_s=0)
    whole = Watch(fresh.bootstrap, fresh.group, fresh.topic, 1, sinks=[],
                  dead_letter_topic=dlq)
    async with httpx.AsyncClient() as client:
        try:
            await cut.sample(client)  # no time to read: the sample is skipped
            assert (cut.history, cut.violations) == ([], [])
            await whole.sample(client)  # read to the end: every dead letter counts
            assert (whole.history, whole.violations) == ([{0: 3}], [])
            await commit(fresh, 5)  # offsets 3 and 4 are in no sink: caught
            await whole.sample(client)
            assert whole.violations == [
                "partition 0 committed at 5 but offsets [3, 4] are not in the sink"]
        finally:
            for watch in (cut, whole):
                await watch.__aexit__()
