"""``log``: logs every message at INFO and produces no rows (for debugging a topic)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from processors.base import Message, Processor, Row

logger = logging.getLogger(__name__)


class LogProcessor(Processor):
    """Logs topic/partition/offset and a preview of the value; returns no rows."""

    name = "log"
    description = "log each message (topic, partition, offset, value preview); no rows"

    def transform(self, message: Message) -> Sequence[Row]:
        preview = repr(message.value)
        if len(preview) > 200:
            preview = preview[:200] + "..."
        logger.info(
            "message %s[%d]@%d key=%r value=%s",
            message.topic, message.partition, message.offset, message.key, preview,
        )
        return ()
