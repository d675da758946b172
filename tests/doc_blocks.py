"""Python blocks of the docs, run by the tests that check what they show."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_block(doc: str, marker: str) -> dict[str, Any]:
    """Run the ```python block of ``doc`` (relative to the repository) holding ``marker``;
    its namespace."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    at = text.index(marker)
    code = text[text.rindex("```python", 0, at) + len("```python"):text.index("```", at)]
    namespace: dict[str, Any] = {}
    exec(compile(code, doc, "exec"), namespace)  # noqa: S102 - our own docs
    return namespace
