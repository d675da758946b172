"""Apache Kafka brokers started by the tests: KRaft combined mode (each node a broker and a
controller) on loopback, from the Maven jars of ``tests/jars/kafka/pom.xml``.

``make kafka-jars`` copies the jars into ``tests/jars/kafka/lib`` once; nothing here
downloads anything: missing jars are a test failure naming that command.

A :class:`KafkaCluster` of one node is the single broker the suite shares; of three
nodes (replication factor 3, ``min.insync.replicas=2``) it is the cluster the fault tests
kill and restart. Every node keeps its ports and its log directory across a restart, so
a killed node comes back with its data, as a real one does. Heaps are small and the JIT
stops at C1: a node idles at ~300 MB RSS and starts in ~3 s on this 2-core machine.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from threading import Thread
from typing import Any, TypeVar

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from service.broker import free_port

KAFKA_VERSION = "4.4.0"
ROOT = Path(__file__).resolve().parent.parent
JARS = ROOT / "tests" / "jars" / "kafka" / "lib"
# More JVM options of every node, from the environment: the class-data archive
# (tests/kafka_jvm.py), set by the pytest process (tests/conftest.py).
NODE_OPTS = "PYTEST_KAFKA_NODE_OPTS"
T = TypeVar("T")

# Everything but what a test or a fault needs is Kafka's default.
_BASE_PROPERTIES = {
    "process.roles": "broker,controller",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    # Kafka's own test harnesses do the same: no 3 s wait before a new group's first
    # rebalance (production default), which every test's group would pay.
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
    "log.cleaner.dedupe.buffer.size": str(4 * 1024 * 1024),  # the cleaner's 128 MB buffer
}
_LOG4J = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.config.name = org.apache.kafka.common.config
logger.config.level = WARN
"""


class KafkaJarsMissing(RuntimeError):
    """The broker's jars were never fetched (``make kafka-jars``)."""


