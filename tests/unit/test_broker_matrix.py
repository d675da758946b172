"""The broker matrix of tests/brokers.py: the fault table's tests and the commit and
failure mode tests run on Apache Kafka, and every exception names a real broker test."""

from __future__ import annotations

import ast
import re

from tests.brokers import ALSO_ON_KAFKA, BROKER_KINDS, KAFKA, TANSU, TANSU_ONLY, kinds_for
from tests.kafkautil import ROOT

TESTS = ROOT / "tests"


def _broker_tests(module: str) -> dict[str, bool]:
    """Test functions of the modules named ``module`` (unit/, actors/, behaviour/,
    integration/) and whether each asks for a broker (or a behaviour harness: the fake
    consumer and every broker, tests/behaviour/conftest.py)."""
    paths = list(TESTS.rglob(f"{module}.py"))
    assert paths, f"no module {module}"
    found: dict[str, bool] = {}
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found |= {node.name: bool({"broker", "broker_kind", "harness"}
                                  & {a.arg for a in node.args.args})
                  for node in tree.body
                  if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.name.startswith("test_")}
    return found


def test_every_fault_table_module_runs_on_apache_kafka() -> None:
    doc = (ROOT / "docs/operations.md").read_text(encoding="utf-8")
    section = doc.split("## What kstage guarantees under faults", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(test_\w+)`", section))
    assert named, "the fault table names no tests"
    for module in sorted(named):
        tests = _broker_tests(module)
        if any(tests.values()):
            assert any(kinds_for(module, name) == BROKER_KINDS
                       for name, uses in tests.items() if uses), module


def test_the_fault_table_names_the_brokers_each_row_was_tested_on() -> None:
    """The column *brokers* says what the row's tests run on: both brokers for broker
    tests of the matrix, Apache Kafka for the Kafka-only modules (the cluster)."""
    doc = (ROOT / "docs/operations.md").read_text(encoding="utf-8")
    section = doc.split("## What kstage guarantees under faults", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][2:]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        brokers, modules = cells[-2], re.findall(r"`(test_\w+)`", cells[-1])
        kafka_only = [m for m in modules if _runs_on_apache_kafka_alone(m)]
        on_both = [m for m in modules if any(_broker_tests(m).values())]
        if kafka_only:
            assert "Apache Kafka" in brokers, row
        if "test_cluster_faults" in modules:
            assert "3-node" in brokers, row
        if on_both and not kafka_only:
            assert brokers.startswith("Tansu, Apache Kafka"), row
        if not kafka_only and not on_both:
            assert "Apache Kafka" not in brokers, f"no test of this row runs on it: {row}"


def _runs_on_apache_kafka_alone(module: str) -> bool:
    """Whether ``module`` (integration/) has tests marked ``apache_kafka`` of its own
    (a cluster, a secured broker) rather than through the fixture ``broker``."""
    path = TESTS / "integration" / f"{module}.py"
    return path.exists() and "pytest.mark.apache_kafka" in path.read_text(encoding="utf-8")


def test_commit_and_failure_modes_run_on_both_brokers() -> None:
    for module in ("test_commit_modes", "test_failure_modes", "test_partition_retries"):
        tests = _broker_tests(module)
        assert any(tests.values()), module
        for name, uses in tests.items():
            if uses:
                assert kinds_for(module, name) == (TANSU, KAFKA), f"{module}::{name}"


def test_every_exception_names_a_broker_test_and_says_why() -> None:
    for key, why in TANSU_ONLY.items():
        module, _, name = key.partition("::")
        tests = _broker_tests(module)
        assert any(tests.values()), f"{key}: no broker test in {module}"
        if name:
            assert tests.get(name), f"{key}: no such broker test"
        assert len(why) > 20, f"{key}: say why it runs on Tansu only"


def test_every_test_also_on_kafka_is_a_broker_test_of_a_tansu_only_module() -> None:
    for key in ALSO_ON_KAFKA:
        module, _, name = key.partition("::")
        assert module in TANSU_ONLY, f"{key}: its module runs on both anyway"
        assert _broker_tests(module).get(name), f"{key}: no such broker test"
