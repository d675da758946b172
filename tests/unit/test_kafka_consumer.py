"""build_consumer sets the rebalance timeout explicitly (aiokafka's default is the
session timeout, shorter than a revoke's drain)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from actors.kafka import build_consumer, rebalance_timeout_ms
from settings import load_settings
from settings.errors import ConfigValidationError


def config(tmp_path: Path, group: dict[str, object], kafka: dict[str, object] | None = None
           ) -> Path:
    path = tmp_path / "kstage.yml"
    path.write_text(yaml.safe_dump({
        "name": "g", "kafka": {"bootstrap": "127.0.0.1:9", **(kafka or {})},
        "groups": [{"topics": [{"topic": "t", "processor": "log"}], **group}]}))
    return path


@pytest.mark.parametrize(("group", "kafka", "expected"), [
    ({}, None, 60000),
    ({"rebalance_timeout_ms": 20000}, None, 20000),
    ({"rebalance_timeout_ms": 20000}, {"consumer_config": {"rebalance.timeout.ms": 15000}},
     15000),
])
async def test_rebalance_timeout_is_explicit(tmp_path, group, kafka, expected) -> None:
    settings = load_settings(config(tmp_path, group, kafka), {})
    (g,) = settings.groups
    assert rebalance_timeout_ms(settings, g) == expected
    consumer = build_consumer(settings, g, "127.0.0.1:9", "t")
    try:
        assert consumer._rebalance_timeout_ms == expected
        assert consumer._session_timeout_ms == 10000
    finally:
        await consumer.stop()  # never started: closes its client


def test_rebalance_timeout_is_validated_with_its_line(tmp_path) -> None:
    with pytest.raises(ConfigValidationError, match="rebalance_timeout_ms"):
        load_settings(config(tmp_path, {"rebalance_timeout_ms": 10}), {})