def classpath() -> str:
    """The broker's class path; :class:`KafkaJarsMissing` when the jars are not there."""
    if not (JARS / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        raise KafkaJarsMissing(
            f"Apache Kafka {KAFKA_VERSION}'s jars are not in {JARS}: run `make kafka-jars` "
            "(mvn copies them from Maven Central per tests/jars/kafka/pom.xml)")
    return f"{JARS}/*"


def run_sync(coro_fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from synchronous code, on a thread of its own (the
    caller may be inside a running event loop: a sync fixture of an async test)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro_fn())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            box["error"] = exc

    thread = Thread(target=target, daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


@dataclass
class Listener:
    """A listener besides PLAINTEXT and CONTROLLER: ``NAME://127.0.0.1:port``, advertised
    as ``advertised_port`` (a proxy in front of it) or its own port."""

    name: str
    protocol: str
    port: int = field(default_factory=free_port)
    advertised_port: int | None = None


class KafkaNode:
    """One ``kafka.Kafka`` JVM (broker and controller) with its own directory and ports."""

    def __init__(self, node_id: int, directory: Path, *, heap_mb: int,
                 listeners: Iterable[Listener] = (), jvm_options: Iterable[str] = ()) -> None:
        self.node_id = node_id
        self.directory = directory
        self.heap_mb = heap_mb
        self.port = free_port()
        self.controller_port = free_port()
        self.listeners = list(listeners)
        self.jvm_options = list(jvm_options)
        self.log_path = directory / "server.log"
        self._proc: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"<KafkaNode {self.node_id} 127.0.0.1:{self.port} {state}>"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    def write_config(self, voters: str, properties: dict[str, str]) -> None:
        listeners = [f"PLAINTEXT://127.0.0.1:{self.port}",
                     f"CONTROLLER://127.0.0.1:{self.controller_port}"]
        advertised = [f"PLAINTEXT://127.0.0.1:{self.port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        for extra in self.listeners:
            listeners.append(f"{extra.name}://127.0.0.1:{extra.port}")
            advertised.append(f"{extra.name}://127.0.0.1:"
                              f"{extra.advertised_port or extra.port}")
            protocols.append(f"{extra.name}:{extra.protocol}")
        config = {
            **_BASE_PROPERTIES,
            "node.id": str(self.node_id),
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "listener.security.protocol.map": ",".join(protocols),
            "controller.quorum.voters": voters,
            "log.dirs": str(self.directory / "data"),
            **properties,
        }
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        (self.directory / "log4j2.properties").write_text(_LOG4J)

    def _java(self, main: str, *args: str, heap_mb: int) -> list[str]:
        return ["java", f"-Xmx{heap_mb}m", "-Xms64m", "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError",
                "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
                *os.environ.get(NODE_OPTS, "").split(), *self.jvm_options,
                "-cp", classpath(), main, *args]

    def format(self, cluster_id: str, *extra: str) -> None:
        """``kafka-storage format`` of this node's log directory (extra: ``--add-scram``)."""
        done = subprocess.run(  # fixed command
            self._java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c",
                       str(self.config_path), *extra, heap_mb=128),
            capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            said = f"{done.stdout}{done.stderr}".strip().splitlines()
            raise RuntimeError(f"formatting Kafka node {self.node_id} failed (exit "
                               f"{done.returncode}): " + "\n".join(said[-15:]))

    def new_ports(self) -> None:
        """Other ports for the broker and the controller (before a start)."""
        self.port = free_port()
        self.controller_port = free_port()

    def port_taken(self) -> int | None:
        """The broker's or controller's port that another process took between
        :func:`free_port` and the last start's bind (a race with any process of the
        machine), None if neither."""
        if not self.log_path.exists():
            return None
        last = self.log_path.read_text(errors="replace").rsplit("===== start ", 1)[-1]
        for port in (self.port, self.controller_port):
            if f"failed to bind to 127.0.0.1:{port}: Address already in use" in last:
                return port
        return None

    def start(self) -> None:
        """Start the JVM; :meth:`wait_listening` waits for its port."""
        if self.running:
            raise RuntimeError(f"{self!r} is already running")
        with open(self.log_path, "ab") as out:
            out.write(f"\n===== start {time.strftime('%H:%M:%S')} =====\n".encode())
            out.flush()
            self._proc = subprocess.Popen(  # fixed command
                self._java("kafka.Kafka", str(self.config_path), heap_mb=self.heap_mb),
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_listening(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self._proc is None or self._proc.poll() is not None:
                code = None if self._proc is None else self._proc.returncode
                raise RuntimeError(f"Kafka node {self.node_id} exited ({code}) before "
                                   f"listening on {self.bootstrap}; see {self.log_path}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Kafka node {self.node_id} did not listen on "
                                       f"{self.bootstrap} within {timeout_s:g}s; see "
                                       f"{self.log_path}") from None
                time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no controlled shutdown, no flush (a crash, a pulled plug)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

    def stop(self, timeout_s: float = 60) -> None:
        """SIGTERM: a controlled shutdown (leadership moved away first); SIGKILL after
        ``timeout_s``."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            self._proc = None
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        self._proc = None

    def pause(self) -> None:
        """SIGSTOP: the node freezes with every connection open (a GC pause, a hung VM)."""
        assert self._proc is not None
        os.killpg(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self._proc is not None
        os.killpg(self._proc.pid, signal.SIGCONT)

    def quorum_state(self) -> dict[str, Any] | None:
        """The KRaft quorum state this node last wrote (leader id and epoch), if any."""
        path = self.directory / "data" / "__cluster_metadata-0" / "quorum-state"
        try:
            state: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return state


def new_cluster_id() -> str:
    """A random cluster id as Kafka's ``Uuid.randomUuid`` makes one: never starting with
    ``-``, which ``kafka-storage format -t`` would read as an option (1 id in 64 did)."""
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not found.startswith("-"):
            return found


START_ATTEMPTS = 3  # a cluster's starts when another process took a node's port first


class KafkaCluster:
    """``size`` Kafka nodes, each a broker and a KRaft controller (static voters).

    Args:
        directory: one sub-directory per node (config, data, ``server.log``).
        size: 1 (replication factor 1) or 3 (RF 3, ``min.insync.replicas=2``).
        heap_mb: ``-Xmx`` of each node.
        properties: more ``server.properties`` of every node.
        listeners: more listeners of a node, given its id (TLS, SASL, a proxied one).
        format_args: more arguments to ``kafka-storage format`` (``--add-scram``).
        jvm_options: more JVM options of every node (system properties).
    """

    def __init__(self, directory: Path, size: int = 1, *, heap_mb: int = 256,
                 properties: dict[str, str] | None = None,
                 listeners: Callable[[int], list[Listener]] | None = None,
                 format_args: Iterable[str] = (), jvm_options: Iterable[str] = ()) -> None:
        self.directory = directory
        self.size = size
        replication = str(min(size, 3))
        self.properties = {
            "offsets.topic.replication.factor": replication,
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": str(min(size, 2)),
            "share.coordinator.state.topic.replication.factor": replication,
            "share.coordinator.state.topic.min.isr": str(min(size, 2)),
            "default.replication.factor": replication,
            "min.insync.replicas": str(min(size, 2)),
            **(properties or {}),
        }
        self.format_args = list(format_args)
        self.nodes = [KafkaNode(i, directory / f"node{i}", heap_mb=heap_mb,
                                listeners=listeners(i) if listeners else (),
                                jvm_options=jvm_options)
                      for i in range(1, size + 1)]
        self.cluster_id = new_cluster_id()

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        return self.nodes[node_id - 1]

    def start(self, timeout_s: float = 120) -> KafkaCluster:
        """Format every node, start them all, and return once every broker is registered
        and unfenced (metadata lists it). A node's broker or controller port taken by
        another process before the node bound it (ports are picked free, then bound by
        the JVM): every node formatted again on new ports, up to :data:`START_ATTEMPTS`
        times. The extra listeners' ports are the caller's and never change."""
        for _ in range(START_ATTEMPTS - 1):
            try:
                return self._start(timeout_s)
            except Exception:
                taken = {n.node_id: p for n in self.nodes if (p := n.port_taken())}
                if not taken:
                    raise
                sys.stderr.write(f"tests/apache_kafka.py: ports {taken} (node: port) taken "
                                 "before the nodes bound them; starting again on new "
                                 "ports\n")
                for node in self.nodes:
                    node.new_ports()
                    shutil.rmtree(node.directory / "data", ignore_errors=True)
        return self._start(timeout_s)  # the last attempt: its failure is the caller's

    def _start(self, timeout_s: float) -> KafkaCluster:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        for node in self.nodes:
            node.write_config(voters, self.properties)
            node.format(self.cluster_id, *self.format_args)
        try:
            for node in self.nodes:
                node.start()
            for node in self.nodes:
                node.wait_listening(timeout_s)
            run_sync(lambda: self.wait_brokers({n.node_id for n in self.nodes}, timeout_s))
            run_sync(lambda: self._wait_group_coordinator(timeout_s))
        except BaseException:
            self.kill()
            raise
        return self

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def admin(self, **kwargs: Any) -> AIOKafkaAdminClient:
        """An admin client of every running node (not started)."""
        running = [n.bootstrap for n in self.nodes if n.running] or [self.bootstrap]
        return AIOKafkaAdminClient(bootstrap_servers=",".join(running),
                                   request_timeout_ms=10000, **kwargs)

    async def _metadata(self, timeout_s: float = 30) -> tuple[set[int], dict[str, Any]]:
        """Live brokers and topics, asked again for ``timeout_s`` while the node asked
        is one just killed (aiokafka picks a node its metadata still lists)."""
        deadline = time.monotonic() + timeout_s
        while True:
            admin = self.admin()
            try:
                await admin.start()
                cluster = await admin.describe_cluster()
                topics = await admin.describe_topics()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
            finally:
                await admin.close()
            await asyncio.sleep(0.5)
        brokers = {int(b["node_id"]) for b in cluster["brokers"]}
        return brokers, {t["topic"]: t for t in topics}

    async def wait_brokers(self, node_ids: set[int], timeout_s: float = 90) -> None:
        """Until the metadata lists exactly ``node_ids`` as live brokers."""
        deadline = time.monotonic() + timeout_s
        seen: object = None
        while True:
            try:
                seen, _ = await self._metadata()
                if seen == node_ids:
                    return
            except Exception as exc:  # noqa: BLE001 - the cluster is still coming up
                seen = exc
            if time.monotonic() > deadline:
                raise AssertionError(f"brokers {sorted(node_ids)} not live within "
                                     f"{timeout_s:g}s (last seen: {seen!r}); see "
                                     f"{self.directory}/node*/server.log")
            await asyncio.sleep(0.5)

    async def _wait_group_coordinator(self, timeout_s: float) -> None:
        """Until groups have a coordinator: the offsets topic exists (a new cluster
        creates it at the first request), as on a cluster that has run for a while."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                await self.coordinator("kstage-tests-warm-up")
                return
            except Exception as exc:  # retriable while it is created
                if time.monotonic() > deadline:
                    raise AssertionError(f"no group coordinator within {timeout_s:g}s: "
                                         f"{exc!r}") from exc
                await asyncio.sleep(0.2)

    async def partitions(self, topic: str) -> dict[int, dict[str, Any]]:
        """``{partition: {"leader": id, "replicas": [...], "isr": [...]}}`` of ``topic``."""
        _, topics = await self._metadata()
        return {int(p["partition"]): {"leader": int(p["leader"]),
                                      "replicas": list(p["replicas"]), "isr": list(p["isr"])}
                for p in topics[topic]["partitions"]}

    async def leader(self, topic: str, partition: int = 0) -> int:
        return int((await self.partitions(topic))[partition]["leader"])

    async def wait_in_sync(self, topics: Iterable[str] | None = None,
                           timeout_s: float = 120) -> None:
        """Until every partition of ``topics`` (None: of every topic, the internal ones
        too) has a live leader and all its replicas in its ISR (a restarted node caught
        up: what an operator waits for before restarting the next one)."""
        deadline = time.monotonic() + timeout_s
        last: object = None
        while True:
            try:
                _, meta = await self._metadata()
                names = list(meta) if topics is None else list(topics)
                behind = {t: [(p["partition"], p["leader"], p["isr"], p["replicas"])
                              for p in meta[t]["partitions"]
                              if p["leader"] < 0 or sorted(p["isr"]) != sorted(p["replicas"])]
                          for t in names}
                last = {t: parts for t, parts in behind.items() if parts}
                if not last:
                    return
            except Exception as exc:  # noqa: BLE001 - a node is still coming back
                last = exc
            if time.monotonic() > deadline:
                raise AssertionError(f"topics not in sync within {timeout_s:g}s: {last!r}")
            await asyncio.sleep(0.5)

    async def create_topic(self, topic: str, partitions: int, replication: int,
                           timeout_s: float = 60) -> None:
        """Create ``topic`` through the running nodes, retried (aiokafka sends it to the
        node metadata names as controller, which may be a node just killed)."""
        deadline = time.monotonic() + timeout_s
        while True:
            admin = self.admin()
            try:
                await admin.start()
                await admin.create_topics([NewTopic(topic, partitions, replication)])
                return
            except Exception as exc:  # retried until the deadline
                if time.monotonic() > deadline:
                    raise AssertionError(f"topic {topic} not created: {exc!r}") from exc
            finally:
                await admin.close()
            await asyncio.sleep(0.5)

    async def coordinator(self, group: str) -> int:
        """The node id of ``group``'s coordinator."""
        admin = self.admin()
        await admin.start()
        try:
            return int(await admin.find_coordinator(group))
        finally:
            await admin.close()

    async def group_state(self, group: str) -> str:
        """The group's state (``Stable``, ``PreparingRebalance``, ``CompletingRebalance``,
        ``Empty``) as its coordinator says."""
        admin = self.admin()
        await admin.start()
        try:
            [response] = await admin.describe_consumer_groups([group])
        finally:
            await admin.close()
        return str(response.to_object()["groups"][0]["state"])

    async def wait_group_state(self, group: str, states: Iterable[str], *,
                               timeout_s: float) -> str:
        """Until ``group``'s coordinator says it is in one of ``states``; that state. A
        node just killed or a coordinator moving is asked again."""
        wanted = set(states)
        deadline = time.monotonic() + timeout_s
        seen: object = None
        while True:
            try:
                seen = await self.group_state(group)
                if seen in wanted:
                    return str(seen)
            except Exception as exc:  # noqa: BLE001 - retried until the deadline
                seen = exc
            if time.monotonic() > deadline:
                raise AssertionError(f"group {group} not in {sorted(wanted)} within "
                                     f"{timeout_s:g}s (last seen: {seen!r})")
            await asyncio.sleep(0.05)

    def active_controller(self) -> int | None:
        """The KRaft leader (active controller) of the newest epoch any running node
        recorded in its quorum state; None while an election is under way."""
        states = [s for n in self.nodes if n.running if (s := n.quorum_state()) is not None]
        if not states:
            return None
        newest = max(states, key=lambda s: int(s.get("leaderEpoch", -1)))
        leader = int(newest.get("leaderId", -1))
        return leader if leader >= 0 else None
