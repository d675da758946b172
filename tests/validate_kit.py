"""A one-group configuration from its topic entries, and the check that ``kstage validate``
refuses it with one line naming the file, the topic's key and its line (the settings tests
of topic patterns and routes)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from service.cli import main


def topics_config(tmp_path: Path, entries: str, name: str = "kit") -> Path:
    """A config of one group; ``entries`` holds its topics (the first on line 4)."""
    path = tmp_path / "kstage.yml"
    path.write_text(f"name: {name}\ngroups:\n  - topics:\n"
                    + textwrap.indent(textwrap.dedent(entries), "      "), encoding="utf-8")
    return path


def assert_refused_at(tmp_path: Path, capsys: pytest.CaptureFixture[str], entries: str,
                      key: str, line: int, why: str) -> None:
    """``kstage validate`` exits 2 with one line: the file, ``groups[0].topics[0].KEY``,
    its line, and ``why`` in it."""
    path = topics_config(tmp_path, entries)
    code = main(["validate", "-c", str(path)])
    out, err = capsys.readouterr()
    lines = (out + err).splitlines()
    assert code == 2, lines
    prefix = f"kstage: {path}: groups[0].topics[0].{key} (line {line}): "
    assert len(lines) == 1 and lines[0].startswith(prefix), lines
    assert why in lines[0], lines
