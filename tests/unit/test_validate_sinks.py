"""``kstage validate`` (and ``run``) check every topic's sink before anything starts.

The topic's ``sink:`` is validated against its type's settings model (built-in and plugin
sinks alike, found in the entry-point group ``kstage.sinks``) when the file is loaded;
then every sink is built with its settings and bound to its processor (never opened) and
asked what ``open`` would refuse. Each problem names the file, the line and the dotted
key, and the exit code is 2. A sink whose Python packages are missing names the extra to
install, in one line, without a traceback (PySpark is hidden from a subprocess by a
meta-path finder on its PYTHONPATH).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from actors.sinks.spark.sink import SparkSinkSettings
from service.cli import main
from settings import SinkSettings, load_settings
from tests.kafkautil import CHILD_PATH

ROOT = Path(__file__).resolve().parents[2]
TYPED = "gobblin_compaction"  # a processor with columns and a table


def config(tmp_path: Path, topic: str) -> Path:
    """A config of one topic; ``topic`` holds the topic's keys, 6 spaces deep (its first
    key is on line 4)."""
    path = tmp_path / "kstage.yml"
    path.write_text("name: sinks\ngroups:\n  - topics:\n      - topic: events\n"
                    + textwrap.indent(textwrap.dedent(topic), "        "), encoding="utf-8")
    return path


def validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["validate", "-c", str(path)])
    out, err = capsys.readouterr()
    return code, out + err


@pytest.mark.parametrize(("topic", "key", "line", "why"), [
    ("processor: json_rows\nsink: {type: sparkk}\n", "sink.type", 6,
     "unknown sink type 'sparkk' (installed: "),
    (f"processor: {TYPED}\nsink:\n  type: spark\n  tabel: stg_x\n", "sink.tabel", 8,
     "Extra inputs are not permitted"),
    ("processor: json_rows\nsink:\n  type: jsonl\n  path: out.jsonl\n  fsync: maybe\n",
     "sink.fsync", 9, "Input should be a valid boolean"),
    ("processor: json_rows\nsink: {type: http, url: 'http://127.0.0.1/x', timeout_s: soon}\n",
     "sink.timeout_s", 6, "Input should be a valid number"),
    ("processor: json_rows\nsink: {type: jsonl}\n", "sink.path", 6, "Field required"),
    ("processor: json_rows\nsink:\n  type: http\n  method: POST\n", "sink.url", 6,
     "Field required"),
    ("processor: json_rows\nsink: {type: test_typed, dir: out, dirr: x}\n", "sink.dirr", 6,
     "Extra inputs are not permitted"),
    (f"processor: {TYPED}\nsink:\n  type: spark\n  table: stg-x\n", "sink.table", 8,
     "'stg-x' is not a SQL identifier: write a name"),
    (f"processor: {TYPED}\nsink:\n  type: jdbc\n  url: jdbc:postgresql://h/db\n"
     "  table: a.b.c\n", "sink.table", 9,
     "'a.b.c' is not a SQL identifier: write `name` or `schema.name`"),
])
def test_a_sink_setting_is_checked_against_its_type(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], topic: str, key: str, line: int,
        why: str) -> None:
    path = config(tmp_path, topic)
    code, output = validate(path, capsys)
    assert code == 2, output
    assert f"kstage: {path}: groups[0].topics[0].{key} (line {line}): {why}" in output
    assert len(output.splitlines()) == 1, output  # one problem, one line


def test_an_unknown_sink_type_lists_the_installed_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, output = validate(config(tmp_path, "processor: json_rows\nsink: {type: sparkk}\n"),
                            capsys)
    assert code == 2
    installed = output.split("(installed: ", 1)[1].split(")", 1)[0].split(", ")
    # the built-in sinks and the test plugin's (other installed plugins may be listed)
    assert {"http", "jdbc", "jsonl", "null", "spark", "test_typed"} <= set(installed)
    assert installed == sorted(installed)


@pytest.mark.parametrize(("topic", "key", "line", "why"), [
    # the table sinks and a plugin sink declare needs_columns; json_rows declares none
    ("processor: json_rows\nsink: {type: spark, table: stg_x}\n", "processor", 5,
     "spark sink: processor 'json_rows' declares no columns for table 'stg_x'"),
    ("processor: json_rows\nsink: {type: jdbc, url: 'jdbc:postgresql://h/db', table: s.t}\n",
     "processor", 5, "jdbc sink: processor 'json_rows' declares no columns for table 's.t'"),
    ("processor: json_rows\nsink: {type: test_typed, dir: out}\n", "processor", 5,
     "processor 'json_rows' declares no columns; a test_typed sink writes a typed table"),
    # no sink.table: the processor's default table ('' here) is checked at the sink's line
    ("processor: log\nsink:\n  type: spark\n", "sink.table", 6,
     "spark sink: table name of processor 'log': '' is not a SQL identifier: write a name "
     "made of letters, digits and _ (not starting with a digit); set sink.table"),
    ("processor: log\nsink:\n  type: jdbc\n  url: jdbc:postgresql://h/db\n", "sink.table", 6,
     "jdbc sink: table name of processor 'log': '' is not a SQL identifier: write `name` "
     "or `schema.name`"),    # mode: upsert needs the processor's natural key
    ("processor: test_unkeyed\nsink:\n  type: jdbc\n  url: jdbc:postgresql://h/db\n"
     "  mode: upsert\n", "sink.mode", 9,
     "jdbc sink stg_unkeyed: mode upsert needs a natural key, and processor 'test_unkeyed' "
     "declares none (Processor.key); use mode: append, or a processor with a key"),
])
def test_what_a_sink_would_refuse_at_open_is_found_by_validate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], topic: str, key: str, line: int,
        why: str) -> None:
    path = config(tmp_path, topic)
    code, output = validate(path, capsys)
    assert code == 2, output
    assert f"kstage: {path}: groups[0].topics[0].{key} (line {line}): {why}" in output


def test_good_sinks_validate_and_hold_their_own_settings(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "kstage.yml"
    path.write_text(textwrap.dedent(f"""\
        groups:
          - topics:
              - {{topic: a, processor: {TYPED}, sink: {{type: spark}}}}
              - {{topic: b, processor: {TYPED}, sink: {{type: spark, table: stg_b}}}}
              - {{topic: c, processor: {TYPED}, sink: {{type: jdbc, table: s.t,
                  url: 'jdbc:postgresql://h/db'}}}}
              - {{topic: d, processor: {TYPED}, sink: {{type: test_typed, dir: out}}}}
              - {{topic: e, processor: json_rows, sink: {{type: jsonl, path: e.jsonl}}}}
              - {{topic: f, processor: json_rows}}
        """), encoding="utf-8")
    code, output = validate(path, capsys)
    assert (code, output.strip()) == (0, f"{path}: OK (1 group(s), 6 topic(s))")
    sinks = [t.sink for t in load_settings(path, environ={}).groups[0].topics]
    assert isinstance(sinks[1], SparkSinkSettings) and sinks[1].table == "stg_b"
    assert [type(s).__name__ for s in sinks] == [
        "SparkSinkSettings", "SparkSinkSettings", "JdbcSinkSettings", "TypedSinkSettings",
        "JsonlSinkSettings", "NullSinkSettings"]
    assert all(isinstance(s, SinkSettings) for s in sinks)


def test_sink_settings_validate_as_a_union_on_type() -> None:
    assert type(SinkSettings.model_validate({"type": "jsonl", "path": "x"})).__name__ == (
        "JsonlSinkSettings")
    assert SinkSettings.model_validate({}).type == "null"
    with pytest.raises(ValueError, match="unknown sink type 'nope'"):
        SinkSettings.model_validate({"type": "nope"})


def test_run_exits_2_before_starting_anything(tmp_path: Path) -> None:
    path = config(tmp_path, "processor: json_rows\nsink: {type: spark, table: stg_x}\n")
    # no broker there: the check must come before any connection attempt
    path.write_text(path.read_text() + "kafka: {bootstrap: '127.0.0.1:9'}\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "service", "run", "-c", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": CHILD_PATH})
    assert proc.returncode == 2, proc.stderr
    assert "groups[0].topics[0].processor (line 5): spark sink: processor 'json_rows' " \
           "declares no columns" in proc.stderr
    assert "Traceback" not in proc.stderr


HIDE_PYSPARK = '''\
"""Hide PySpark from this interpreter, as if the spark extra were not installed."""
import sys


class _NoPyspark:
    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoPyspark())
'''


def without_pyspark(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(HIDE_PYSPARK, encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{hide}:{CHILD_PATH}", "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "service", *argv], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False, env=env)


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_spark_sink_without_pyspark_names_the_extra(tmp_path: Path, command: str) -> None:
    path = config(tmp_path, f"processor: {TYPED}\nsink: {{type: spark}}\n")
    path.write_text(path.read_text() + "kafka: {bootstrap: '127.0.0.1:9'}\n", encoding="utf-8")
    proc = without_pyspark(tmp_path, command, "-c", str(path))
    assert proc.returncode == 2, proc.stderr
    assert ("groups[0].topics[0].sink.type (line 6): sink type 'spark' needs pyspark (not "
            "installed): pip install 'kstage[spark]'") in proc.stderr
    assert "Traceback" not in proc.stderr


def test_demo_without_pyspark_says_which_extra_in_one_line(tmp_path: Path) -> None:
    proc = without_pyspark(tmp_path, "demo", "--dir", str(tmp_path / "demo"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "kstage demo: sink type 'spark' needs pyspark (not installed): "
        "pip install 'kstage[spark]'"]
    assert not (tmp_path / "demo").exists()  # nothing started


def test_merge_without_pyspark_says_which_extra_in_one_line(tmp_path: Path) -> None:
    path = config(tmp_path, f"processor: {TYPED}\nsink: {{type: spark}}\n")
    proc = without_pyspark(tmp_path, "merge", "-c", str(path))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "kstage merge: sink type 'spark' needs pyspark (not installed): "
        "pip install 'kstage[spark]'"]


def test_settings_built_in_code_are_checked_by_the_master() -> None:
    from actors.master import Master
    from processors.errors import RegistryError
    from settings import Settings

    settings = Settings(groups=[{"topics": [{"topic": "t", "processor": "json_rows",
                                             "sink": {"type": "spark", "table": "t"}}]}])
    with pytest.raises(RegistryError) as caught:
        Master(settings, "127.0.0.1:9")
    assert str(caught.value) == (
        "groups[0].topics[0].processor: spark sink: processor 'json_rows' declares no "
        "columns for table 't'; a spark sink needs a typed schema")


def test_an_upsert_key_must_be_among_the_processor_columns() -> None:
    """A key naming a column the processor does not declare is refused by ``check``; a
    key made of its columns, and append without a key, are fine."""
    from actors.sinks import SinkContext, build_sink
    from actors.sinks.jdbc import JdbcSinkSettings
    from processors.base import Column

    def problems(mode: str, key: tuple[str, ...]) -> list[tuple[tuple[str, ...], str]]:
        sink = build_sink(JdbcSinkSettings.model_validate(
            {"url": "jdbc:postgresql://h/db", "table": "t", "mode": mode}))
        sink.bind(SinkContext(processor="p", columns=(Column("id"), Column("v")), key=key))
        return sink.check()

    assert problems("upsert", ("id", "version")) == [(("sink", "mode"), (
        "jdbc sink t: mode upsert: the natural key column(s) version of processor 'p' are "
        "not among its columns"))]
    assert problems("upsert", ("id",)) == []
    assert problems("append", ()) == []
