"""Session fixtures: the real embedded broker (never skipped) and a clean environment."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.broker import EmbeddedBroker
from tests.kafkautil import PLUGINS, KstageProcess

# Test processors are a real plugin distribution (dist-info + entry points) on sys.path.
if str(PLUGINS) not in sys.path:
    sys.path.insert(0, str(PLUGINS))


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address of an embedded broker for the whole session."""
    log = tmp_path_factory.mktemp("broker") / "broker.log"
    try:
        embedded = EmbeddedBroker(log_path=log).start()
    except Exception as exc:  # noqa: BLE001 - a broker that cannot start fails loudly
        pytest.fail(f"the embedded broker did not start: {exc}; see {log}", pytrace=False)
    yield embedded.bootstrap
    embedded.stop()


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No KSTAGE_* or config variables leak into a test from the caller's shell."""
    for key in list(os.environ):
        if key.startswith("KSTAGE_") or key in ("KAFKA_BOOTSTRAP", "SCHEMA_REGISTRY_URL"):
            monkeypatch.delenv(key, raising=False)


@pytest.fixture
def kstage(tmp_path: Path) -> Iterator[type[KstageProcess]]:
    """Factory of ``kstage run`` child processes; all are killed at teardown."""
    started: list[KstageProcess] = []

    class Tracked(KstageProcess):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            started.append(self)

    yield Tracked
    for proc in started:
        proc.close()
