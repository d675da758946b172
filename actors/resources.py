"""What the parts of one process share, owned by whoever runs them: :class:`Resources`.

Today that is the process's :class:`~actors.sinks.spark.actor.SparkActor`: pyspark allows
one SparkContext per process, so the spark and jdbc sinks of every worker, the merge and
maintenance loops and the one-shot table commands all run on one actor. Its owner makes
the :class:`Resources` and closes them at shutdown: the lifecycle for ``kstage run``
(they outlive the master: the merge after ``--drain`` still runs on the actor), the
command for ``kstage merge``, ``tables`` and ``dlq replay``, and a :class:`~actors.master.Master`
built without any (the plugin kit, tests) for the length of its ``run()``. Sinks reach
them through their :class:`~actors.sinks.base.SinkContext`.

The actor is made on first use (a process without spark sinks never loads the Spark
modules) and starts no JVM until its first call.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Self

from settings.models import SparkSettings

if TYPE_CHECKING:
    from actors.metrics import Metrics
    from actors.sinks.spark.actor import SparkActor
    from actors.tracing import Tracing


class Resources:
    """The process's shared resources: :meth:`spark` makes the SparkActor on first use,
    :meth:`close` stops it (idempotent; a later :meth:`spark` makes a new one).

    Args:
        spark: the ``spark:`` section the actor is made with.
        metrics: the process's metrics, given to the actor (fenced staging appends).
    """

    def __init__(self, spark: SparkSettings | None = None,
                 metrics: Metrics | None = None) -> None:
        self.spark_settings = spark or SparkSettings()
        self.metrics = metrics
        self._spark: SparkActor | None = None
        # The process's tracer when tracing is on (set and shut down by the lifecycle of
        # kstage run); None: nothing traces, nothing imports opentelemetry.
        self.tracing: Tracing | None = None

    def __repr__(self) -> str:
        return f"<Resources spark={self._spark!r}>"

    def spark(self) -> SparkActor:
        """The process's SparkActor (made on first use)."""
        if self._spark is None:
            # Imported here: a process without spark sinks never loads the Spark modules.
            from actors.sinks.spark.actor import SparkActor

            self._spark = SparkActor(self.spark_settings)
            self._spark.metrics = self.metrics
        return self._spark

    async def close(self) -> None:
        """Stop the SparkActor if one was made (its session and its thread)."""
        actor, self._spark = self._spark, None
        if actor is not None:
            await actor.astop()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()


__all__ = ["Resources"]
