"""The MCL processor's shortcut for the usual event (``_usual_row``) gives the row the
field-checked path gives, and leaves everything else to that path (so a PoisonMessage
or error names the same field as before): hypothesis generates MCL records with every
field valid, missing, null or of the wrong type."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from processors.datahub_mcl import _checked_row, _usual_row

ODD = st.none() | st.integers() | st.floats() | st.booleans() | st.binary(max_size=4) | (
    st.lists(st.integers(), max_size=2)) | st.text(max_size=4)
JSON_BYTES = st.sampled_from([b'{"a":1}', b"[]", b'"\xc3\xa9"', b"NaN", b"{bad", b"\xff",
                              b'{"a":1E400}', b'"\\ud800"', b" 1 ", b"\xef\xbb\xbf{}", b""])
ASPECT = st.none() | st.fixed_dictionaries({
    "value": JSON_BYTES | ODD,
    "contentType": st.sampled_from(["application/json", "APPLICATION/JSON; charset=utf-8",
                                    "text/plain", "application/json-patch+json"]) | ODD,
}) | ODD
SYSTEM = st.none() | st.dictionaries(
    st.sampled_from(["runId", "lastObserved", "properties", "x", "\ud800"]),
    st.none() | st.text(max_size=4) | st.integers() | st.floats() | st.binary(max_size=3)
    | st.dictionaries(st.text(max_size=2), st.text(max_size=2), max_size=2),
    max_size=4) | ODD
CREATED = st.none() | st.fixed_dictionaries(
    {"time": st.integers() | ODD, "actor": st.text(max_size=4) | ODD}) | ODD


def _field(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(valid, valid, ODD)  # mostly valid, so the shortcut is taken often


MCL = st.fixed_dictionaries({
    "entityUrn": _field(st.text(max_size=8)),
    "entityType": _field(st.just("dataset")),
    "aspectName": _field(st.just("ownership")),
    "changeType": _field(st.just("UPSERT")),
    "entityKeyAspect": st.one_of(st.none(), st.none(), ASPECT),
    "aspect": ASPECT,
    "previousAspectValue": ASPECT,
    "systemMetadata": SYSTEM,
    "previousSystemMetadata": SYSTEM,
    "created": CREATED,
}) | ODD


def _outcome(call: Any, value: Any) -> Any:
    try:
        return ("ok", call(value))
    except Exception as exc:  # noqa: BLE001 - compare whatever either raises
        return ("raised", type(exc), str(exc))


@settings(max_examples=1000, deadline=timedelta(seconds=2), database=None)
@given(MCL)
def test_usual_row_is_the_checked_row(mcl: Any) -> None:
    usual = _outcome(_usual_row, mcl)
    checked = _outcome(_checked_row, mcl)
    if usual == ("ok", None):
        return  # the checked path decides
    assert usual == checked
    assert json.dumps(usual[1]) == json.dumps(checked[1])  # the column order too


def test_the_usual_event_takes_the_shortcut() -> None:
    mcl = {"entityUrn": "urn:li:dataset:x", "entityType": "dataset", "aspectName": "ownership",
           "changeType": "UPSERT", "entityKeyAspect": None,
           "aspect": {"value": b'{"owners": []}', "contentType": "application/json"},
           "previousAspectValue": None, "systemMetadata": {"runId": "r", "lastObserved": 1},
           "previousSystemMetadata": None, "created": {"time": 5, "actor": "urn:li:corpuser:a"}}
    row = _usual_row(mcl)
    assert row is not None
    assert row == _checked_row(mcl)
