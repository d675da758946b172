"""A worker's sinks opened at its start, an outage waited out.

A sink that cannot open now raises a SinkError: its catalog, storage, database or
identity provider is out of reach. That is not a fact about the configuration, so the
worker opens it again with backoff (0.5 s doubling to 30 s) and says why in ``/readyz``
meanwhile, before it joins its group; nothing is consumed until every sink is open. Before,
such a worker crashed, and a restart limit of three crashes a minute stopped the process
within a second of its start. A FatalError still stops the process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from actors.backoff import backoff_s
from actors.errors import SinkError
from actors.sinks import Sink
from actors.worker.flow import Flow

logger = logging.getLogger(__name__)


async def open_sink(sink: Sink, flow: Flow, label: str,
                    problem: Callable[[str | None], None]) -> None:
    """Open ``sink``, again with backoff while it raises a SinkError; ``problem`` is told
    why (None once open). A stop while waiting re-raises the last error (nothing was
    consumed)."""
    attempt = 0
    while True:
        try:
            await sink.open()
        except SinkError as exc:
            problem(str(exc))
            delay = backoff_s(attempt, 0.5, 30.0)
            attempt += 1
            logger.warning("%s: %s; opening the sink again in %.1fs", label, exc, delay)
            if not await flow.sleep(delay):
                raise
            continue
        problem(None)
        return


__all__ = ["open_sink"]
