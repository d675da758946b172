"""Dead letters: where a message that cannot be processed (or a row a sink refused for
good) goes instead of being lost, and where ``kstage dlq show|replay`` finds it.

* :mod:`actors.deadletters.file`: the dead-letter file, one JSON line per message
  (:func:`dead_letter_line`), appended and fsynced (:class:`DeadLetterFile`);
* :mod:`actors.deadletters.topic`: the dead-letter topic, the same line as a Kafka record
  acknowledged by all in-sync replicas (:class:`DeadLetterTopic`);
* :mod:`actors.deadletters.writer`: one topic's dead letters, to the file and then the
  topic, a failed write retried, never skipped (:class:`DeadLetters`; the record
  pipeline and the sinks' refusals write through it).
"""

from __future__ import annotations

from actors.deadletters.file import FILE_MODE, DeadLetterFile, dead_letter_line
from actors.deadletters.topic import (
    HEADER_PREFIX,
    SINK_HEADER_FIELDS,
    DeadLetterTopic,
    topic_record,
)
from actors.deadletters.writer import DeadLetters

__all__ = ["FILE_MODE", "HEADER_PREFIX", "SINK_HEADER_FIELDS", "DeadLetterFile",
           "DeadLetterTopic", "DeadLetters", "dead_letter_line", "topic_record"]
