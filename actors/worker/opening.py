"""A worker's start: its sinks opened, then its consumer started, an outage waited out.

A sink that cannot open now raises a SinkError: its catalog, storage, database or
identity provider is out of reach. A consumer that cannot start raises
KafkaConnectionError: no broker of the bootstrap list answers (Kafka not up yet, the
network gone). Neither is a fact about the configuration, so the worker tries again with
backoff (0.5 s doubling to 30 s) and says why in ``/readyz`` meanwhile (the reason is the
worker's ``security_problem`` until it joins its group); nothing is consumed until every
sink is open and the consumer started, and a stop meanwhile ends the worker without a
crash. Before, such a worker crashed, and the restart
limit (``supervisor.max_restarts`` crashes a minute, 5) stopped the process within about
15 s of its start. A FatalError still stops the process, and so does a login, certificate
or token the brokers refuse at the process's start (exit 2: the same settings fail the
same way); in a restarted worker that is credentials that stopped working mid-run, waited
out as an outage.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaConnectionError

from actors.backoff import backoff_s
from actors.errors import SinkError
from actors.kafka import KafkaSecurityError
from actors.sinks import Sink
from actors.worker.flow import Flow

logger = logging.getLogger(__name__)


async def _wait(flow: Flow, attempt: int, label: str, why: str, then: str) -> bool:
    """After the ``attempt``-th failure (0 first): say ``why`` and sleep the start's
    backoff before ``then``; False when the worker was stopped meanwhile."""
    delay = backoff_s(attempt, 0.5, 30.0)
    logger.warning("%s: %s; %s in %.1fs", label, why, then, delay)
    return await flow.sleep(delay)


async def open_sink(sink: Sink, flow: Flow, label: str,
                    problem: Callable[[str | None], None]) -> bool:
    """Open ``sink``, again with backoff while it raises a SinkError; ``problem`` is told
    why (None once open). False: the worker was stopped while waiting (not open, nothing
    consumed: the worker ends without a crash)."""
    attempt = 0
    while True:
        try:
            await sink.open()
        except SinkError as exc:
            problem(str(exc))
            if not await _wait(flow, attempt, label, str(exc), "opening the sink again"):
                return False
            attempt += 1
            continue
        problem(None)
        return True


async def start_consumer(make: Callable[[], AIOKafkaConsumer], flow: Flow, label: str,
                         problem: Callable[[str | None], None], *, restarted: bool,
                         bootstrap: str) -> AIOKafkaConsumer | None:
    """A consumer ``make()`` made and started, made again with backoff while no broker
    answers (or, in a ``restarted`` worker, the brokers refuse its credentials);
    ``problem`` is told why (None once started). None: the worker was stopped while
    waiting."""
    attempt = 0
    while True:
        consumer = make()
        try:
            await consumer.start()
        except KafkaSecurityError as exc:
            if not restarted:
                raise
            why = str(exc)
        except KafkaConnectionError as exc:
            why = f"cannot reach the Kafka brokers at {bootstrap}: {exc}"
            with contextlib.suppress(Exception):  # its half-made connections
                await consumer.stop()
        else:
            problem(None)
            return consumer
        problem(why)
        if not await _wait(flow, attempt, label, why, "retrying"):
            return None
        attempt += 1


__all__ = ["open_sink", "start_consumer"]
