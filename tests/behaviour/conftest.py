"""The fixture ``harness``: each behaviour test runs once per harness (see
:mod:`tests.behaviour.harness`): ``fake`` (no broker), then on every broker the test is
declared for in tests/brokers.py (``tansu``; ``kafka``, marked ``apache_kafka``). A test marked
``broker_only(reason)`` skips the fake, with that reason."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.behaviour.harness import PARTITIONS, BrokerHarness, FakeHarness, Harness
from tests.brokers import KAFKA, TANSU, kinds_for
from tests.conftest import new_fresh

FAKE = "fake"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "harness_kind" in metafunc.fixturenames:
        module = metafunc.module.__name__.rsplit(".", 1)[-1]
        brokers = kinds_for(module, metafunc.function.__name__)
        # A behaviour the fake consumer cannot show runs on the brokers alone; the
        # fake's run is skipped with the reason, never left out silently.
        broker_only = metafunc.definition.get_closest_marker("broker_only")
        fake = FAKE if broker_only is None else pytest.param(
            FAKE, marks=pytest.mark.skip(reason=f"broker only: {broker_only.args[0]}"))
        metafunc.parametrize("harness_kind", [fake, *(
            pytest.param(kind, marks=[pytest.mark.kafka, pytest.mark.apache_kafka]
                         if kind == KAFKA else [pytest.mark.kafka])
            for kind in brokers)], indirect=True)


@pytest.fixture
def harness_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def harness_bootstrap(harness_kind: str, request: pytest.FixtureRequest) -> str | None:
    """The session broker a broker harness runs on (None for the fake)."""
    if harness_kind == FAKE:
        return None
    bootstrap: str = request.getfixturevalue(
        "tansu_broker" if harness_kind == TANSU else "apache_kafka_broker")
    return bootstrap


@pytest.fixture
async def harness(harness_kind: str, harness_bootstrap: str | None) -> AsyncIterator[Harness]:
    """The harness of this run of the test, closed after it."""
    made: Harness
    if harness_bootstrap is None:
        made = FakeHarness()
    else:
        fresh = await new_fresh(harness_bootstrap, PARTITIONS)
        made = BrokerHarness(harness_kind, harness_bootstrap, fresh.topic, fresh.group)
    try:
        yield made
    finally:
        await made.close()
