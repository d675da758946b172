"""tests/file_durations.py: the seconds per file read from a JUnit report, and the
order the suite's files start in."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import slowest_first
from tests.file_durations import file_of, from_junit


def test_a_junit_classname_names_its_file() -> None:
    assert file_of("tests.integration.test_lake_s3") == "tests/integration/test_lake_s3.py"
    assert file_of("tests.unit.test_x.TestThings") == "tests/unit/test_x.py"


def test_seconds_per_file_add_up_every_case_of_the_file(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.unit.test_a" name="t1" time="1.5"/>'
        '<testcase classname="tests.unit.test_a" name="t2" time="2.5"/>'
        '<testcase classname="tests.integration.test_b" name="t" time="7"/>'
        '</testsuite></testsuites>')
    assert from_junit(str(report)) == {"tests/unit/test_a.py": 4.0,
                                       "tests/integration/test_b.py": 7.0}


class _Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid


def test_the_slowest_files_start_first_and_the_rest_keep_their_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tests.conftest.SECONDS", {"tests/b.py": 5.0, "tests/c.py": 50.0})
    items = [_Item(n) for n in ("tests/a.py::x", "tests/b.py::y", "tests/b.py::z",
                                "tests/c.py::w", "tests/d.py::v")]
    slowest_first(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == ["tests/c.py::w", "tests/b.py::y", "tests/b.py::z",
                                         "tests/a.py::x", "tests/d.py::v"]


def test_files_that_start_jvms_alternate_with_the_others_each_kind_slowest_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tests.conftest.SECONDS", {
        "tests/h1.py": 90.0, "tests/h2.py": 80.0, "tests/h3.py": 70.0,
        "tests/l1.py": 60.0, "tests/l2.py": 5.0})
    items = [_Item(n) for n in ("tests/l2.py::a", "tests/h3.py::b", "tests/l1.py::c",
                                "tests/h1.py::d", "tests/h1.py::e", "tests/h2.py::f",
                                "tests/u.py::g")]
    slowest_first(items, heavy={"tests/h1.py", "tests/h2.py", "tests/h3.py"})  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [
        "tests/h1.py::d", "tests/h1.py::e", "tests/l1.py::c", "tests/h2.py::f",
        "tests/l2.py::a", "tests/h3.py::b", "tests/u.py::g"]
