"""Cluster faults on a 3-node Apache Kafka cluster (KRaft, each node a broker and a
controller, replication factor 3, ``min.insync.replicas=2``) with a producer running
(``acks=all``) and kstage consuming.

Every test asserts, through :class:`tests.fault_watch.Watch`: every acknowledged event is
in the sink or the dead letters; no offset was committed ahead of the sink (sampled every
half second: committed offsets first, then the sink); committed offsets never moved
backwards; ``/readyz`` named a reason whenever it answered 503, and did so while kstage
could not progress; and kstage recovered by itself within :data:`RECOVERY_S` of the
fault's end (everything acknowledged landed, every partition committed up to its
high-water mark, ``/readyz`` 200 again).

The cluster is the module's (three JVMs of 256 MB heap); each test heals what it broke
(:func:`whole`). Every node also listens behind a TCP proxy (:mod:`tests.tcp_proxy`),
advertised as the proxy's address, so a kstage member bootstrapped through the proxies
can be cut off from every broker while the others still reach them.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import TopicPartition

from actors.kafka import build_consumer
from actors.worker_status import NO_LEADER, PartitionStatus
from service.broker import free_port
from service.ops.dlq.topic import topic_consumer
from settings import load_settings
from tests.apache_kafka import KafkaCluster, Listener
from tests.fault_watch import AckedProducer, Watch, settle, wait_ready
from tests.http_server import HttpTestServer
from tests.kafkautil import (
    KstageProcess,
    create_topic,
    produce,
    read_jsonl,
    unique,
    wait_until,
    write_config,
)
from tests.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.apache_kafka]

CONTROL_TOKEN = "ctl-token-of-the-cluster-tests-01"  # noqa: S105 - a fake secret
RECOVERY_S = 60  # the stated bound: from the fault's end to everything landed and ready
REBALANCING = ("PreparingRebalance", "CompletingRebalance")  # a classic group's states
PARTITIONS = 3


@dataclass
class Cluster:
    """The module's cluster, and the proxies in front of its nodes."""

    kafka: KafkaCluster
    proxies: dict[int, TcpProxy]

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap

    @property
    def proxied_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p.port}" for p in self.proxies.values())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    listeners = {i: Listener("PROXIED", "PLAINTEXT", advertised_port=free_port())
                 for i in (1, 2, 3)}
    # Leaderships stay where a fault moved them (no preferred-leader election every
    # 5 min): test_an_offset_reset_asks_the_leader_that_took_over needs its move to last.
    kafka = KafkaCluster(tmp_path_factory.mktemp("cluster"), size=3, heap_mb=256,
                         listeners=lambda i: [listeners[i]],
                         properties={"auto.leader.rebalance.enable": "false"})
    proxies = {i: TcpProxy(("127.0.0.1", listener.port), port=listener.advertised_port)
               for i, listener in listeners.items()}
    for proxy in proxies.values():
        proxy.__enter__()
    try:
        try:
            kafka.start()
        except Exception as exc:  # noqa: BLE001 - a cluster that cannot start fails loudly
            pytest.fail(f"the 3-node Apache Kafka cluster did not start: {exc}", pytrace=False)
        yield Cluster(kafka, proxies)
    finally:
        kafka.kill()
        for proxy in proxies.values():
            proxy.__exit__()


@pytest.fixture
async def whole(cluster: Cluster) -> AsyncIterator[Cluster]:
    """The cluster, made whole again after the test: proxies healed, every node
    running, every partition in sync."""
    yield cluster
    for proxy in cluster.proxies.values():
        proxy.heal()
    for node in cluster.kafka.nodes:
        if not node.running:
            node.start()
            node.wait_listening()
    await cluster.kafka.wait_brokers({1, 2, 3})
    await cluster.kafka.wait_in_sync()


