"""A pyiceberg transaction whose table metadata is computed once per state.

pyiceberg 0.12's ``Transaction.table_metadata`` applies the staged updates to the table's
metadata and deep-copies the result on every read, and one append reads it about 19
times. A deep copy is proportional to the table's snapshots: a staging table that keeps
an hour of one-second appends pays that 19 times per append, under the GIL the event
loop needs too (measured: 45 ms of CPU per append at 50 snapshots, 160-250 ms at
200-400; ``bench/pyiceberg_commit.py``). Upstream knows it (apache/iceberg-python
#2673, #3301; #3784 proposes this cache; 0.12 has none).

:func:`transaction` opens the transaction ``Table.append`` would open, but its
``table_metadata`` is computed once for each pair (the table's metadata, the staged
updates): both are immutable (a frozen model, a tuple that each staging replaces), and a
commit's retry refreshes the table (a new metadata object), so a new pair is computed
again. What the property returns is the same frozen model to every reader, as the copy
was. pyiceberg is imported only inside functions; the pin ``<0.13`` in pyproject.toml
keeps the property this replaces as described here.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def _cached_transaction_class() -> type[Any]:
    import pyiceberg.table.update as table_update  # only with appends: pyiceberg
    from pyiceberg.table import Transaction

    class CachedTransaction(Transaction):
        """``Transaction`` whose ``table_metadata`` is computed once per state."""

        _state: tuple[Any, Any, Any] | None = None

        @property
        def table_metadata(self) -> Any:
            base, updates = self._table.metadata, self._updates
            state = self._state
            if state is not None and state[0] is base and state[1] is updates:
                return state[2]
            # Looked up at call time (a test counts the computations).
            metadata = table_update.update_table_metadata(base, updates)
            self._state = (base, updates, metadata)
            return metadata

    return CachedTransaction


def transaction(table: Any) -> Any:
    """A transaction of the pyiceberg ``table`` (as ``table.transaction()``), its
    ``table_metadata`` computed once per state; commit it with ``with`` or
    ``commit_transaction()``."""
    return _cached_transaction_class()(table)


__all__ = ["transaction"]
