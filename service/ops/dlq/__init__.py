"""``kstage dlq show|replay``: inspect and replay the dead letters, those of the
dead-letter files (``failure.dead_letter_path``) or of a dead-letter topic
(``failure.dead_letter_topic``, with ``--from-topic NAME``).

A module per concern, each documenting its part: :mod:`~service.ops.dlq.letters` (the
files, append-only, and beside each its ``.replayed`` sidecar recording what was
replayed), :mod:`~service.ops.dlq.topic` (a dead-letter topic read as lines, its replays
marked by a consumer group's committed offset), :mod:`~service.ops.dlq.render` (what
``show`` and ``replay`` print), :mod:`~service.ops.dlq.targets` (a topic's record
pipeline and sinks, as a replay runs them), :mod:`~service.ops.dlq.handlers` (a line
handed to them, or re-produced to Kafka with ``--to-kafka``),
:mod:`~service.ops.dlq.result` (what a replay did) and :mod:`~service.ops.dlq.replay`
(the replay loops and the commands' entry points, :func:`show` and :func:`replay`).
The names the command and its callers use are re-exported here.
"""

from service.ops.dlq.letters import DeadLetter, load
from service.ops.dlq.render import Progress, render, render_json, render_replay
from service.ops.dlq.replay import replay, replay_async, replay_topic_async, show
from service.ops.dlq.result import ReplayResult
from service.ops.dlq.topic import load_topic, replay_group

__all__ = [
    "DeadLetter",
    "Progress",
    "ReplayResult",
    "load",
    "load_topic",
    "render",
    "render_json",
    "render_replay",
    "replay",
    "replay_async",
    "replay_group",
    "replay_topic_async",
    "show",
]