def member(tmp_path: Path, kstage: type[KstageProcess], name: str, bootstrap: str,
           group: str, topic: str, *, sink: dict[str, Any] | None = None,
           failure: dict[str, Any] | None = None, env: dict[str, str] | None = None,
           grace_s: float = 10) -> tuple[KstageProcess, int]:
    """A ``kstage run`` member writing JSON lines to ``<name>.jsonl``; (process, port).
    ``grace_s``: its ``shutdown_grace_s``, which also bounds a revoke's drain."""
    port = free_port()
    cfg = write_config(
        tmp_path / f"{name}.yml", bootstrap, group,
        [{"topic": topic, "processor": "test_flaky" if failure else "json_rows",
          "sink": sink or {"type": "jsonl", "path": str(tmp_path / f"{name}.jsonl")}}],
        failure=failure, service={"http_port": port, "http_host": "127.0.0.1",
                                  "status_interval_s": 5},
        supervisor={"shutdown_grace_s": grace_s, "sink_unready_after_s": 5})
    return kstage(cfg, env=env), port


async def stop(*procs: KstageProcess) -> None:
    for proc in procs:
        proc.signal(signal.SIGTERM)
    for proc in procs:
        assert await proc.wait(60) == 0, proc.output()


@dataclass
class Scenario:
    """A topic (3 partitions, RF 3), kstage member ``a`` consuming it into JSON lines,
    the :class:`Watch` and an acknowledged producer running: :meth:`start`, break
    something, then :meth:`settle` with the time the fault ended."""

    cluster: Cluster
    tmp_path: Path
    kstage: type[KstageProcess]
    name: str
    producer_cls: type[AckedProducer] = AckedProducer
    failure: dict[str, Any] | None = None
    dead_letter_topic: str | None = None
    # Member a writes to this HTTP API (one request per row) instead of a file, so the
    # test can hold its writes (:meth:`HttpTestServer.hang`), and with them a's revoke.
    api: HttpTestServer | None = None

    def __post_init__(self) -> None:
        self.topic, self.group = unique(self.name), unique(f"g-{self.name}")
        self.members: dict[str, KstageProcess] = {}
        api = self.api
        self.watch = Watch(self.cluster.bootstrap, self.group, self.topic, PARTITIONS, [],
                           None, dead_letter_topic=self.dead_letter_topic,
                           rows=None if api is None else lambda: [
                               r.json for r in list(api.requests) if r.json])
        self.producer = self.producer_cls(self.cluster.bootstrap, self.topic)

    async def start(self) -> Scenario:
        await create_topic(self.cluster.bootstrap, self.topic, PARTITIONS, replication=3)
        if self.dead_letter_topic is not None:
            await create_topic(self.cluster.bootstrap, self.dead_letter_topic, 1,
                               replication=3)
        self.add_member("a")
        await self.members["a"].wait_for_log("assigned partitions [0, 1, 2]", timeout=60)
        await self.watch.__aenter__()
        await self.producer.__aenter__()
        await self.producer.wait_acked(100)
        await wait_until(lambda: len(self.watch.landed_offsets()) >= 50, 60,
                         "kstage consuming")
        return self

    def add_member(self, name: str) -> KstageProcess:
        failure = None if self.failure is None else dict(self.failure)
        if name == "a" and self.api is not None:
            # a held write is retried (2 s timeout) until the test lets it go; a revoke
            # drains for up to 30 s (half the rebalance timeout; shutdown_grace_s 30)
            proc, port = member(
                self.tmp_path, self.kstage, name, self.cluster.bootstrap, self.group,
                self.topic, failure=failure, grace_s=30, env={"URL": f"{self.api.url}/a"},
                sink={"type": "http", "url": "${URL}", "timeout_s": 2, "max_retries": 1000,
                      "min_backoff_s": 0.1, "max_backoff_s": 0.5})
        else:
            proc, port = member(self.tmp_path, self.kstage, name, self.cluster.bootstrap,
                                self.group, self.topic, failure=failure)
            self.watch.sinks.append(self.tmp_path / f"{name}.jsonl")
        self.members[name] = proc
        self.watch.status_ports[name] = port
        return proc

    async def settle(self, fault_end: float) -> None:
        """Produce some more, stop producing, and assert: everything acknowledged
        landed and was committed within :data:`RECOVERY_S` of ``fault_end``, no
        violation, every 503 with a reason, every member ready again in time."""
        await self.producer.wait_acked(len(self.producer.acked) + 100)
        await self.producer.stop()
        want = {n for n in self.producer.acked if not self.poison(n)}
        await settle(self.watch, want, RECOVERY_S)
        for name in self.members:
            await wait_ready(self.watch, name, fault_end, RECOVERY_S)
        recovered_s = time.monotonic() - fault_end
        assert recovered_s < RECOVERY_S, f"recovered {recovered_s:.0f}s after the fault"
        await self.watch.__aexit__()
        assert not self.watch.violations, self.watch.violations
        for name in self.members:
            assert_ready_story(self.watch, name, fault_end)
        await stop(*self.members.values())

    def poison(self, n: int) -> bool:
        return self.producer_cls is PoisonProducer and PoisonProducer.poison(n)

    async def close(self) -> None:
        await self.producer.stop()
        await self.watch.__aexit__()


