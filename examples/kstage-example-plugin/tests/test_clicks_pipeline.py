"""The ``clicks`` processor through the real kstage pipeline on the embedded broker.

``run_pipeline`` starts a broker, produces the values to a fresh topic, runs the master
with ``--drain`` semantics and returns the rows the jsonl sink wrote plus the dead-letter
lines: this checks the entry point, the options, decoding and the failure policy.
"""

from __future__ import annotations

from service.testing import run_pipeline


def page_view(event_id: str, **fields: object) -> dict[str, object]:
    return {"event_id": event_id, "type": "page_view", "ts": 1_700_000_000_000,
            "url": f"https://shop.example.com/p/{event_id}", **fields}


async def test_clicks_end_to_end_on_the_embedded_broker() -> None:
    values = [
        page_view("a", user_id="u-1"),
        page_view("b", user_agent="AhrefsBot/7.0"),  # filtered: a crawler
        b"{not json",                                  # poison: kstage's decoder rejects it
        page_view("c", ts="soon"),                     # poison: the processor rejects it
        page_view("d"),
    ]
    result = await run_pipeline("clicks", values, options={"site": "shop"}, timeout_s=60)
    assert [(r["event_id"], r["site"], r["page_path"], r["_offset"]) for r in result.rows] == [
        ("a", "shop", "/p/a", 0), ("d", "shop", "/p/d", 4)]
    assert {r["_topic"] for r in result.rows} == {result.topic}
    dead = {d["offset"]: d for d in result.dead_letters}
    assert sorted(dead) == [2, 3]
    assert dead[3]["processor"] == "clicks"
    assert dead[3]["error_type"].endswith("PoisonMessage")
    assert "ts=" in dead[3]["error"]
