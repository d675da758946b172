"""The chaos run's CI variants: 10 SIGKILLs of three JSONL members, nothing lost, on the
embedded broker and on a 3-node Apache Kafka cluster whose brokers are killed too.

Each member slot keeps one output file across its restarts (a fixed sink path, as deployed).

``bench/chaos.py`` starts its own broker or cluster (a SIGKILL storm must not disturb the
brokers other tests share) and three real ``kstage run`` processes.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.kafkautil import ROOT

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kstage_bench_chaos", ROOT / "bench" / "chaos.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


async def test_ten_kills_of_jsonl_members_lose_nothing(tmp_path: Path) -> None:
    chaos = load_bench()
    opts = chaos.parse(["--sink", "jsonl", "--kills", "10", "--interval-s", "3",
                        "--rate", "100", "--drain-timeout-s", "60", "--jsonl-per-slot",
                        "--work-dir", str(tmp_path / "chaos")])
    result = await asyncio.wait_for(asyncio.to_thread(chaos.run, opts), 150)
    chaos.report(result)
    assert result.kills == 10
    assert result.produced > 0 and result.send_failed == 0
    assert result.drained, "the survivors committed every partition up to its high-water mark"
    assert result.lost == 0, result.notes
    assert result.final_lost == 0 and result.final_dup == 0, result.notes
    assert result.uncovered == 0 and result.dead == 0, result.notes
    assert result.clean_exits, result.notes


@pytest.mark.apache_kafka
async def test_cluster_chaos_three_broker_kills_and_ten_member_kills_lose_nothing(
        tmp_path: Path) -> None:
    """The cluster mode's short variant: a 3-node Apache Kafka cluster whose nodes are
    SIGKILLed and restarted (one at a time) while the members are."""
    chaos = load_bench()
    opts = chaos.parse(["--cluster", "--kills", "10", "--broker-kills", "3",
                        "--interval-s", "3", "--broker-interval-s", "5",
                        "--broker-down-s", "2", "--rate", "100", "--drain-timeout-s", "120",
                        "--jsonl-per-slot", "--work-dir", str(tmp_path / "chaos")])
    result = await asyncio.wait_for(asyncio.to_thread(chaos.run, opts), 170)
    chaos.report(result)
    assert (result.kills, result.broker_kills) == (10, 3)
    assert result.produced > 0
    assert result.drained, "the survivors committed every partition up to its end offset"
    assert result.lost == 0, result.notes
    assert result.final_lost == 0 and result.final_dup == 0, result.notes
    assert result.uncovered == 0 and result.dead == 0, result.notes
    assert result.clean_exits, result.notes
    assert result.last_line().endswith("kills=10 broker_kills=3")
