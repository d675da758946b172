"""The suite's process count (tests/xdist_workers.py): two per core, bounded by memory."""

from __future__ import annotations

import pytest

from tests import conftest
from tests.xdist_workers import MAX_WORKERS, auto_workers, machine_workers

GB = 1024**3


@pytest.mark.parametrize(("cores", "memory", "workers"), [
    (2, 23 * GB, 4),   # the CI machine: two per core
    (1, 23 * GB, 2),
    (2, 5 * GB, 2),    # memory bounds it: 2 GB each
    (2, 1 * GB, 1),    # never none
    (64, 512 * GB, MAX_WORKERS),
])
def test_two_processes_per_core_bounded_by_memory(cores: int, memory: int,
                                                  workers: int) -> None:
    assert auto_workers(cores, memory) == workers


def test_the_environment_variable_overrides_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert machine_workers() == 3


def test_the_conftest_hook_answers_xdist(monkeypatch: pytest.MonkeyPatch,
                                         pytestconfig: pytest.Config) -> None:
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "5")
    assert conftest.pytest_xdist_auto_num_workers(pytestconfig) == 5
