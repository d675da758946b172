"""The exit codes of ``kstage`` (a module of its own: the command line reads them without
importing the service)."""

from __future__ import annotations

EXIT_OK, EXIT_CRASH, EXIT_CONFIG, EXIT_ABORT = 0, 1, 2, 130
"""0 done; 1 crashed or a check failed; 2 a configuration problem; 130 aborted by a second
signal."""

__all__ = ["EXIT_ABORT", "EXIT_CONFIG", "EXIT_CRASH", "EXIT_OK"]
