"""The plugin kit without a broker: the ``processors.testing`` helpers, ``service.testing``'s
``run_processor`` and ``processors new``."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from fastavro.validation import ValidationError

import processors.testing as kit
from actors.codecs.avro import MAGIC, encode
from processors import PoisonMessage, Processor, registry
from processors.datahub_mcl import DatahubMclProcessor
from processors.json_rows import JsonRowsProcessor
from processors.testing import DEFAULT_TIMESTAMP, avro_message, message, messages
from service import testing as runners
from service.cli import main
from service.dev.scaffold import PluginNames
from service.testing import arun_processor, run_processor
from tests.unit import test_processors_datahub as dh

ROOT = Path(__file__).resolve().parents[2]
EVENT_V1 = {"type": "record", "name": "Event", "fields": [{"name": "id", "type": "string"}]}
EVENT_V2 = {"type": "record", "name": "Event", "fields": [
    {"name": "id", "type": "string"}, {"name": "source", "type": "string", "default": "web"}]}


# ------------------------------------------------------------------- message helpers


def test_message_round_trips_json_like_kstage_decoding() -> None:
    value = {"a": (1, 2), "b": {"c": None}}
    msg = message(value, topic="t", partition=3, offset=9, key=b"k", headers=[("h", b"v")])
    assert msg.value == {"a": [1, 2], "b": {"c": None}}  # tuples become lists
    assert msg.value is not value and msg.raw == json.dumps(value).encode()
    assert (msg.topic, msg.partition, msg.offset, msg.key) == ("t", 3, 9, b"k")
    assert msg.timestamp == DEFAULT_TIMESTAMP and msg.headers == (("h", b"v"),)


def test_message_passes_bytes_and_tombstones_as_they_are() -> None:
    assert message(b"\x00raw").value == b"\x00raw" == message(b"\x00raw").raw
    assert message(None).value is None


def test_messages_numbers_offsets() -> None:
    batch = messages([{"i": 0}, {"i": 1}], offset=10, topic="t")
    assert [(m.topic, m.offset, m.value["i"]) for m in batch] == [("t", 10, 0), ("t", 11, 1)]


def test_avro_message_is_what_decoding_yields() -> None:
    record = dh.mcl()
    msg = avro_message(dh.MCL, record, topic="MetadataChangeLog_Versioned_v1", offset=4)
    assert msg.raw is not None and msg.raw[0] == MAGIC and msg.raw[1:5] == b"\0\0\0\1"
    assert msg.raw == encode(kit._parse(dh.MCL)[0], 1, record)  # the codec's own bytes
    assert msg.value["aspect"]["value"] == record["aspect"]["value"]  # bytes stay bytes
    assert msg.value["changeType"] == "UPSERT"  # enum symbol as str
    expected = dh.mcl_message(record)  # the datahub tests' own builder agrees
    assert msg.value == expected.value


@pytest.mark.parametrize("form", ["object", "text", "path", "relative-path"])
def test_avro_message_takes_schema_objects_text_and_files(
    form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "event.avsc").write_text(json.dumps(EVENT_V1))
    monkeypatch.chdir(tmp_path)
    schema = {"object": EVENT_V1, "text": json.dumps(EVENT_V1),
              "path": tmp_path / "event.avsc", "relative-path": "event.avsc"}[form]
    assert avro_message(schema, {"id": "x"}).value == {"id": "x"}


def test_avro_message_resolves_to_a_reader_schema() -> None:
    assert avro_message(EVENT_V1, {"id": "x"}, reader_schema=EVENT_V2).value == {
        "id": "x", "source": "web"}


def test_avro_message_validates_strictly() -> None:
    with pytest.raises(ValidationError, match="not in the schema: typo"):
        avro_message(EVENT_V1, {"id": "x", "typo": 1})
    with pytest.raises(ValidationError, match=r"not in the schema: created\.typo"):
        avro_message(dh.MCL, dh.mcl(created={"time": 1, "actor": "a", "typo": 2}))
    with pytest.raises(ValidationError):  # a missing field without default
        avro_message(EVENT_V2, {"source": "web"})
    with pytest.raises(ValidationError):
        avro_message(dh.MCL, dh.mcl(changeType="NOT_A_SYMBOL"))
    with pytest.raises(FileNotFoundError, match="no Avro schema file"):
        avro_message("nowhere/absent.avsc", {})


# ------------------------------------------------------------------- run_processor


def test_run_processor_json_rows_with_options() -> None:
    rows = run_processor(JsonRowsProcessor, messages([{"a": 1, "b": 2}, {"b": 3}]),
                         {"fields": ["a"]})
    assert rows == [
        {"a": 1, "_topic": "topic", "_partition": 0, "_offset": 0, "_timestamp": DEFAULT_TIMESTAMP},
        {"a": None, "_topic": "topic", "_partition": 0, "_offset": 1,
         "_timestamp": DEFAULT_TIMESTAMP},
    ]


def test_run_processor_avro_processor_matches_transform() -> None:
    msgs = [make() for make in dh.SAMPLES[DatahubMclProcessor]]
    rows = run_processor(DatahubMclProcessor, msgs)
    direct = [row for m in msgs for row in DatahubMclProcessor().transform(m)]  # type: ignore[union-attr]
    assert rows == direct and len(rows) == 3
    built = avro_message(dh.MCL, dh.mcl(), topic="MetadataChangeLog_Versioned_v1",
                         partition=1, offset=42)
    assert run_processor(DatahubMclProcessor(), built) == rows[:1]  # one message, an instance


def test_run_processor_adds_the_coordinates_to_the_error() -> None:
    with pytest.raises(PoisonMessage, match="expected an object") as info:
        run_processor(JsonRowsProcessor, [message({"ok": 1}), message([1], topic="t",
                                                                      partition=2, offset=7)])
    assert info.value.__notes__ == [
        "while processor JsonRowsProcessor ('json_rows') transformed message t[2]@7"]


class _Lifecycle(Processor):
    name = "lifecycle"
    calls: list[str]

    async def start(self) -> None:
        self.calls = ["start"]

    async def transform(self, message: Any) -> list[dict[str, Any]]:  # async transform
        self.calls.append(f"transform {message.offset}")
        if message.value.get("fail"):
            raise RuntimeError("boom")
        return [{"n": message.offset}]

    async def stop(self) -> None:
        self.calls.append("stop")


def test_run_processor_drives_the_lifecycle_and_awaits_async_transform() -> None:
    proc = _Lifecycle()
    assert run_processor(proc, messages([{}, {}])) == [{"n": 0}, {"n": 1}]
    assert proc.calls == ["start", "transform 0", "transform 1", "stop"]
    with pytest.raises(RuntimeError, match="boom"):
        run_processor(proc, messages([{}, {"fail": True}, {}]))
    assert proc.calls == ["start", "transform 0", "transform 1", "stop"]  # stop after failure


def test_run_processor_with_a_registered_async_plugin() -> None:
    rows = run_processor(registry.load("test_slow"), [message({"x": 1})], {"delay_s": 0})
    assert rows[0]["x"] == 1


def test_run_processor_rejects_options_for_an_instance() -> None:
    with pytest.raises(TypeError, match="options"):
        run_processor(JsonRowsProcessor(), [], {"fields": ["a"]})


async def test_run_processor_in_a_loop_points_to_arun_processor() -> None:
    with pytest.raises(RuntimeError, match="arun_processor"):
        run_processor(JsonRowsProcessor, [])
    assert await arun_processor(JsonRowsProcessor, [message({"a": 1})]) != []


@pytest.mark.parametrize(("module", "constants", "heavy"), [
    (kit, {"DEFAULT_TIMESTAMP", "SchemaLike"}, "'aiokafka', 'pyspark', 'pytest', 'actors'"),
    (runners, set(), "'pyspark', 'pytest'"),
])
def test_testing_all_is_exact_and_imports_stay_light(module: Any, constants: set[str],
                                                     heavy: str) -> None:
    defined = {n for n, v in vars(module).items()
               if not n.startswith("_") and getattr(v, "__module__", None) == module.__name__}
    assert set(module.__all__) == defined | constants
    code = (f"import {module.__name__}, sys; bad = {{{heavy}}} & set(sys.modules); "
            "assert not bad, bad")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------- kstage processors new


def test_plugin_names() -> None:
    assert PluginNames.of("acme_rows") == PluginNames(
        "acme_rows", "AcmeRowsProcessor", "kstage-acme-rows", "stg_acme_rows")


@pytest.mark.parametrize(("name", "needle"), [
    ("Acme", "lowercase letters"), ("acme-rows", "lowercase letters"), ("1acme", "lowercase"),
    ("_acme", "lowercase"), ("a" * 64, "at most 63"), ("class", "keyword"), ("json", "standard"),
    ("processors", "kstage module"), ("json_rows", "already installed"),
    ("pytest", "already importable"),
])
def test_new_rejects_bad_names(name: str, needle: str, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["processors", "new", name, "--dir", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("kstage: ") and needle in err
    assert list(tmp_path.iterdir()) == []


def test_new_refuses_a_non_empty_directory(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "acme_rows").mkdir()
    (tmp_path / "acme_rows" / "mine.txt").write_text("keep me")
    assert main(["processors", "new", "acme_rows", "--dir", str(tmp_path)]) == 2
    assert "already exists and is not empty" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "acme_rows").iterdir()] == ["mine.txt"]


def test_new_generates_the_plugin_project(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "acme_rows").mkdir()  # an empty directory is fine
    assert main(["processors", "new", "acme_rows", "--dir", str(tmp_path)]) == 0
    project = tmp_path / "acme_rows"
    files = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    assert files == ["README.md", "acme_rows/__init__.py", "acme_rows/processor.py",
                     "pyproject.toml", "tests/test_processor.py"]
    assert f"created {project / 'pyproject.toml'}" in capsys.readouterr().out
    meta = tomllib.loads((project / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "kstage-acme-rows"
    assert meta["project"]["version"] == "0.1.0" and meta["project"]["dependencies"] == ["kstage"]
    assert meta["build-system"]["build-backend"] == "setuptools.build_meta"
    assert meta["project"]["entry-points"]["kstage.processors"] == {
        "acme_rows": "acme_rows.processor:AcmeRowsProcessor"}
    for path in project.rglob("*.py"):
        source = path.read_text()
        compile(source, str(path), "exec")
        assert "$" not in source, path  # every placeholder was filled in
    assert "class AcmeRowsProcessor(Processor):" in (project / "acme_rows/processor.py").read_text()


def test_processors_without_subcommand_still_lists(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["processors"]) == 0
    assert "json_rows" in capsys.readouterr().out


def test_plugin_guide_shows_the_example_processor_verbatim() -> None:
    guide = (ROOT / "docs/plugins.md").read_text(encoding="utf-8")
    code = (ROOT / "examples/kstage-example-plugin/kstage_clicks/processor.py").read_text(
        encoding="utf-8")
    assert f"```python\n{code}```" in guide, "docs/plugins.md's copy of the processor is stale"
