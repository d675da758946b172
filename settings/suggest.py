""""Did you mean" for the near misses of a configuration: a key the model does not know,
a value outside a fixed set, an unknown processor or sink type.

:func:`did_you_mean` is the one wording (problems end with ``; did you mean 'x'?``);
:func:`settings.model_keys.keys_at` finds the keys the settings model allows where a
typo'd key stands, so ``kstage validate`` can say which one was meant. This module
imports nothing of ``settings``: every module of the model can word its problems with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_QUOTED = re.compile(r"'([^']*)'")


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` when ``word`` is close to one of ``choices`` (and is not
    one of them); else ``""``."""
    if not isinstance(word, str):
        return ""
    import difflib  # only for a near miss: a valid file never loads it

    options = [c for c in choices if c != word]
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def quoted(text: str) -> list[str]:
    """The single-quoted words of ``text`` (pydantic's ``Input should be 'a', 'b' or 'c'``)."""
    return _QUOTED.findall(text)


__all__ = ["did_you_mean", "quoted"]
