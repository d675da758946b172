"""Unit tests of the ``clicks`` processor with ``processors.testing`` and
``service.testing.run_processor``: no broker, no I/O."""

from __future__ import annotations

from typing import Any

import pytest
from processors import COORDINATE_COLUMNS, PoisonMessage, registry
from processors.testing import DEFAULT_TIMESTAMP, message, messages
from pydantic import ValidationError
from service.testing import run_processor

from kstage_clicks import ClicksProcessor


def click(**fields: Any) -> dict[str, Any]:
    """A page view event; keyword arguments override or (with None) remove fields."""
    event: dict[str, Any] = {
        "event_id": "e-1", "type": "page_view", "user_id": "u-42", "ts": 1_700_000_000_123,
        "url": "https://Shop.example.com/p/17?ref=mail#top",
        "referrer": "https://www.google.com/search?q=x",
        "user_agent": "Mozilla/5.0 (X11; Linux x86_64)",
    }
    event.update(fields)
    return {k: v for k, v in event.items() if v is not None}


def test_page_view_becomes_a_row() -> None:
    rows = run_processor(ClicksProcessor, [message(click(), topic="clicks", offset=7)],
                         {"site": "shop"})
    assert rows == [{
        "event_id": "e-1", "site": "shop", "user_id": "u-42",
        "page_host": "shop.example.com", "page_path": "/p/17",
        "referrer_host": "www.google.com", "event_time": 1_700_000_000_123,
        "_topic": "clicks", "_partition": 0, "_offset": 7, "_timestamp": DEFAULT_TIMESTAMP,
    }]


def test_rows_have_exactly_the_declared_columns() -> None:
    (row,) = run_processor(ClicksProcessor, [message(click(user_id=None, referrer=None))])
    declared = {c.name for c in ClicksProcessor.columns}
    assert set(row) == declared | set(COORDINATE_COLUMNS)
    assert set(ClicksProcessor.key) <= declared
    for column in ClicksProcessor.columns:
        assert column.nullable or row[column.name] is not None, column.name


def test_other_types_and_bots_are_filtered_out() -> None:
    events = [click(event_id="a", type="add_to_cart"),
              click(event_id="b", user_agent="Googlebot/2.1"),
              click(event_id="c")]
    assert [r["event_id"] for r in run_processor(ClicksProcessor, messages(events))] == ["c"]
    kept = run_processor(ClicksProcessor, messages(events),
                         {"drop_bots": False, "types": ["page_view", "add_to_cart"]})
    assert [r["event_id"] for r in kept] == ["a", "b", "c"]


@pytest.mark.parametrize(("value", "needle"), [
    (["not", "an", "object"], "JSON object"),
    (click(event_id=None), "event_id"),
    (click(url="/relative/path"), "url="),
    (click(url=42), "url="),
    (click(ts="yesterday"), "ts="),
    (click(ts=True), "ts="),
])
def test_bad_events_are_poison(value: Any, needle: str) -> None:
    with pytest.raises(PoisonMessage, match=needle) as info:
        run_processor(ClicksProcessor, [message(value, topic="clicks", partition=2, offset=9)])
    # run_processor adds the coordinates of the failing message to the exception
    assert any("clicks[2]@9" in note for note in info.value.__notes__)


@pytest.mark.parametrize("options", [
    {"site": ""}, {"types": "page_view"}, {"drop_bots": "yes"}, {"colour": "red"},
])
def test_bad_options_fail_at_construction(options: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as info:
        ClicksProcessor(options)
    assert [e["loc"] for e in info.value.errors()] == [(next(iter(options)),)]


def test_is_registered_as_clicks() -> None:
    assert registry.load("clicks") is ClicksProcessor
