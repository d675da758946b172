"""Several `kstage run` processes in one group, SIGKILL, restarts: nothing is lost."""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from service.broker import free_port
from tests.kafkautil import (
    committed,
    create_topic,
    produce,
    read_jsonl,
    status_port,
    unique,
    wait_readyz,
    wait_until,
    write_config,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


async def wait_committed(broker: str, group: str, topic: str, parts: int, total: int) -> None:
    deadline = time.monotonic() + 30
    while sum((await committed(broker, group, topic, parts)).values()) != total:
        assert time.monotonic() < deadline, f"offsets of {group} never summed to {total}"
        await asyncio.sleep(0.2)


def coords(rows: list[dict[str, object]]) -> Counter[tuple[object, object]]:
    return Counter((r["_partition"], r["_offset"]) for r in rows)


@pytest.mark.parametrize("fresh", [4], indirect=True)
async def test_two_processes_share_partitions_and_take_over(fresh, broker, tmp_path: Path, kstage):
    topic, group = fresh.topic, fresh.group
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [
        {"topic": topic, "processor": "json_rows", "sink": {"type": "jsonl", "path": "${OUT}"}},
    ])
    out_a, out_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a = kstage(cfg, env={"OUT": str(out_a)})
    await a.wait_for_log("assigned partitions [0, 1, 2, 3]")
    b = kstage(cfg, env={"OUT": str(out_b)})
    await b.wait_for_log("assigned partitions [")
    await a.wait_for_log("assigned partitions [", count=2)  # A rebalanced to its share

    await produce(broker, topic, ({"i": i} for i in range(400)), partition_of=lambda i: i % 4)
    await wait_until(lambda: len(read_jsonl(out_a)) + len(read_jsonl(out_b)) >= 400,
                     what="400 rows")
    rows_a, rows_b = read_jsonl(out_a), read_jsonl(out_b)
    assert rows_a and rows_b, "both members must have received partitions"
    parts_a = {r["_partition"] for r in rows_a}
    parts_b = {r["_partition"] for r in rows_b}
    assert not parts_a & parts_b and parts_a | parts_b == {0, 1, 2, 3}

    await wait_committed(broker, group, topic, 4, 400)

    a.signal(signal.SIGKILL)
    await produce(broker, topic, ({"i": i} for i in range(400, 800)),
                  partition_of=lambda i: i % 4)
    # B takes A's partitions after A's session expires, and lands everything.
    await wait_until(lambda: len(read_jsonl(out_a)) + len(read_jsonl(out_b)) >= 800,
                     timeout=60, what="800 rows after the takeover")
    b.signal(signal.SIGTERM)
    assert await b.wait() == 0, b.output()
    everything = coords(read_jsonl(out_a) + read_jsonl(out_b))
    assert len(everything) == 800
    assert set(everything.values()) == {1}, "every message lands once"
    assert sorted(r["i"] for r in read_jsonl(out_a) + read_jsonl(out_b)) == list(range(800))
    assert sum((await committed(broker, group, topic, 4)).values()) == 800


async def test_sigkill_mid_batch_replays_only_uncommitted(fresh, broker, tmp_path: Path, kstage):
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, ({"i": i} for i in range(2000)))
    cfg = write_config(
        tmp_path / "kstage.yml", broker, group,
        [{"topic": topic, "processor": "test_slow", "options": {"delay_s": 0.002},
          "sink": {"type": "jsonl", "path": "${OUT}"}}],
        commit={"max_messages": 300, "max_interval_s": 60}, max_poll_records=50,
    )
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    run1 = kstage(cfg, env={"OUT": str(first)})
    await wait_until(lambda: len(read_jsonl(first)) >= 700, timeout=60, what="700 rows")
    run1.signal(signal.SIGKILL)
    await run1.wait()
    done = (await committed(broker, group, topic, 1))[0]
    written = [r["_offset"] for r in read_jsonl(first)]
    assert 300 <= done < len(written), (done, len(written))  # some acked work uncommitted
    assert written == list(range(len(written)))

    run2 = kstage(cfg, "--drain", env={"OUT": str(second)})
    assert await run2.wait(timeout=90) == 0, run2.output()
    replayed = [r["_offset"] for r in read_jsonl(second)]
    assert replayed == list(range(done, 2000)), "restart resumes at the committed offset"
    assert (await committed(broker, group, topic, 1))[0] == 2000


