"""The broker matrix of tests/brokers.py: the fault table's tests and the commit and
failure mode tests run on Apache Kafka, every exception names a real broker test, and
every matrix run pairwise still runs each of its cases once and on both brokers."""

from __future__ import annotations

import ast
import re

from tests.brokers import (
    ALSO_ON_KAFKA,
    BROKER_KINDS,
    KAFKA,
    PAIRWISE,
    TANSU,
    TANSU_ONLY,
    kinds_for,
)
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


# A test a reason names: ``test_module`` or ``test_module::test_function``.
_NAMED = re.compile(r"\b(test_\w+)(?:::(test_\w+))?")


def test_every_test_a_reason_names_runs_on_both_brokers() -> None:
    """A Tansu-only test's reason names the tests that prove its broker part on both
    brokers: each exists and runs on both (a module named alone: one of its broker tests
    does), so a reason cannot go on pointing at a test that was renamed or went Tansu
    only itself."""
    for key, why in TANSU_ONLY.items():
        for module, name in _NAMED.findall(why):
            tests = _broker_tests(module)
            if name:
                assert tests.get(name), f"{key}: its reason names no broker test {name}"
                assert kinds_for(module, name) == BROKER_KINDS, (
                    f"{key}: its reason names {module}::{name}, which runs on Tansu only")
            else:
                assert any(kinds_for(module, n) == BROKER_KINDS
                           for n, uses in tests.items() if uses), (
                    f"{key}: its reason names {module}, none of whose tests runs on both")


def test_no_test_is_declared_tansu_only_and_on_both() -> None:
    """A test is in one list: named Tansu only and also on both (ALSO_ON_KAFKA, PAIRWISE),
    it would run on both, its reason silently void."""
    both = ALSO_ON_KAFKA | set(PAIRWISE)
    assert not both & set(TANSU_ONLY), sorted(both & set(TANSU_ONLY))


def test_every_test_also_on_kafka_is_a_broker_test_of_a_tansu_only_module() -> None:
    for key in ALSO_ON_KAFKA:
        module, _, name = key.partition("::")
        assert module in TANSU_ONLY, f"{key}: its module runs on both anyway"
        assert _broker_tests(module).get(name), f"{key}: no such broker test"


def test_a_pairwise_matrix_runs_each_case_once_and_each_on_both_brokers() -> None:
    """A matrix run pairwise (broker x format x append path) drops runs, never a case:
    every combination of its other axes runs exactly once, every test on both brokers,
    and with several axes (the compatibility matrix) every value of each (each format,
    each append path) on both brokers."""
    assert PAIRWISE, "no matrix is run pairwise"
    for key, matrix in PAIRWISE.items():
        module, _, name = key.partition("::")
        assert _broker_tests(module).get(name), f"{key}: no such broker test"
        assert kinds_for(module, name) == BROKER_KINDS, f"{key}: declared Tansu only"
        rest = [case[1:] for case in matrix.cases]
        assert all(len(case) == len(matrix.axes) for case in rest), key
        assert len(set(rest)) == len(rest), f"{key}: a case runs twice"
        product = 1
        for axis in range(len(matrix.axes)):
            product *= len({case[axis] for case in rest})
        assert len(rest) == product, f"{key}: a combination of {matrix.axes} is missing"
        assert {case[0] for case in matrix.cases} == set(BROKER_KINDS), key
        if len(matrix.axes) > 1:
            for axis, axis_name in enumerate(matrix.axes):
                for value in {case[axis] for case in rest}:
                    on = {case[0] for case in matrix.cases if case[1 + axis] == value}
                    assert on == set(BROKER_KINDS), f"{key}: {axis_name}={value} on {on}"


def test_a_pairwise_matrix_parametrizes_its_axes_in_one_place() -> None:
    """The axes of a pairwise matrix come from tests/brokers.py alone: the test does not
    parametrize them again (pytest would refuse, or multiply the runs back)."""
    for key, matrix in PAIRWISE.items():
        module, _, name = key.partition("::")
        (path,) = (TESTS / "integration").glob(f"{module}.py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        (func,) = [node for node in tree.body if isinstance(node, ast.AsyncFunctionDef)
                   and node.name == name]
        marks = [ast.unparse(d) for d in func.decorator_list]
        for axis in matrix.axes:
            assert not any("parametrize" in m and repr(axis) in m for m in marks), key


def test_every_rebalance_and_revoke_test_runs_on_apache_kafka() -> None:
    """A rebalance is the group coordinator's work, the broker's: every broker test
    named for one (a rebalance, a revoke, several processes in one group) runs on both
    brokers, whatever sink it lands in."""
    named = re.compile(r"rebalance|revoke|in_one_group")
    for path in sorted(TESTS.rglob("test_*.py")):
        for name, uses in _broker_tests(path.stem).items():
            if uses and named.search(name):
                assert kinds_for(path.stem, name) == BROKER_KINDS, f"{path.stem}::{name}"