@pytest.fixture
async def scenario(whole: Cluster, tmp_path: Path, kstage: type[KstageProcess]
                   ) -> AsyncIterator[Callable[..., Scenario]]:
    """Scenarios of the test (stopped at the end, whatever happened)."""
    made: list[Scenario] = []

    def make(name: str, **kwargs: Any) -> Scenario:
        made.append(Scenario(whole, tmp_path, kstage, name, **kwargs))
        return made[-1]

    yield make
    for each in made:
        await each.close()


def assert_ready_story(watch: Watch, name: str, fault_end: float) -> None:
    """Every 503 named its reasons, and the member was ready again within the bound."""
    for answer in watch.readiness.get(name, []):
        if answer.status == 503:
            assert answer.reasons, f"{name}: /readyz 503 without a reason"
    again = watch.ready_again(name, fault_end)
    assert again is not None, f"{name} not ready at the end: " + str(
        [(round(r.at - fault_end, 1), r.status) for r in watch.readiness[name]])
    assert again - fault_end < RECOVERY_S, f"{name} ready {again - fault_end:.0f}s after"


async def test_leader_of_the_consumed_partitions_killed_then_restarted(
        whole: Cluster, scenario: Callable[..., Scenario]) -> None:
    run = await scenario("leader").start()
    leader = whole.kafka.node(await whole.kafka.leader(run.topic, 0))
    leader.kill()  # SIGKILL mid-stream
    # The cluster takes writes again once the controller fenced the dead broker
    # (broker.session.timeout.ms, 9 s) and moved its leaderships.
    await run.producer.wait_acked(len(run.producer.acked) + 300, timeout=60)
    leader.start()
    leader.wait_listening()
    await whole.kafka.wait_in_sync([run.topic])
    await run.settle(time.monotonic())


async def test_rolling_restart_of_every_broker_while_consuming(
        whole: Cluster, scenario: Callable[..., Scenario]) -> None:
    run = await scenario("rolling").start()
    for node in whole.kafka.nodes:  # what an operator does: one at a time, in sync
        acked = len(run.producer.acked)
        node.stop()  # SIGTERM: a controlled shutdown moves its leaderships first
        await asyncio.sleep(2)
        node.start()
        node.wait_listening()
        await whole.kafka.wait_brokers({1, 2, 3})
        await whole.kafka.wait_in_sync()
        assert len(run.producer.acked) > acked, f"no writes while node {node.node_id} restarted"
    await run.settle(time.monotonic())


async def test_coordinator_killed_during_a_rebalance(
        whole: Cluster, scenario: Callable[..., Scenario]) -> None:
    """Member b's join starts a rebalance while member a's writes are held: a's revoke
    drains its in-flight work before a rejoins, so the group stays in its rebalance
    until the test lets the writes go (or a's drain bound, 30 s, passes), however slow
    the machine. The group's coordinator is killed in that rebalance."""
    with HttpTestServer() as api:
        run = await scenario("coord", api=api).start()
        coordinator = whole.kafka.node(await whole.kafka.coordinator(run.group))
        a = run.members["a"]
        held_at = time.monotonic()
        api.hang(300, times=1_000_000)  # a's writes hang from here on (retried, unanswered)
        await wait_until(lambda: any(r.at > held_at and r.answered_at is None
                                     for r in list(api.requests)), 60, "a write of a held")
        run.add_member("b")  # its join starts a rebalance; a's revoke cannot drain
        await whole.kafka.wait_group_state(run.group, REBALANCING, timeout_s=120)
        # a has not rejoined: its revoke (logged when it ends) still waits for its writes
        assert "revoked partitions" not in a.output(), a.output()[-3000:]
        coordinator.kill()  # mid-rebalance: the group moves to another node
        api.release()  # a's next attempt of each write is answered: its drain ends
        await asyncio.sleep(5)  # the coordinator stays down for a while
        coordinator.start()
        coordinator.wait_listening()
        await whole.kafka.wait_in_sync()
        fault_end = time.monotonic()
        # The group settles with both members sharing the partitions.
        await run.members["b"].wait_for_log("assigned partitions [", timeout=RECOVERY_S)
        await run.settle(fault_end)