@pytest.mark.parametrize("fresh", [2], indirect=True)
async def test_revoke_commits_drained_work_before_handing_over(fresh, broker, tmp_path, kstage):
    """A joins with acked-but-uncommitted work; B joins: A commits on revoke, no replay."""
    topic, group = fresh.topic, fresh.group
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "json_rows",
                         "sink": {"type": "jsonl", "path": "${OUT}"}}],
                       commit={"max_messages": 100000, "max_interval_s": 3600})
    out_a, out_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a = kstage(cfg, env={"OUT": str(out_a)})
    await a.wait_for_log("assigned partitions [0, 1]")
    await produce(broker, topic, ({"i": i} for i in range(200)), partition_of=lambda i: i % 2)
    await wait_until(lambda: len(read_jsonl(out_a)) == 200, what="A to write 200 rows")
    assert sum((await committed(broker, group, topic, 2)).values()) == -2, "nothing committed yet"
    b = kstage(cfg, env={"OUT": str(out_b)})
    await a.wait_for_log("revoked partitions [0, 1]")
    await b.wait_for_log("assigned partitions [")
    assert sum((await committed(broker, group, topic, 2)).values()) == 200
    await produce(broker, topic, ({"i": i} for i in range(200, 210)), partition_of=lambda i: i % 2)
    await wait_until(lambda: len(read_jsonl(out_a)) + len(read_jsonl(out_b)) == 210,
                     what="210 rows")
    for proc in (a, b):
        proc.signal(signal.SIGTERM)
    assert await a.wait() == 0 and await b.wait() == 0
    rows = read_jsonl(out_a) + read_jsonl(out_b)
    assert sorted(r["i"] for r in rows) == list(range(210)), "no replay after the handover"


@pytest.mark.parametrize("fresh", [2], indirect=True)
async def test_two_processes_one_config_one_host_share_the_status_port(
        fresh, broker, tmp_path, kstage):
    """Scale out by starting the same config twice: the second takes the next port."""
    topic, group = fresh.topic, fresh.group
    port = free_port()
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "json_rows",
                         "sink": {"type": "jsonl", "path": "${OUT}"}}],
                       service={"http_port": port, "http_host": "127.0.0.1"})
    out_a, out_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a = kstage(cfg, env={"OUT": str(out_a)})
    port_a = await status_port(a)  # port, unless another process on this host took it
    b = kstage(cfg, env={"OUT": str(out_b)})
    await b.wait_for_log("assigned partitions [", timeout=60)
    took = re.search(rf"service.http_port {port} on 127.0.0.1 is in use \(another process "
                     r"sharing this config\?\): the status server of this process "
                     rf"\(pid {b.proc.pid}\) is on port (\d+) instead", b.output())
    assert took, b.output()
    port_b = await status_port(b)
    assert int(took.group(1)) == port_b and port_b not in (port, port_a)
    await produce(broker, topic, ({"i": i} for i in range(100)), partition_of=lambda i: i % 2)
    await wait_until(lambda: len(read_jsonl(out_a)) + len(read_jsonl(out_b)) == 100,
                     what="100 rows")
    assert read_jsonl(out_a) and read_jsonl(out_b), "both processes consume in the group"
    for proc, its_port in ((a, port_a), (b, port_b)):  # awaited: not one read at a moment
        await wait_readyz(f"http://127.0.0.1:{its_port}", proc, 200)
    for proc in (a, b):
        proc.signal(signal.SIGTERM)
    assert await a.wait() == 0, a.output()
    assert await b.wait() == 0, b.output()


async def test_group_instance_id_with_two_topics_does_not_fence_itself(broker, tmp_path,
                                                                       kstage):
    """Static membership: each worker (one per topic) is its own member of the group."""
    t1, t2, group = unique("static1"), unique("static2"), unique("g-static")
    for topic in (t1, t2):
        await create_topic(broker, topic)
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": t, "processor": "json_rows",
                         "sink": {"type": "jsonl", "path": f"{t}.jsonl"}} for t in (t1, t2)])
    data = yaml.safe_load(cfg.read_text())
    data["kafka"]["consumer_config"] = {"group.instance.id": "kstage-host-1"}
    cfg.write_text(yaml.safe_dump(data))
    proc = kstage(cfg)
    await proc.wait_for_log("assigned partitions [0]", count=2, timeout=60)
    for topic in (t1, t2):
        await produce(broker, topic, ({"i": i} for i in range(20)))
    await wait_until(lambda: all(len(read_jsonl(tmp_path / f"{t}.jsonl")) == 20
                                 for t in (t1, t2)), what="20 rows of each topic")
    await wait_committed(broker, group, t1, 1, 20)
    await wait_committed(broker, group, t2, 1, 20)
    proc.signal(signal.SIGTERM)
    assert await proc.wait() == 0, proc.output()
    out = proc.output()
    assert "crashed" not in out and "restarting" not in out and "enced" not in out, out
