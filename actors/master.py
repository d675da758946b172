"""The master: reads the consumer-group definitions and runs one worker per topic.

It resolves every processor before anything starts (an unknown name, a duplicate
registration, a topic claimed twice or options the processor refuses fail fast, see
:mod:`actors.preflight`), builds one worker factory per
(group, topic), and runs them under a :class:`OneForOneSupervisor`. With ``drain`` it
stops the service once every worker reported its partitions drained.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient

from actors.backoff import backoff_s
from actors.codecs.avro import AvroDecoder, load_schema
from actors.codecs.by_id import REGISTRY_FORMATS, SchemaIdDecoder
from actors.codecs.registries import decoder_for, registry_from_settings
from actors.codecs.schema_registry import SchemaRegistry
from actors.control import TopicControl
from actors.errors import FatalError
from actors.failure import Sleep
from actors.kafka import connection_kwargs
from actors.lifecycle import Lifecycle
from actors.liveness import StallWatch
from actors.metrics import Metrics
from actors.preflight import resolve_processors as resolve_processors  # re-exported
from actors.preflight import resolve_sinks
from actors.resources import Resources
from actors.supervisor import ChildFactory, OneForOneSupervisor
from actors.topic_patterns import Changes, PatternWatch
from actors.worker import Worker
from actors.worker.start_from import StartRegistry
from actors.worker_status import NO_LEADER, WorkerStatus
from processors.registry import for_options
from settings.models import GroupSettings, Settings, TopicSettings
from settings.suggest import did_you_mean

logger = logging.getLogger(__name__)


class Master:
    """Runs the workers of every group; ``run`` returns when they all stopped.

    Args:
        settings: validated settings.
        bootstrap: resolved bootstrap servers (the embedded broker's, if any).
        drain: stop once every worker drained its partitions.
        retry_sleep: interruptible sleep for failure-policy retries (tests).
        resources: the process's shared resources (the SparkActor), made and closed by
            the caller (``kstage run``'s lifecycle: they outlive the master); without
            them the master makes its own and closes them when ``run()`` ends.

    Attributes:
        processors: the configuration's processor classes by name, resolved once here
            (the service's merge and maintenance loops plan their tables with them).
        resources: the resources its workers' sinks share.
    """

    def __init__(self, settings: Settings, bootstrap: str, *, drain: bool = False,
                 retry_sleep: Sleep | None = None, metrics: Metrics | None = None,
                 resources: Resources | None = None) -> None:
        """Resolve processors and reader schemas (RegistryError lists every problem)."""
        self.metrics = metrics
        self.settings = settings
        self.bootstrap = bootstrap
        self.drain = drain
        self._retry_sleep = retry_sleep
        self._owns_resources = resources is None
        self.resources = resources if resources is not None else Resources(
            settings.spark, metrics)
        self.processors = resolve_processors(settings)
        resolve_sinks(settings, self.processors)  # what the sinks would refuse at open
        self._drained: set[str] = set()
        self._registry: SchemaRegistry | None = None
        # What operators asked of each topic (the control API), kept across restarts.
        self.controls = {c.name: c for c in (TopicControl(settings.group_id(g), t.topic)
                                             for g in settings.groups for t in g.topics
                                             if t.topic_pattern is None)}
        self.patterns = PatternWatch([(settings.group_id(g), g) for g in settings.groups])
        # Why the last listing of the cluster's topics failed (None: it succeeded).
        self._listing_error: str | None = None
        self.stalls = StallWatch(settings.service.stall_after_s)
        self._stop_requested = asyncio.Event()
        self.lifecycle = Lifecycle("master")
        # start_from applies once per process run, not per worker incarnation.
        self._starts = StartRegistry()
        factories = [
            (f"{settings.group_id(g)}/{t.topic}", self._factory(g, t))
            for g in settings.groups for t in g.topics if t.topic_pattern is None
        ]
        self.supervisor = OneForOneSupervisor(factories, settings.supervisor,
                                              dynamic=bool(self.patterns))
        self._expected = {name for name, _ in factories}

    def __repr__(self) -> str:
        return (f"<Master {self.lifecycle} workers={len(self._expected)} "
                f"drained={len(self._drained)} restarts={self.supervisor.restarts}>")

    def _factory(self, group: GroupSettings, topic: TopicSettings) -> ChildFactory:
        reader = load_schema(topic.reader_schema) if topic.reader_schema else None

        def make(incarnation: int) -> Worker:
            avro: SchemaIdDecoder | None = None
            avro_keys = None
            if self._registry is not None:
                # Fresh decoders per incarnation: parsed-schema caches are per worker,
                # schema texts are cached once in the shared registry client.
                registry = self.settings.schema_registry
                assert registry is not None  # noqa: S101 - self._registry is built from it
                retry_s = registry.not_found_retry_s
                if topic.format in REGISTRY_FORMATS:
                    avro = decoder_for(topic.format, self._registry, registry,
                                       reader_schema=reader, validate=topic.validate_schema,
                                       budget_s=topic.validate_budget_s)
                avro_keys = AvroDecoder(self._registry, registry.id_type,
                                        not_found_retry_s=retry_s)
            return Worker(
                settings=self.settings, group=group, topic=topic,
                processor_cls=for_options(self.processors[topic.processor], topic.options),
                bootstrap=self.bootstrap,
                drain=self.drain, on_drained=self._worker_drained,
                sleep=self._retry_sleep, incarnation=incarnation,
                avro=avro, avro_keys=avro_keys, metrics=self.metrics,
                starts=self._starts, resources=self.resources, registry=self._registry,
                control=self.controls[f"{self.settings.group_id(group)}/{topic.topic}"],
            )
        return make

    def _apply(self, changes: Changes) -> None:
        """Start a worker per topic a pattern claimed; stop the ones whose topic went."""
        for name in changes.gone:
            self._expected.discard(name)
            self._drained.discard(name)
            self.controls.pop(name, None)
            with contextlib.suppress(KeyError):
                self.supervisor.retire(name)
        for group, topic in changes.started:
            name = f"{self.settings.group_id(group)}/{topic.topic}"
            self.controls[name] = TopicControl(self.settings.group_id(group), topic.topic)
            self._expected.add(name)
            self.supervisor.add(name, self._factory(group, topic))

    async def _list_topics(self) -> None:
        """Every ``kafka.metadata_refresh_s``: list the cluster's topics and start or stop
        the workers of the pattern entries. A listing that fails (the broker unreachable,
        an authentication error) is retried with backoff (from 1 s, doubling, up to the
        refresh interval) and shown in ``/readyz`` until one succeeds; the running
        workers go on. With ``drain``, a first listing that leaves no worker to run
        (no fixed topic, no topic matched) has nothing to drain: the master stops."""
        refresh = self.settings.kafka.metadata_refresh_s
        failures = 0
        while True:
            try:
                topics = await asyncio.wait_for(self._cluster_topics(), max(refresh, 10))
            except Exception as exc:  # noqa: BLE001 - any failure: listed again later
                wait = backoff_s(failures, min(1.0, refresh), refresh)
                failures += 1
                self._listing_error = f"{type(exc).__name__}: {exc}"
                logger.warning("cannot list the cluster's topics for the topic patterns "
                               "(%s); retrying in %gs", self._listing_error, wait)
            else:
                if self._listing_error is not None:
                    logger.info("the cluster's topics are listed again (after %d failed "
                                "listing(s))", failures)
                failures, wait, self._listing_error = 0, refresh, None
                self._apply(self.patterns.update(topics))
                for entry in self.patterns.entries:
                    if not entry.topics:
                        logger.info("%s: pattern %r matches no topic%s", entry.group,
                                    entry.pattern, ": nothing to drain" if self.drain
                                    else " yet")
                if self.drain and not self._expected:
                    logger.info("--drain: no topic to drain: stopping")
                    self.stop()
                    return
            await asyncio.sleep(wait)

    async def _cluster_topics(self) -> set[str]:
        """The cluster's topics, from fresh metadata (a client of its own each time: a
        long-lived one never reported a deleted topic gone on Apache Kafka, in the test)."""
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap,
            client_id=f"{self.settings.kafka.client_id}-topics",
            **connection_kwargs(self.settings.kafka.consumer_config))
        await admin.start()
        try:
            return set(await admin.list_topics())
        finally:
            await admin.close()

    def _worker_drained(self, worker: Worker) -> None:
        self._drained.add(f"{worker.group_id}/{worker.topic.topic}")
        if self._drained >= self._expected:
            logger.info("every worker drained its partitions: stopping")
            self.stop()

    async def _status_loop(self) -> None:
        """Log one status line per worker every ``service.status_interval_s``."""
        while True:
            await asyncio.sleep(self.settings.service.status_interval_s)
            for child in self.supervisor.children:
                if isinstance(child, Worker):
                    logger.info("status %s %s restarts=%d", child.label,
                                " ".join(f"{k}={v}" for k, v in child.status().items()),
                                self.supervisor.restarts)

    def snapshot(self) -> list[WorkerStatus]:
        """Every running worker's state (metrics, readiness); call on the event loop."""
        workers = [c.snapshot() for c in self.supervisor.children if isinstance(c, Worker)]
        for worker in workers:
            worker["stalled_partitions"] = self.stalls.stalled(worker["group"],
                                                               worker["topic"])
        return workers

    async def _watch_stalls(self) -> None:
        """Feed the stall watch the workers' state once a second (see
        :mod:`actors.liveness`)."""
        while True:
            await asyncio.sleep(1)
            self.stalls.update(c.snapshot() for c in self.supervisor.children
                               if isinstance(c, Worker))

    def liveness(self) -> list[str]:
        """Why the process is alive but stuck (empty: it is not); call on the event loop."""
        return self.stalls.reasons()

    def control(self, group: str, topic: str) -> TopicControl:
        """The operator state of ``group/topic``; LookupError naming the known ones."""
        name = f"{group}/{topic}"
        found = self.controls.get(name)
        if found is None:
            hint = did_you_mean(name, self.controls)
            raise LookupError(f"no topic {topic!r} in group {group!r} here{hint}; this "
                              f"process runs {', '.join(sorted(self.controls))}")
        return found

    def restart(self, group: str, topic: str) -> None:
        """Restart the worker of ``group/topic`` (it drains and commits first)."""
        self.supervisor.restart(self.control(group, topic).name)

    def status(self) -> dict[str, Any]:
        """Every group, topic and partition with its state, for ``GET /status``; call on
        the event loop."""
        running = {f"{w['group']}/{w['topic']}": w for w in self.snapshot()}
        crashes = self.supervisor.crashes()
        groups: dict[str, list[dict[str, Any]]] = {}
        for name, control in sorted(self.controls.items()):
            worker = running.get(name)
            crash = crashes.get(name)
            # failed: its worker crashed and is not running (waiting for its restart, or
            # given up); starting: not running yet.
            state = ("paused" if control.paused else "running" if worker is not None
                     else "failed" if crash is not None else "starting")
            entry: dict[str, Any] = {
                "topic": control.topic, "state": state,
                "last_crash": None if crash is None else {"at": crash[0], "error": crash[1]},
                "paused": control.paused, "paused_at": control.paused_at,
                "paused_by": control.paused_by, "running": worker is not None,
                "restarts": 0 if worker is None else worker["restarts"],
                "partitions": [] if worker is None else worker["partitions"],
            }
            errors = [] if worker is None else [
                *([worker["sink_error"]] if worker["sink_error"] else []),
                *worker["refused"]]
            if errors:
                entry["error"] = "; ".join(errors)
            groups.setdefault(control.group, []).append(entry)
        for group in {e.group for e in self.patterns.entries}:
            groups.setdefault(group, [])
        return {"groups": [{"group": g, "topics": t,
                            **({"patterns": self.patterns.status(g)} if self.patterns else {})}
                           for g, t in groups.items()],
                "live": not self.liveness(), "stalled": self.liveness()}

    def readiness(self) -> list[str]:
        """Why the service is not ready (empty when every worker has joined its group,
        opened its sink, reaches its coordinator, and neither waits for the registry nor
        fails to write its sink or its dead letters, nor refuses a partition a table holds
        past its high-water mark, and the last listing of the cluster's topics for the
        topic patterns succeeded); call on the event loop."""
        running = {f"{w['group']}/{w['topic']}": w for w in self.snapshot()}
        reasons = [f"{e.group}: pattern {e.pattern!r}: cannot list the cluster's topics "
                   f"({self._listing_error}); retrying"
                   for e in self.patterns.entries if self._listing_error is not None]
        for name in sorted(self._expected):
            worker = running.get(name)
            if worker is not None and worker["security_problem"]:
                reasons.append(f"{name}: {worker['security_problem']}; retrying")
            if worker is not None and worker["token_problem"]:
                reasons.append(f"{name}: no OAUTHBEARER token: {worker['token_problem']}; "
                               "retrying")
            if worker is None:
                reasons.append(f"{name}: not running (starting or restarting)")
            elif not worker["joined"]:
                reasons.append(f"{name}: has not joined its consumer group yet")
            elif not worker["sink_open"]:
                reasons.append(f"{name}: sink is not open")
            elif worker["membership_lost"]:
                reasons.append(f"{name}: {worker['membership_lost']}")
            elif not worker["coordinator_known"]:
                reasons.append(f"{name}: cannot reach the group coordinator "
                               "(Kafka broker down or unreachable); retrying")
            else:  # joined and open: whatever keeps it from progressing, every one
                if worker["topic_missing"]:
                    reasons.append(f"{name}: {worker['topic_missing']}")
                if worker["waiting_for"]:
                    reasons.append(f"{name}: waiting for {worker['waiting_for']}")
                if worker["dead_letter_error"]:
                    reasons.append(f"{name}: {worker['dead_letter_error']}; retrying")
                if worker["sink_error"]:
                    reasons.append(f"{name}: {worker['sink_error']}")
                reasons.extend(f"{name}: {why}" for why in worker["refused"])
                leaderless = [p["partition"] for p in worker["partitions"]
                              if p["state"] == NO_LEADER]
                if leaderless:
                    reasons.append(
                        f"{name}: partition(s) {', '.join(map(str, leaderless))} have no "
                        "leader (no in-sync replica is up: their brokers are down or "
                        "unreachable); nothing is read from them until one is elected")
        return reasons

    @property
    def drained(self) -> bool:
        """True once every worker drained its partitions (``--drain``)."""
        return bool(self._expected) and self._drained >= self._expected

    def stop(self) -> None:
        """Begin the graceful two-phase stop (idempotent; see :mod:`actors.lifecycle`)."""
        self.lifecycle.stopping()
        self._stop_requested.set()

    async def run(self) -> None:
        """Run until stopped; raises FatalError on throw, escalation or a fatal start
        error. Runs once."""
        try:
            with self.lifecycle.running():
                await self._run()
        finally:
            if self._owns_resources:
                await self.resources.close()

    async def _run(self) -> None:
        if not self.settings.groups:
            raise FatalError("no consumer groups configured: nothing to do")
        if self.settings.schema_registry is None:
            await self._supervise()
            return
        async with registry_from_settings(self.settings.schema_registry) as reg:
            self._registry = reg
            try:
                await self._supervise()
            finally:
                self._registry = None

    def _report_cancelled(self) -> None:
        """After a stop that had to cancel workers: FatalError naming the work they
        abandoned, or a warning when nothing was in flight (e.g. a worker waiting to
        leave the group during a rebalance): that stop lost nothing, it exits 0."""
        cancelled = self.supervisor.cancelled
        abandoned = [
            f"{child.label}: {', '.join(work)}"
            for child in self.supervisor.children
            if isinstance(child, Worker) and f"{child.group_id}/{child.topic.topic}" in cancelled
            and (work := child.abandoned())
        ]
        grace = self.settings.supervisor.shutdown_grace_s
        if abandoned:
            raise FatalError(
                f"stop had to cancel {', '.join(cancelled)} after the shutdown grace period "
                f"of {grace:g}s; abandoned, not committed (re-read on the next start): "
                f"{'; '.join(abandoned)}")
        leaving = [c.label for c in self.supervisor.children
                   if isinstance(c, Worker) and c.leaving_group
                   and f"{c.group_id}/{c.topic.topic}" in cancelled]
        logger.warning("stop had to cancel %s after the shutdown grace period of %gs, with "
                       "nothing in flight: nothing was left uncommitted%s", ", ".join(cancelled),
                       grace, f" ({', '.join(leaving)} was leaving its consumer group: a "
                              "rebalance in progress holds the leave until it completes)"
                       if leaving else "")

    async def _supervise(self) -> None:
        run = asyncio.create_task(self.supervisor.run(), name="supervisor")
        stop = asyncio.create_task(self._stop_requested.wait(), name="stop-request")
        status = asyncio.create_task(self._status_loop(), name="status")
        stalls = asyncio.create_task(self._watch_stalls(), name="stall-watch")
        listing = (asyncio.create_task(self._list_topics(), name="topic-patterns")
                   if self.patterns else None)
        try:
            await asyncio.wait({run, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not run.done():
                self.supervisor.stop()
            await run
            if self.supervisor.cancelled:
                self._report_cancelled()
        finally:
            stop.cancel()
            status.cancel()
            stalls.cancel()
            if listing is not None:
                listing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await listing
            if not run.done():
                run.cancel()
