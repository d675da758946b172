"""The table maintenance inside ``kstage run`` as every process of a group runs it by
default (``spark.maintenance``): only the process holding partition 0 of the table's topic
folds the table's small files beside its appends; killed (SIGKILL) in the middle of a
fold, the partition and the table's maintenance move to the other process; stopped
(SIGTERM) as a fold starts, it exits 0; every row is in the table once."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.iceberg_tables import rows
from tests.kafkautil import (
    KstageProcess,
    create_topic,
    last_assignment,
    produce,
    split_between,
    unique,
    wait_until,
    write_config,
)
from tests.lake import wait_committed

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TABLE = "stg_maintenance_owner"
LINE = f"maintenance: folded kstage.kstage.{TABLE} (staging): "  # a fold's result line
FOLDING = f"maintenance: folding kstage.kstage.{TABLE} (staging): "  # it starts
MINE = f"maintenance: table {TABLE}: maintained here"
LEFT = f"maintenance: table {TABLE}: left to the process holding partition 0"


def config(path: Path, broker: str, group: str, topic: str) -> Path:
    write_config(path, broker, group, [{"topic": topic, "processor": "test_unkeyed",
                                        "sink": {"type": "spark", "table": TABLE}}])
    data = yaml.safe_load(path.read_text())
    data["spark"] = {"master": "local[1]", "warehouse": str(path.parent / "warehouse"),
                     "flush_max_interval_s": 0.5,
                     # no round of the whole maintenance: the folds alone
                     "maintenance": {"every_s": 3600, "fold_files": 3,
                                     "min_input_files": 2}}
    path.write_text(yaml.safe_dump(data))
    return path


async def small_appends(broker: str, group: str, topic: str, procs: list[KstageProcess],
                        prefix: str, start: int, rounds: int) -> int:
    """``rounds`` batches of 10 messages, each committed before the next is sent (each an
    append of its own: small data files); the total sent since ``start``."""
    total = start
    for r in range(rounds):
        total += await produce(broker, topic, ({"k": f"{prefix}{r}-{i}"} for i in range(10)))
        await wait_committed(broker, group, topic, 2, total, procs, timeout=240)
    return total


@pytest.mark.timeout(600)  # two kstage JVMs
async def test_the_holder_of_partition_0_maintains_and_a_kill_moves_it_with_every_row_once(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    topic, group = unique("maint-owner"), unique("g-maint-owner")
    await create_topic(broker, topic, partitions=2)
    cfg = config(tmp_path / "kstage.yml", broker, group, topic)
    a, b = kstage(cfg), kstage(cfg)
    try:
        await wait_until(lambda: split_between(a, b, 2), timeout=120,
                         what="the partitions split between both processes")
        owner, other = (a, b) if 0 in last_assignment(a) else (b, a)
        sent = await small_appends(broker, group, topic, [a, b], "a", 0, 4)
        # Each process says at its first check whether it folds the table, and again when
        # that changes; from then on only the owner folds it.
        await other.wait_for_log(LEFT, timeout=60)
        await owner.wait_for_log(LINE, timeout=180)
        assert LINE not in other.output().rsplit(LEFT, 1)[1], other.output()[-3000:]
        assert MINE in owner.output(), owner.output()[-3000:]
        assert last_assignment(owner) == {0}, owner.output()[-3000:]  # no rebalance since

        # more small files: the owner folds them, and is killed as the fold starts
        folds = owner.output().count(FOLDING)
        sent = await small_appends(broker, group, topic, [a, b], "b", sent, 3)
        await owner.wait_for_log(FOLDING, timeout=180, count=folds + 1)
        owner.signal(signal.SIGKILL)
        await owner.wait(timeout=30)
        # the other process is assigned partition 0 and folds the table from then on
        await other.wait_for_log(MINE, timeout=180)
        sent = await small_appends(broker, group, topic, [other], "c", sent, 3)
        await other.wait_for_log(LINE, timeout=180)
        assert 0 in last_assignment(other), other.output()[-3000:]
        # stopped (SIGTERM) as its next fold starts: a clean stop, the fold abandoned
        folds = other.output().count(FOLDING)
        sent = await small_appends(broker, group, topic, [other], "d", sent, 3)
        await other.wait_for_log(FOLDING, timeout=180, count=folds + 1)
        other.signal(signal.SIGTERM)
        assert await other.wait(timeout=120) == 0, other.output()
        # the fold was abandoned (said so), or had just committed
        assert ("spark: stopping the session while a table job runs beside the appends "
                f"(the fold of kstage.kstage.{TABLE}): it is abandoned" in other.output()
                ) or other.output().count(LINE) > folds, other.output()
    finally:
        a.close()
        b.close()
    ids = Counter(r["id"] for r in rows(tmp_path / "warehouse", TABLE))
    # each message once (the processor's id is the JSON value as Python text)
    assert ids == Counter(str({"k": f"{p}{r}-{i}"}) for p, n in (("a", 4), ("b", 3), ("c", 3),
                                                              ("d", 3))
                          for r in range(n) for i in range(10))
    assert sent == 130
