"""Session fixtures: the real brokers (never skipped) and a clean environment.

Which tests run on which broker is declared in tests/brokers.py.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Container, Iterator
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

import pytest

from service.broker import EmbeddedBroker
from tests import cpu_profile, kafka_jvm, spark_jvm
from tests.apache_kafka import NODE_OPTS
from tests.brokers import (
    KAFKA,
    PAIRWISE,
    SHARED_DIR_ENV,
    TANSU,
    kinds_for,
    shared_apache_kafka,
    stop_shared,
)
from tests.file_durations import SECONDS
from tests.kafkautil import PLUGINS, KstageProcess, create_topic, unique
from tests.spark_jvm import SUBMIT_OPTS, submit_opts

# Test processors are a real plugin distribution (dist-info + entry points) on sys.path.
if str(PLUGINS) not in sys.path:
    sys.path.insert(0, str(PLUGINS))


_OWNS_SHARED = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """The main process makes the directory its xdist workers share (the Apache Kafka
    node's state); they inherit it through the environment."""
    write_bytecode()
    if SHARED_DIR_ENV not in os.environ:
        shared = Path(tempfile.mkdtemp(prefix="kstage-tests-"))
        os.environ[SHARED_DIR_ENV] = str(shared)
        config.stash[_OWNS_SHARED] = shared
    # The Spark JVMs and Apache Kafka nodes of this process and its children
    # (tests/spark_jvm.py, tests/kafka_jvm.py), with their class-data archives if they
    # were made (else a process that needs one makes it, below).
    os.environ[SUBMIT_OPTS] = submit_opts(spark_jvm.existing_archive())
    os.environ[NODE_OPTS] = kafka_jvm.node_opts(kafka_jvm.existing_archive())
    if os.environ.get(cpu_profile.OUT_ENV):  # where the suite's CPU goes, when asked
        config.pluginmanager.register(cpu_profile, "kstage-cpu-profile")


def write_bytecode() -> None:
    """This process and its children write the bytecode caches (``__pycache__``, ignored
    by git) even where PYTHONDONTWRITEBYTECODE says not to (the environment of this
    machine sets it): else a module no process had cached was compiled from source again
    by every process importing it: 0.15-0.2 CPU s per ``kstage run`` without caches, and
    pytest's rewritten test modules, which only the suite writes, 10 CPU s per process
    collecting the suite (tests/unit/test_bytecode_caches.py)."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


def pytest_unconfigure(config: pytest.Config) -> None:
    shared = config.stash.get(_OWNS_SHARED, None)
    if shared is not None:
        stop_shared(shared)
        os.environ.pop(SHARED_DIR_ENV, None)


WORKERS_PER_CORE = 2
"""xdist workers per core of ``-n auto`` (at most ``--maxprocesses``, 4): the suite waits
more than it computes (brokers answering, JVMs starting, processes driven through
faults). Twelve integration files measured on the 2-core machine, 2026-12-01: 2 workers
465 s of wall time with the cores 43% busy, 3 workers 333 s (64%), 4 workers 267 s
(78%), peak memory 3.1 GB."""


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: :data:`WORKERS_PER_CORE` per core this process may run on."""
    return WORKERS_PER_CORE * len(os.sched_getaffinity(0))


@pytest.hookimpl(trylast=True)  # after -m and -k deselected items
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest files first (tests/file_durations.py): xdist's ``loadfile`` hands out
    whole files in this order, so the longest ones do not start last. A stable sort: a
    file's tests keep their order, and files of unknown duration theirs.

    Then, before any test runs, the class-data archives of the Spark JVMs and the Kafka
    nodes, if a collected test may start one (its file names Spark; it runs on Apache
    Kafka) and it was not made yet: the first process makes it (a minute or more for
    Spark, once per machine and jar set), the others wait for it."""
    spark = _spark_files(items)
    slowest_first(items, heavy=spark)
    shared = Path(os.environ[SHARED_DIR_ENV])
    if _ARCHIVE not in os.environ[SUBMIT_OPTS] and spark:
        os.environ[SUBMIT_OPTS] = submit_opts(spark_jvm.ensure_archive(shared))
    if _ARCHIVE not in os.environ[NODE_OPTS] and any(
            item.get_closest_marker("apache_kafka") for item in items):
        os.environ[NODE_OPTS] = kafka_jvm.node_opts(kafka_jvm.ensure_archive(shared))


_ARCHIVE = "-XX:SharedArchiveFile="


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def slowest_first(items: list[pytest.Item], heavy: Container[str] = frozenset()) -> None:
    """Sort ``items`` by their file's seconds in :data:`SECONDS`, longest first (stable:
    a file's tests keep their order, and files of unknown duration theirs); the files in
    ``heavy`` (those that start Spark JVMs, the CPU-bound ones) then alternate with the
    others, each kind still longest first, so that the workers (two per core) do not all
    start JVMs at once."""
    items.sort(key=lambda item: -SECONDS.get(_file(item), 0.0))
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(_file(item), []).append(item)
    kinds = ([f for f in files if f in heavy], [f for f in files if f not in heavy])
    order = [f for pair in zip_longest(*kinds) for f in pair if f is not None]
    items[:] = [item for f in order for item in files[f]]


def _spark_files(items: list[pytest.Item]) -> set[str]:
    """The files of ``items`` that name Spark (their tests may start a JVM)."""
    paths = {_file(item): item.path for item in items}
    return {f for f, path in paths.items()
            if "spark" in path.read_text(errors="replace").lower()}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One suite, two brokers: every test that needs a broker runs on each broker its
    module is declared for (tests/brokers.py); a matrix run pairwise gets its cases
    (the broker and its other axes together)."""
    if "broker_kind" in metafunc.fixturenames:
        module = metafunc.module.__name__.rsplit(".", 1)[-1]
        matrix = PAIRWISE.get(f"{module}::{metafunc.function.__name__}")
        if matrix is not None:
            metafunc.parametrize(("broker_kind", *matrix.axes), [
                pytest.param(*case, marks=[pytest.mark.apache_kafka] if case[0] == KAFKA
                             else []) for case in matrix.cases], indirect=["broker_kind"])
            return
        metafunc.parametrize("broker_kind", [
            pytest.param(kind, marks=pytest.mark.apache_kafka) if kind == KAFKA else kind
            for kind in kinds_for(module, metafunc.function.__name__)], indirect=True)


@pytest.fixture
def broker_kind(request: pytest.FixtureRequest) -> str:
    """The broker this test runs on: ``tansu`` or ``kafka`` (parametrized above)."""
    kind: str = request.param
    return kind


@pytest.fixture(scope="session")
def tansu_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address of an embedded broker (Tansu) for this process's session."""
    log = tmp_path_factory.mktemp("broker") / "broker.log"
    try:
        embedded = EmbeddedBroker(log_path=log).start()
    except Exception as exc:  # noqa: BLE001 - a broker that cannot start fails loudly
        pytest.fail(f"the embedded broker did not start: {exc}; see {log}", pytrace=False)
    yield embedded.bootstrap
    embedded.stop()


@pytest.fixture(scope="session")
def apache_kafka_broker() -> str:
    """Bootstrap address of the session's Apache Kafka node (shared by its processes)."""
    try:
        return shared_apache_kafka(Path(os.environ[SHARED_DIR_ENV]))
    except Exception as exc:  # noqa: BLE001 - a broker that cannot start fails loudly
        pytest.fail(f"the Apache Kafka broker did not start: {exc}", pytrace=False)


@pytest.fixture
def broker(broker_kind: str, request: pytest.FixtureRequest) -> str:
    """Bootstrap address of the shared broker of ``broker_kind``."""
    name = "tansu_broker" if broker_kind == TANSU else "apache_kafka_broker"
    bootstrap: str = request.getfixturevalue(name)
    return bootstrap


@dataclass(frozen=True)
class Fresh:
    """A topic created for one test on its broker, and a group id no other test uses."""

    bootstrap: str
    topic: str
    group: str


async def new_fresh(bootstrap: str, partitions: int = 1) -> Fresh:
    """A topic of ``partitions`` created on ``bootstrap`` for one test, and a group id no
    other test uses (the ``fresh`` fixture's; tests/behaviour's broker harness's)."""
    topic, group = unique("t"), unique("g")
    await create_topic(bootstrap, topic, partitions)
    return Fresh(bootstrap, topic, group)


@pytest.fixture
async def fresh(broker: str, request: pytest.FixtureRequest) -> Fresh:
    """A fresh topic (one partition; ``@pytest.mark.parametrize("fresh", [N],
    indirect=True)`` for N) created on ``broker``, and a fresh group id."""
    return await new_fresh(broker, getattr(request, "param", 1))


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
