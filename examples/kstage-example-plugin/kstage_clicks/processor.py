"""The ``clicks`` processor: clickstream page views -> rows of ``stg_clicks``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated
from urllib.parse import urlsplit

from processors import Column, Message, NoOptions, PoisonMessage, Processor, Row, with_coordinates
from pydantic import AfterValidator, Field, StrictBool


def _lowered(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v.lower() for v in values)


class ClicksOptions(NoOptions):
    """The topic's ``options``: ``kstage validate`` and ``run`` check them before start
    (unknown keys and wrong types are refused, naming the key and its line)."""

    site: str = Field("default", min_length=1, description="The site column's value.")
    types: Annotated[tuple[str, ...], AfterValidator(_lowered)] = Field(
        ("page_view",), description="Event types to keep (case-insensitive).")
    drop_bots: StrictBool = Field(True, description="Drop crawler traffic.")
    bot_markers: Annotated[tuple[str, ...], AfterValidator(_lowered)] = Field(
        ("bot", "crawler", "spider"),
        description="Case-insensitive user-agent substrings of crawlers.")


class ClicksProcessor(Processor):
    """Web clickstream events -> ``stg_clicks``, one row per page view.

    Input, one JSON object per message::

        {"event_id": "e-1", "type": "page_view", "user_id": "u-42", "ts": 1700000000123,
         "url": "https://Shop.example.com/p/17?ref=mail", "referrer": "https://www.google.com/",
         "user_agent": "Mozilla/5.0 (X11; Linux x86_64)"}

    Filtered out (no row): events whose ``type`` is not in ``types``, and, with
    ``drop_bots``, events whose user agent contains a ``bot_markers`` entry.
    Poison (dead-lettered or thrown per the group's failure policy): a value that is not
    an object, a missing ``event_id``, a ``url`` that is not an absolute http(s) URL, a
    ``ts`` that is not an integer. ``transform`` is pure, so a replay gives the same rows.

    Options:
        site: the ``site`` column's value (default ``"default"``).
        types: event types to keep (default ``["page_view"]``).
        drop_bots: drop crawler traffic (default true).
        bot_markers: case-insensitive user-agent substrings of crawlers.
    """

    name = "clicks"
    formats = ("json",)
    description = "clickstream page views -> stg_clicks"
    table = "stg_clicks"
    key = ("event_id",)
    columns = (
        Column("event_id", nullable=False, doc="event_id"),
        Column("site", nullable=False, doc="the topic's site option"),
        Column("user_id", doc="user_id; None for anonymous visitors"),
        Column("page_host", nullable=False, doc="url host, lowercased"),
        Column("page_path", nullable=False, doc="url path, without query and fragment"),
        Column("referrer_host", doc="referrer host, lowercased; None when absent"),
        Column("event_time", "long", nullable=False, doc="ts (epoch ms)"),
    )

    options_model = ClicksOptions
    options: ClicksOptions

    def is_bot(self, user_agent: object) -> bool:
        agent = user_agent.lower() if isinstance(user_agent, str) else ""
        return any(marker in agent for marker in self.options.bot_markers)

    def transform(self, message: Message) -> Sequence[Row]:
        event = message.value
        if not isinstance(event, dict):
            raise PoisonMessage(f"expected a JSON object, got {type(event).__name__}")
        if str(event.get("type", "")).lower() not in self.options.types:
            return []
        if self.options.drop_bots and self.is_bot(event.get("user_agent")):
            return []
        event_id, url, ts = event.get("event_id"), event.get("url"), event.get("ts")
        if not isinstance(event_id, str) or not event_id:
            raise PoisonMessage("field event_id is missing or not a non-empty string")
        page = urlsplit(url) if isinstance(url, str) else None
        if page is None or page.scheme not in ("http", "https") or not page.hostname:
            raise PoisonMessage(f"field url={url!r:.80} is not an absolute http(s) URL")
        if not isinstance(ts, int) or isinstance(ts, bool):
            raise PoisonMessage(f"field ts={ts!r:.40} is not an integer (epoch ms)")
        referrer = event.get("referrer")
        user_id = event.get("user_id")
        row: Row = {
            "event_id": event_id,
            "site": self.options.site,
            "user_id": user_id if isinstance(user_id, str) else None,
            "page_host": page.hostname,  # urlsplit lowercases the host
            "page_path": page.path or "/",
            "referrer_host": urlsplit(referrer).hostname if isinstance(referrer, str) else None,
            "event_time": ts,
        }
        return [with_coordinates(row, message)]
