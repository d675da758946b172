"""The suite's processes write bytecode caches (tests/conftest.py ``write_bytecode``),
whatever PYTHONDONTWRITEBYTECODE the machine sets: a child that could not would compile
every module it imports again."""

from __future__ import annotations

import os
import subprocess
import sys


def test_this_process_and_its_children_write_bytecode_caches() -> None:
    assert not sys.dont_write_bytecode
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    child = subprocess.run([sys.executable, "-c", "import sys; print(sys.dont_write_bytecode)"],
                           capture_output=True, text=True, check=True, env=dict(os.environ))
    assert child.stdout.strip() == "False", child.stdout
