"""Operator tools: commands that inspect or repair a running deployment's Kafka state.

``kstage lag`` (:mod:`service.ops.lag`, which also holds the Kafka plumbing the others share),
``kstage offsets reset`` (:mod:`service.ops.offsets`), ``kstage dlq show|replay``
(:mod:`service.ops.dlq`) and ``kstage schemas check`` (:mod:`service.ops.schemas`).
The CLI imports each module only when its command runs, so this package re-exports nothing.
"""

__all__: list[str] = []
