"""``kstage validate`` (and ``run``, the same checks) on the registry formats: an unknown
format with a near miss, protobuf/json_schema without a registry server, a missing extra;
each with file, line and key, exit 2."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from actors.codecs import registries
from service.cli import main
from tests.unit.test_validate import HEAD, only, validate

TOPIC = HEAD + """\
        processor: json_rows
        format: {fmt}
"""
REGISTRY = "schema_registry:\n  url: {url}\n"


def test_an_unknown_format_has_a_did_you_mean(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path, lines = validate(tmp_path, capsys, TOPIC.format(fmt="protobuff"))
    why = only(lines, path, "groups[0].topics[0].format", 8)
    assert why.endswith("did you mean 'protobuf'?"), why


@pytest.mark.parametrize("fmt", ["protobuf", "json_schema"])
@pytest.mark.parametrize(("registry", "why"), [
    ("", "topic 'events' reads {fmt} but no schema_registry is configured"),
    (REGISTRY.format(url="file:///tmp/schemas"),
     "topic 'events' reads {fmt}: it needs a registry server (schema_registry.url "
     "http(s)://...), not a file:// directory of .avsc files"),
])
def test_a_registry_server_is_needed(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     fmt: str, registry: str, why: str) -> None:
    path, lines = validate(tmp_path, capsys, registry + TOPIC.format(fmt=fmt))
    line = 8 + registry.count("\n")
    assert only(lines, path, "groups[0].topics[0].format", line) == why.format(fmt=fmt)
    assert main(["run", "-c", str(path)]) == 2


@pytest.mark.parametrize(("fmt", "module", "extra"), [
    ("protobuf", "grpc_tools", "protobuf"), ("json_schema", "jsonschema", "jsonschema")])
def test_a_missing_extra_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch, fmt: str, module: str,
                                  extra: str) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> Any:
        return None if name == module else real(name, package)

    monkeypatch.setattr(registries.importlib.util, "find_spec", find_spec)
    text = REGISTRY.format(url="http://127.0.0.1:1") + TOPIC.format(fmt=fmt)
    path, lines = validate(tmp_path, capsys, text)
    assert only(lines, path, "groups[0].topics[0].format", 10) == (
        f"format {fmt} needs the {extra} extra (not installed): pip install "
        f"'kstage[{extra}]'")
    monkeypatch.undo()
    path.write_text(text)
    assert main(["validate", "-c", str(path)]) == 0
