"""The chaos run's CI variants: 10 SIGKILLs of three JSONL members, nothing lost, on the
embedded broker and on a 3-node Apache Kafka cluster whose brokers are killed too; and
zombies: members of the Iceberg staging path frozen past their session as an append starts,
no row twice.

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
from typing import Any

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
    # Its own drain timeout (120 s, after about 50 s of faults) ends first and says
    # which partitions did not drain; this one is the hang guard.
    result = await asyncio.wait_for(asyncio.to_thread(chaos.run, opts), 280)
    chaos.report(result)
    assert (result.kills, result.broker_kills) == (10, 3)
    assert result.produced > 0
    assert result.drained, "the survivors committed every partition up to its end offset"
    assert result.lost == 0, result.notes
    assert result.final_lost == 0 and result.final_dup == 0, result.notes
    assert result.uncovered == 0 and result.dead == 0, result.notes
    assert result.clean_exits, result.notes
    assert result.last_line().endswith("kills=10 broker_kills=3")


def assert_two_zombies_appended_nothing_twice(result: Any, last: str,
                                              sends_may_fail: bool = False) -> None:
    """Both freezes made a zombie, every partition drained, every event in the staging
    table once; the last line ends with ``last``. ``sends_may_fail``: a broker of the
    cluster may refuse a send (not counted as produced)."""
    assert result.freezes == 2
    assert result.evicted == 2, f"each frozen member woke up evicted (a zombie): {result.notes}"
    assert result.produced > 0 and (sends_may_fail or result.send_failed == 0)
    assert result.drained, "the members committed every partition up to its high-water mark"
    assert result.lost == 0, result.notes
    assert result.dup == 0, (
        f"{result.dup} row(s) twice in the staging table: a member frozen past its session "
        "committed an append of partitions the group had given to another member")
    assert result.uncovered == 0 and result.dead == 0, result.notes
    assert result.clean_exits, result.notes
    assert result.last_line().endswith(last)


@pytest.mark.fencing
async def test_two_freezes_of_pyiceberg_members_append_nothing_twice(tmp_path: Path) -> None:
    """Two members append to one Iceberg staging table through pyiceberg; twice, one of
    them is SIGSTOPped as one of its appends starts and kept stopped past its session
    (6 s + 8 s): the group gives its partitions to the other member, which appends them
    from the table's offsets, and the thawed zombie's append must not commit them again.

    The commit-time fence of staging appends (issue 32) keeps them out: before it,
    freezes left duplicates (four runs: 103, 104, 294 and 335 rows, e.g. ``lost=0 dup=335
    final_lost=- final_dup=- kills=0 freezes=2``). The
    run also checks that each freeze made a zombie (``evicted``). No merge (no JVM at
    all): the final table's dedupe would hide duplicates anyway; the staging table is what
    is checked."""
    chaos = load_bench()
    opts = chaos.parse(["--sink", "spark", "--appends", "pyiceberg", "--kills", "0",
                        "--freezes", "2", "--rate", "100", "--drain-timeout-s", "60",
                        "--no-merge", "--work-dir", str(tmp_path / "chaos")])
    result = await asyncio.wait_for(asyncio.to_thread(chaos.run, opts), 150)
    chaos.report(result)
    assert_two_zombies_appended_nothing_twice(result, "kills=0 freezes=2")


@pytest.mark.fencing
async def test_two_freezes_with_avro_batches_as_columns_append_nothing_twice(
        tmp_path: Path) -> None:
    """The same zombies on registry Avro events, whose backlogs (each member's start, the
    partitions a frozen member lost) are decoded and mapped as Arrow columns: the rows
    of a batch as columns reach the table through the same fence as rows as dicts, and
    the thawed zombie's append is refused. Every event once; some batches went as
    columns (``as_columns``: the members' DEBUG lines), or the run proved nothing of
    them."""
    chaos = load_bench()
    opts = chaos.parse(["--sink", "spark", "--appends", "pyiceberg", "--format", "avro",
                        "--kills", "0", "--freezes", "2", "--partitions", "2",
                        "--rate", "300", "--drain-timeout-s", "60", "--no-merge",
                        "--work-dir", str(tmp_path / "chaos")])
    result = await asyncio.wait_for(asyncio.to_thread(chaos.run, opts), 150)
    chaos.report(result)
    assert result.as_columns is not None and result.as_columns > 0, (
        "no batch went as columns: the run proved nothing of them")
    assert_two_zombies_appended_nothing_twice(result, "kills=0 freezes=2")


@pytest.mark.fencing
@pytest.mark.apache_kafka
async def test_two_freezes_on_the_cluster_append_nothing_twice(tmp_path: Path) -> None:
    """The same zombies on a 3-node Apache Kafka cluster (its group coordinator evicts the
    frozen member), pyiceberg appends, no merge. Before the commit-time fence (issue 32):
    ``lost=0 dup=102 final_lost=- final_dup=- kills=0 broker_kills=0 freezes=2``."""
    chaos = load_bench()
    opts = chaos.parse(["--cluster", "--sink", "spark", "--appends", "pyiceberg",
                        "--kills", "0", "--broker-kills", "0", "--freezes", "2",
                        "--rate", "100", "--drain-timeout-s", "60", "--no-merge",
                        "--work-dir", str(tmp_path / "chaos")])
    result = await asyncio.wait_for(asyncio.to_thread(chaos.run, opts), 170)
    chaos.report(result)
    assert_two_zombies_appended_nothing_twice(result, "kills=0 broker_kills=0 freezes=2",
                                              sends_may_fail=True)
