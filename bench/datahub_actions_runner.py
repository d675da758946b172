"""One DataHub Actions pipeline run for ``bench/datahub_actions.py`` (the baseline side).

Runs with the DataHub Actions venv's Python (``python -P``, so ``bench/`` is not put on
``sys.path``: its ``http.py`` would shadow the standard library's). Argument: a JSON
object with ``name`` (the pipeline name, which DataHub uses as the group id),
``bootstrap``, ``registry`` (schema registry URL), ``topic``, ``messages``,
``failed_events_dir`` and ``async_commit_enabled``.

The pipeline is the one ``datahub actions -c config.yml`` builds from this config::

    name: <group>
    source:
      type: kafka
      config:
        connection:
          bootstrap: <bootstrap>
          schema_registry_url: <registry>
          consumer_config: {auto.offset.reset: earliest, session.timeout.ms: 6000,
                            heartbeat.interval.ms: 500}
        topic_routes: {mcl: <topic>}
        async_commit_enabled: true
    action: {type: "__main__:CountingAction", config: {messages: N}}
    options: {failed_events_dir: <the run's work dir>}

i.e. DataHub's own Kafka event source with its defaults (``async_commit_enabled: true``:
each acknowledged event's offset is stored, librdkafka auto-commits the stored offsets
every 10 s and when the consumer closes). The only overrides are ``earliest`` (the topic
was produced before the run) and the short session the other sides use on this broker.
``CountingAction.act`` counts; at the N-th event it asks the source to stop. The runner
then closes the pipeline as DataHub's ``PipelineManager`` does, which commits the stored
offsets.

stdout: one JSON line per milestone, ``{"event": ..., "t": <time.time()>, ...}``:
``assigned`` (the consumer's partition assignment, seen by an ``on_assign`` callback
added to its ``subscribe``), ``first_event``, ``last_event``, ``closed`` (close returned:
its final commit is done), ``stats``. Logs go to stderr.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from datahub_actions.action.action import Action
from datahub_actions.pipeline.pipeline import Pipeline


def report(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


class CountingAction(Action):
    """Counts the events it is given; at ``messages`` it stops the event source."""

    def __init__(self, messages: int, ctx: Any) -> None:
        self.messages = messages
        self.ctx = ctx
        self.count = 0

    @classmethod
    def create(cls, config_dict: dict[str, Any], ctx: Any) -> CountingAction:
        return cls(int(config_dict["messages"]), ctx)

    def act(self, event: Any) -> None:
        self.count += 1
        if self.count == 1:
            report("first_event", offset=event.meta["kafka"]["offset"])
        if self.count == self.messages:
            report("last_event", offset=event.meta["kafka"]["offset"], count=self.count)
            self.ctx.event_source.request_stop()

    def close(self) -> None:
        return None


def main() -> None:
    args = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    pipeline = Pipeline.create({
        "name": args["name"],
        "source": {"type": "kafka", "config": {
            "connection": {
                "bootstrap": args["bootstrap"],
                "schema_registry_url": args["registry"],
                "consumer_config": {"auto.offset.reset": "earliest",
                                    "session.timeout.ms": 6000,
                                    "heartbeat.interval.ms": 500},
            },
            "topic_routes": {"mcl": args["topic"]},
            # true is the default; false (the benchmark's --datahub-sync-commits) commits
            # each event's offset synchronously after its action returned
            "async_commit_enabled": args["async_commit_enabled"],
        }},
        "action": {"type": "__main__:CountingAction",
                   "config": {"messages": args["messages"]}},
        # its failed-events log: in the run's work dir, not /tmp/logs/datahub/actions
        "options": {"failed_events_dir": args["failed_events_dir"]},
    })
    consumer = pipeline.source.consumer  # type: ignore[attr-defined]
    subscribe = consumer.subscribe

    def on_assign(_consumer: Any, partitions: list[Any]) -> None:
        report("assigned", partitions=[[p.topic, p.partition] for p in partitions])

    def subscribe_timed(topics: list[str], **kwargs: Any) -> None:
        subscribe(topics, on_assign=on_assign, **kwargs)

    consumer.subscribe = subscribe_timed
    try:
        pipeline.run()
    finally:
        pipeline.close()
        report("closed")
    stats = pipeline.stats()
    report("stats", success=stats.get_success_count(), failed=stats.get_failed_event_count(),
           failed_acks=stats.get_failed_ack_count(),
           action=str(stats.get_action_stats().__dict__))


if __name__ == "__main__":
    main()
