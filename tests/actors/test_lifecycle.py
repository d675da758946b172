"""The one lifecycle vocabulary (actors/lifecycle.py): run once, stop in phases, the state
in every actor's repr."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actors.lifecycle import Lifecycle, State
from actors.supervisor import OneForOneSupervisor
from settings.models import SupervisorSettings
from tests.fake_consumer import FakeConsumer
from tests.kit import TOPIC, RecordingSink, make_worker, values, worker_settings


def test_the_states_move_only_forward() -> None:
    life = Lifecycle("a")
    assert life.state is State.INIT
    life.start()
    assert life.state is State.RUNNING
    with pytest.raises(RuntimeError, match="run\\(\\) called again"):
        life.start()
    life.stopping()
    life.stopping()  # idempotent
    assert life.state is State.STOPPING
    life.ended()
    life.stopping()  # no effect once stopped
    assert life.state is State.STOPPED
    crashed = Lifecycle("b")
    crashed.start()
    crashed.ended(crashed=True)
    assert repr(crashed) == "crashed"


async def test_a_worker_shows_its_state_and_runs_once(tmp_path: Path) -> None:
    consumer = FakeConsumer(TOPIC, {0: values({"i": 0})})
    worker = make_worker(worker_settings(tmp_path), consumer, RecordingSink())
    assert " init " in repr(worker)
    run = asyncio.create_task(worker.run())
    await asyncio.sleep(0.05)
    assert " running " in repr(worker)
    worker.stop()
    assert " stopping " in repr(worker)
    await asyncio.wait_for(run, 10)
    assert " stopped " in repr(worker)
    with pytest.raises(RuntimeError):
        await worker.run()


async def test_a_supervisor_stopped_before_it_runs_starts_nothing() -> None:
    sup = OneForOneSupervisor([], SupervisorSettings())
    sup.stop()
    await asyncio.wait_for(sup.run(), 5)
    assert "stopped" in repr(sup)
