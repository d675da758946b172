"""What every section of the settings model shares: the base model (unknown keys refused,
frozen, inputs kept out of errors, secrets masked in a repr) and the name check."""

from __future__ import annotations

import re

from pydantic import ConfigDict

from settings.secrets import MaskedRepr

_NO_WHITESPACE = re.compile(r"^\S+$")


def check_name(value: str) -> str:
    """A name (a service, group, topic or processor): non-empty, no whitespace."""
    if not _NO_WHITESPACE.match(value):
        raise ValueError(f"must be non-empty and contain no whitespace, got {value!r}")
    return value


class Model(MaskedRepr):
    """The base of every section's model."""

    # hide_input_in_errors: a ValidationError (raised here or by a sink's own model at
    # run time, logged with its traceback) must not echo a password next to a typo.
    # MaskedRepr: free-form mappings (consumer_config, spark.conf, a sink's options) may
    # hold secrets by name; a repr shows them masked.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)
