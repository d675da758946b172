"""The worker: one aiokafka consumer for one (group, topic), end to end.

Its parts, each owning one job (and one task where it has a loop), share one flow state
and never the worker:

* :mod:`actors.worker.flow`: the flow state (inbox, in-flight window, room and progress,
  retry lanes, the assignment's generations, the fence);
* :mod:`actors.worker.fetcher`: the fetch loop, the in-flight window, pausing, the poll;
* :mod:`actors.worker.process`: the process loop and its retry lanes;
* :mod:`actors.worker.pipeline`: one walk per batch, decode → transform → failure policy
  → rows or dead-letter lines (also walked by ``dlq replay``, the plugin test kit and the
  benchmarks), over :mod:`actors.worker.records` and :mod:`actors.deadletters`;
* :mod:`actors.worker.committer`: one policy class per commit mode over the offset
  tracker, and the commit task;
* :mod:`actors.worker.rebalance`: the rebalance listener (assign, revoke with the fence,
  committed offsets, advancing to positions);
* :mod:`actors.worker.parts`: the parts built once, when what they need exists;
* :mod:`actors.worker.worker`: the :class:`Worker` running them (the sink task, drain
  detection, status and readiness).
"""

from __future__ import annotations

from actors.worker.worker import Worker

__all__ = ["Worker"]
