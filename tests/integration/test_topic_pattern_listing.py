"""The topic listing of ``topic_pattern`` entries on the real broker (both): a listing
that fails (the broker taken away) is retried with backoff and shown in ``/readyz``,
naming the pattern and the error, until a listing succeeds again; ``kstage run --drain``
with a pattern that matches no topic has nothing to drain and exits 0 saying so."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from service.broker import free_port
from tests.brokers import dedicated_broker
from tests.kafkautil import KstageProcess, unique, wait_readyz, write_config

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def pattern_config(tmp_path: Path, broker: str, pattern: str, **service: object) -> Path:
    cfg = write_config(tmp_path / "kstage.yml", broker, unique("g-list"), [{
        "topic_pattern": pattern, "processor": "json_rows",
        "sink": {"type": "jsonl", "path": str(tmp_path / "out" / "{topic}.jsonl")}}],
        service=dict(service))
    data = yaml.safe_load(cfg.read_text())
    data["kafka"]["metadata_refresh_s"] = 0.5
    cfg.write_text(yaml.safe_dump(data))
    return cfg


@pytest.mark.timeout(300)
async def test_a_failing_topic_listing_is_retried_and_shown_in_readyz(
        broker_kind: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    pattern = f"{unique('lst').replace('-', '')}\\..*"
    with dedicated_broker(broker_kind, tmp_path / "broker") as broker:
        port = free_port()
        proc = kstage(pattern_config(tmp_path, broker.bootstrap, pattern,
                                     http_port=port, http_host="127.0.0.1"))
        base = f"http://127.0.0.1:{port}"
        await proc.wait_for_log(f"pattern {pattern!r} matches no topic yet", timeout=90)
        await wait_readyz(base, proc, 200, timeout=60)

        broker.stop()  # the broker taken away: every listing fails
        body = await wait_readyz(base, proc, 503, "cannot list the cluster's topics",
                                 timeout=120)
        [reason] = [r for r in body["reasons"] if "cannot list" in r]
        assert repr(pattern) in reason, reason
        await proc.wait_for_log("cannot list the cluster's topics", timeout=60, count=2)

        broker.start()  # back: the next listing succeeds and /readyz says ready
        await wait_readyz(base, proc, 200, timeout=120)
        proc.kill()


@pytest.mark.timeout(120)
async def test_drain_with_a_pattern_that_matches_no_topic_exits_0(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    pattern = f"{unique('none').replace('-', '')}\\..*"
    proc = kstage(pattern_config(tmp_path, broker, pattern), "--drain")
    assert await proc.wait(90) == 0, proc.output()
    assert f"pattern {pattern!r} matches no topic: nothing to drain" in proc.output()