async def test_active_controller_killed(
        whole: Cluster, scenario: Callable[..., Scenario]) -> None:
    run = await scenario("ctrl").start()
    old = whole.kafka.active_controller()
    assert old is not None
    whole.kafka.node(old).kill()
    await wait_until(lambda: whole.kafka.active_controller() not in (None, old), 30,
                     "a new active controller")
    # The metadata plane works under the new controller: a topic can be created.
    created = unique("after-ctrl")
    await whole.kafka.create_topic(created, 1, replication=2)
    assert len((await whole.kafka.partitions(created))[0]["replicas"]) == 2
    await asyncio.sleep(3)
    whole.kafka.node(old).start()
    whole.kafka.node(old).wait_listening()
    await whole.kafka.wait_in_sync([run.topic])
    await run.settle(time.monotonic())


async def test_kstage_cut_off_from_every_broker_past_the_session_timeout(
        whole: Cluster, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    """Member A reaches the cluster only through the proxies, B directly. A's writes
    hang (its HTTP API holds every request) when the proxies cut A off for longer than
    the session timeout, and the group gives A's partitions to B. A must fence its
    writes before B owns them (nothing of them reaches the API from A afterwards), never
    commit from its stale generation, say so in /readyz, and rejoin once healed."""
    topic, group = unique("cut"), unique("g-cut")
    await create_topic(whole.bootstrap, topic, 2, replication=3)
    http = {"type": "http", "url": "${URL}", "timeout_s": 2, "min_backoff_s": 0.1,
            "max_backoff_s": 0.5}
    with HttpTestServer() as api_a, HttpTestServer() as api_b:
        a, port_a = member(tmp_path, kstage, "a", whole.proxied_bootstrap, group, topic,
                           sink=http, env={"URL": f"{api_a.url}/a"})
        await a.wait_for_log("assigned partitions [0, 1]", timeout=60)
        b, port_b = member(tmp_path, kstage, "b", whole.bootstrap, group, topic, sink=http,
                           env={"URL": f"{api_b.url}/b"})
        await b.wait_for_log("assigned partitions [", timeout=60)
        await a.wait_for_log("assigned partitions [", count=2, timeout=60)
        watch = Watch(whole.bootstrap, group, topic, 2, [], None, {"a": port_a, "b": port_b},
                      rows=lambda: [r.json for api in (api_a, api_b)
                                    for r in list(api.requests) if r.json])
        async with watch:
            api_a.hang(300, times=100000)  # A's writes hang from now on
            await produce(whole.bootstrap, topic, ({"i": i} for i in range(20)),
                          partition_of=lambda i: i % 2)
            await wait_until(lambda: len(api_a.requests) > 0, 30, "A writing")
            a_part = api_a.requests[0].json["_partition"]
            for proxy in whole.proxies.values():
                proxy.cut()
            cut_at = time.monotonic()
            await b.wait_for_log("assigned partitions [0, 1]", timeout=60)
            await wait_until(lambda: offsets_of(api_b, a_part) >= set(range(10)), 60,
                             "B delivering A's partition")
            await asyncio.sleep(3)  # A, still cut off, retries its writes (unless fenced)
            for proxy in whole.proxies.values():
                proxy.heal()
            healed_at = time.monotonic()
            api_a.release()
            await a.wait_for_log("assigned partitions [", count=3, timeout=RECOVERY_S)
            await produce(whole.bootstrap, topic, ({"i": i} for i in range(20, 40)),
                          partition_of=lambda i: i % 2)
            await wait_until(lambda: values_of(api_a, api_b) >= set(range(40)), RECOVERY_S,
                             "every value delivered after the heal")
            await wait_until(lambda: bool(watch.history) and sum(
                watch.history[-1].values()) == 40, RECOVERY_S, "every offset committed")
            await wait_ready(watch, "a", healed_at, RECOVERY_S)
        out_a, out_b = a.output(), b.output()
        taken = monotonic_of(log_time(out_b, "assigned partitions [0, 1]"))
        back = monotonic_of(log_time(out_a, "assigned partitions [", nth=3))
        # The fence: nothing of A's partition reached the API from A while B owned it,
        # neither cut off nor after the heal until A rejoined (what A had sent before
        # stays held, never answered to A).
        late = [(r.json["_offset"], round(r.at - cut_at, 1)) for r in list(api_a.requests)
                if r.json["_partition"] == a_part and taken < r.at < back]
        assert late == [], late
        # ... and A fenced before B could own the partition: on its own clock.
        lost = monotonic_of(log_time(out_a, "lost its group membership"))
        assert cut_at < lost < taken, (cut_at, lost, taken)
        assert "rejected" not in out_a, "a commit from the stale generation"
        assert not watch.violations, watch.violations
        cut_503 = watch.not_ready("a", lost, healed_at)
        assert cut_503 and "lost its group membership" in cut_503[-1].reasons[0], (
            watch.readiness["a"])
        assert_ready_story(watch, "a", healed_at)
        await stop(a, b)


async def test_dead_letter_topic_leader_killed_while_dead_letters_are_written(
        whole: Cluster, scenario: Callable[..., Scenario]) -> None:
    """Every fifth value fails in the processor; its dead letter goes to a topic (RF 3,
    ``acks=all``) whose leader is killed meanwhile. No dead letter is lost, and no
    offset is committed before the broker acknowledged its dead letter (the watch reads
    the topic up to its end offset after each sample of the commits)."""
    dlq = unique("dlq")
    run = scenario("dlqkill", producer_cls=PoisonProducer, dead_letter_topic=dlq,
                   failure={"mode": "continue", "dead_letter_topic": dlq,
                            "dead_letter_path": None})
    await run.start()
    await wait_until(lambda: len(run.watch.dead_lettered) >= 10, 60, "dead letters flowing")
    leader = whole.kafka.node(await whole.kafka.leader(dlq, 0))
    leader.kill()
    await run.producer.wait_acked(len(run.producer.acked) + 300, timeout=60)
    leader.start()
    leader.wait_listening()
    await whole.kafka.wait_in_sync([run.topic, dlq])
    await run.settle(time.monotonic())
    poison = {n for n in run.producer.acked if run.poison(n)}
    assert poison and poison <= run.watch.dead_lettered_values(), (
        sorted(poison - run.watch.dead_lettered_values())[:10])


async def test_an_offset_reset_asks_the_leader_that_took_over(
        whole: Cluster, tmp_path: Path) -> None:
    """A position reset (here a seek to the beginning; also a partition with no
    committed offset) asks the partition's leader for its offsets. The consumers'
    metadata was read while the killed leader still led the partition (the controller
    moves its leaderships only after fencing it); that node is back, as a follower, and
    answers NotLeaderForPartition. A worker's consumer and ``kstage dlq``'s reader of a
    dead-letter topic refresh their metadata on that answer and reset from the new
    leader (actors/kafka.py), instead of asking the same node until
    ``metadata.max.age.ms`` (5 min): the stall the cluster chaos run met."""
    topic = unique("moved")
    await create_topic(whole.bootstrap, topic, 1, replication=3)
    await produce(whole.bootstrap, topic, ({"i": i} for i in range(10)))
    old = await whole.kafka.leader(topic, 0)
    settings = load_settings(write_config(
        tmp_path / "kstage.yml", whole.bootstrap, unique("g-moved"),
        [{"topic": topic, "processor": "json_rows"}]), {})
    tp = TopicPartition(topic, 0)
    worker = build_consumer(settings, settings.groups[0], whole.bootstrap, "moved")
    worker.assign([tp])
    await worker.start()
    consumers = [worker]
    try:
        consumers.append(await topic_consumer(settings, topic))  # the dead letters' reader
        for consumer in consumers:
            assert len(await records(consumer, tp, 10)) == 10
            consumer.pause(tp)  # no fetch from here on: nothing refreshes the metadata
        node = whole.kafka.node(old)
        node.kill()
        for consumer in consumers:
            assert await consumer._client.force_metadata_update()
            assert consumer._client.cluster.leader_for_partition(tp) == old  # not fenced
        deadline = time.monotonic() + 60
        while await whole.kafka.leader(topic, 0) == old:  # fenced, then moved
            assert time.monotonic() < deadline, f"node {old} still leads {tp} after 60 s"
            await asyncio.sleep(0.5)
        node.start()
        node.wait_listening()
        await whole.kafka.wait_in_sync([topic])
        assert await whole.kafka.leader(topic, 0) != old
        for consumer in consumers:
            assert consumer._client.cluster.leader_for_partition(tp) == old  # stale
            await consumer.seek_to_beginning(tp)
            consumer.resume(tp)
        for consumer in consumers:
            assert [r.offset for r in await records(consumer, tp, 10)] == list(range(10))
            assert consumer._client.cluster.leader_for_partition(tp) != old
    finally:
        for consumer in consumers:
            await consumer.stop()


async def test_a_partition_without_a_leader_is_an_outage_for_readyz_never_a_stall(
        whole: Cluster, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    """A topic of one replica per partition, each on its own broker; a broker that is
    not the group's coordinator dies while kstage has lag on its partition (the topic
    paused by the operator, events produced, then resumed). Nothing can be read from that
    partition until the broker is back: ``/readyz`` names it (state ``no_leader`` in
    ``/status``) and ``/healthz`` stays 200 though its lag does not move (before, that was
    a stall after ``stall_after_s``, and a restart of kstage would not have brought the
    broker back). The other partitions land; the broker back, every event once, ready."""
    topic, group = unique("leaderless"), unique("g-leaderless")
    await create_topic(whole.bootstrap, topic, 3, replication=1)
    await whole.kafka.wait_in_sync([topic])
    port, stall_s = free_port(), 3
    cfg = write_config(
        tmp_path / "kstage.yml", whole.bootstrap, group,
        [{"topic": topic, "processor": "json_rows",
          "sink": {"type": "jsonl", "path": str(tmp_path / "rows.jsonl")}}],
        service={"http_port": port, "http_host": "127.0.0.1", "control_token": "${TOKEN}",
                 "stall_after_s": stall_s})
    proc = kstage(cfg, env={"TOKEN": CONTROL_TOKEN})
    base, auth = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {CONTROL_TOKEN}"}
    topic_url = f"{base}/groups/{group}/topics/{topic}"

    def landed() -> int:
        return len(read_jsonl(tmp_path / "rows.jsonl"))

    async with httpx.AsyncClient(timeout=5) as http:

        async def partitions() -> dict[int, PartitionStatus]:
            answer = (await http.get(f"{base}/status", headers=auth)).json()
            [found] = [t for g in answer["groups"] for t in g["topics"]
                       if t["topic"] == topic]
            return {p["partition"]: p for p in found["partitions"]}

        async def lags() -> dict[int, int | None]:
            return {n: p["lag"] for n, p in (await partitions()).items()}

        try:
            await proc.wait_for_log("assigned partitions [0, 1, 2]", timeout=60)
            leaders = {p: await whole.kafka.leader(topic, p) for p in range(3)}
            assert len(set(leaders.values())) == 3, leaders
            coordinator = await whole.kafka.coordinator(group)
            lost, victim = next((p, n) for p, n in leaders.items() if n != coordinator)
            # Paused, and no fetch returns records from here on: events wait, lag holds.
            assert (await http.post(f"{topic_url}/pause", headers=auth)).status_code == 200
            await proc.wait_for_log("paused by the operator: fetching nothing until resumed")
            await produce(whole.bootstrap, topic, ({"i": i} for i in range(30)),
                          partition_of=lambda i: i % 3)
            deadline = time.monotonic() + 60
            while (lag := await lags()) != {0: 10, 1: 10, 2: 10}:
                assert time.monotonic() < deadline, f"lags {lag}: {proc.output()[-3000:]}"
                await asyncio.sleep(0.2)
            node = whole.kafka.node(victim)
            node.kill()
            deadline = time.monotonic() + 60
            while await whole.kafka.leader(topic, lost) >= 0:  # fenced: no leader left
                assert time.monotonic() < deadline, f"partition {lost} still led after 60 s"
                await asyncio.sleep(0.5)
            assert (await http.post(f"{topic_url}/resume", headers=auth)).status_code == 200
            reason = (f"{group}/{topic}: partition(s) {lost} have no leader (no in-sync "
                      "replica is up: their brokers are down or unreachable); nothing is "
                      "read from them until one is elected")
            deadline = time.monotonic() + 60
            while reason not in (ready := await http.get(f"{base}/readyz")).json().get(
                    "reasons", []):
                assert time.monotonic() < deadline, f"{ready.text}: {proc.output()[-3000:]}"
                await asyncio.sleep(0.2)
            # The other partitions land; the lost one's lag holds, and is no stall for
            # twice the stall bound.
            deadline = time.monotonic() + 60
            while landed() < 20:
                assert time.monotonic() < deadline, f"{landed()}: {proc.output()[-3000:]}"
                await asyncio.sleep(0.2)
            until = time.monotonic() + 2 * stall_s
            while time.monotonic() < until:
                health = await http.get(f"{base}/healthz")
                assert health.status_code == 200, health.text
                await asyncio.sleep(0.2)
            assert "liveness:" not in proc.output(), proc.output()[-3000:]
            states = {n: (p["state"], p["lag"]) for n, p in (await partitions()).items()}
            assert states == {n: (NO_LEADER, 10) if n == lost else ("running", 0)
                              for n in range(3)}, states
            metrics = (await http.get(f"{base}/metrics")).text
            for state, count in (("no_leader", 1), ("running", 2)):
                series = (f'kstage_partitions{{group="{group}",state="{state}",'
                          f'topic="{topic}"}} {count:.1f}')
                assert series in metrics, metrics
            node.start()
            node.wait_listening()
            deadline = time.monotonic() + 90
            while landed() < 30:
                assert time.monotonic() < deadline, f"{landed()}: {proc.output()[-3000:]}"
                await asyncio.sleep(0.2)
            deadline = time.monotonic() + 60
            while (ready := await http.get(f"{base}/readyz")).status_code != 200:
                assert time.monotonic() < deadline, ready.text
                await asyncio.sleep(0.2)
        finally:
            proc.signal(signal.SIGTERM)
            assert await proc.wait(60) == 0, proc.output()
    assert sorted(r["i"] for r in read_jsonl(tmp_path / "rows.jsonl")) == list(range(30))
    assert "liveness:" not in proc.output()


async def records(consumer: Any, tp: TopicPartition, count: int, timeout_s: float = 60
                  ) -> list[Any]:
    """The next ``count`` records of ``tp`` (a deadline past which the test fails)."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        assert time.monotonic() < deadline, f"{len(got)} of {count} records of {tp}"
        batch = await consumer.getmany(tp, timeout_ms=500, max_records=count - len(got))
        got.extend(batch.get(tp, []))
    return got


# -- helpers of the tests above ---------------------------------------------------------

class PoisonProducer(AckedProducer):
    """Every fifth value fails in the processor (``fail: true``): a dead letter."""

    @staticmethod
    def poison(n: int) -> bool:
        return n % 5 == 0

    def value(self, n: int) -> bytes:
        return json.dumps({"i": n, "fail": self.poison(n)}).encode()


def offsets_of(api: HttpTestServer, part: int) -> set[int]:
    """The offsets of partition ``part`` the API received."""
    return {r.json["_offset"] for r in list(api.requests)
            if r.json and r.json["_partition"] == part}


def values_of(*apis: HttpTestServer) -> set[int]:
    """The ``i`` of every row the APIs received."""
    return {int(r.json["i"]) for api in apis for r in list(api.requests) if r.json}


def log_time(output: str, text: str, nth: int = 1) -> float:
    """The wall-clock time of the ``nth`` log line with ``text``."""
    found = [line for line in output.splitlines() if text in line]
    if len(found) < nth:
        raise AssertionError(f"no {nth}. {text!r} in:\n{output}")
    return datetime.strptime(found[nth - 1][:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def monotonic_of(wall: float) -> float:
    return wall - (time.time() - time.monotonic())
