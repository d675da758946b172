"""What a ``kstage dlq replay`` did with the dead-letter lines it found."""

from __future__ import annotations

from dataclasses import dataclass, field

from service.ops.dlq.letters import DeadLetter


@dataclass(slots=True)
class ReplayResult:
    """The lines a replay replayed, those that failed again or it skipped (each with why),
    and the counts of lines replayed before and of unreadable ones."""

    replayed: list[DeadLetter] = field(default_factory=list)
    failed: list[tuple[DeadLetter, str]] = field(default_factory=list)
    skipped: list[tuple[DeadLetter, str]] = field(default_factory=list)
    already: int = 0
    unreadable: int = 0
    filtered: int = 0  # of replayed: kept from the processor by the topic's filter
