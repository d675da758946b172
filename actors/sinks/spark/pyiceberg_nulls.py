"""A NULL list of structs kept NULL by pyiceberg (``spark.appends: pyiceberg``).

pyiceberg 0.12 rebuilds a list whose elements are structs (to project the structs'
fields) from the list's offsets alone, without its validity: a NULL ``array<struct<...>>``
(at the top, inside a struct, as a map's value) becomes an empty list, in the Parquet file
it writes and in what it reads (apache/iceberg-python#3833; the fix, #3834, carries the
validity over as a ``mask``, and is not released). :func:`install` wraps pyiceberg's
projection so that the rebuilt list keeps the nulls of the list it was built from. It is
idempotent, and a no-op once pyiceberg keeps the nulls itself (the wrapper only restores
a null the projection lost).

pyiceberg and pyarrow are imported only inside :func:`install`.
"""

from __future__ import annotations

import functools
from typing import Any

_INSTALLED = False


def install() -> None:
    """Wrap ``ArrowProjectionVisitor.list`` of pyiceberg (once per process)."""
    global _INSTALLED
    if _INSTALLED:
        return
    import pyarrow as pa
    from pyiceberg.io.pyarrow import ArrowProjectionVisitor

    original = ArrowProjectionVisitor.list

    @functools.wraps(original)
    def list_keeping_nulls(self: Any, list_type: Any, list_array: Any,
                           value_array: Any) -> Any:
        result = original(self, list_type, list_array, value_array)
        if (result is None or not isinstance(list_array, pa.ListArray | pa.LargeListArray)
                or not list_array.null_count or result.null_count == list_array.null_count):
            return result
        kind = pa.LargeListArray if isinstance(result, pa.LargeListArray) else pa.ListArray
        return kind.from_arrays(result.offsets, result.values, type=result.type,
                                mask=list_array.is_null())

    ArrowProjectionVisitor.list = list_keeping_nulls  # type: ignore[method-assign]
    _INSTALLED = True


__all__ = ["install"]
