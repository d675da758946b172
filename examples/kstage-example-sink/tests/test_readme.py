"""The README's snippets are true: the example sink runs, the config validates and builds
a csv sink, the entry point is the package's own, the settings table matches the model."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from actors.errors import SinkError
from actors.sinks import Sink, SinkContext, SinkSettingsBase, build_sink
from pydantic import ValidationError

from kstage_example_sink import CsvSink, CsvSinkSettings

PACKAGE = Path(__file__).resolve().parents[1]
README = (PACKAGE / "README.md").read_text(encoding="utf-8")


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", README, flags=re.S | re.M)


def test_the_readme_has_the_snippets_this_test_checks() -> None:
    assert [len(blocks(lang)) for lang in ("python", "yaml", "toml", "bash")] == [1, 1, 1, 1]


@pytest.fixture
def ids_module(tmp_path: Path) -> Any:
    source = tmp_path / "readme_ids_sink.py"
    source.write_text(blocks("python")[0], encoding="utf-8")
    spec = importlib.util.spec_from_file_location("readme_ids_sink", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


async def test_the_example_sink_writes_and_reports_failures(ids_module: Any,
                                                             tmp_path: Path) -> None:
    settings = ids_module.IdsSettings.model_validate({"type": "ids",
                                                      "path": str(tmp_path / "ids.txt")})
    sink = ids_module.IdsSink.from_settings(settings)
    assert isinstance(sink, Sink)
    sink.bind(SinkContext(topic="orders"))
    await sink.open()
    await sink.write([{"id": "a"}, {"id": "b"}])
    await sink.close()
    assert (tmp_path / "ids.txt").read_text(encoding="utf-8") == "a\nb\n"
    with pytest.raises(ValidationError, match="pth"):
        ids_module.IdsSettings.model_validate({"type": "ids", "pth": "x"})
    broken = ids_module.IdsSink.from_settings(ids_module.IdsSettings(
        path=str(tmp_path / "missing-dir" / "ids.txt")))
    with pytest.raises(SinkError, match="ids sink"):
        await broken.write([{"id": "c"}])


def test_the_config_validates_and_builds_a_csv_sink(tmp_path: Path) -> None:
    config = tmp_path / "kstage.yml"
    config.write_text(blocks("yaml")[0], encoding="utf-8")
    script = Path(sys.executable).with_name("kstage")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "service"]
    checked = subprocess.run([*argv, "validate", "-c", str(config)], capture_output=True,
                             text=True, timeout=60, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    (topic,) = yaml.safe_load(blocks("yaml")[0])["groups"][0]["topics"]
    sink = build_sink(topic["sink"])
    assert isinstance(sink, CsvSink)
    assert sink.settings == CsvSinkSettings(dir="out/orders", delimiter=";")


def test_the_entry_point_shown_is_the_packages_own() -> None:
    shown = tomllib.loads(blocks("toml")[0])["project"]["entry-points"]
    real = tomllib.loads((PACKAGE / "pyproject.toml").read_text(encoding="utf-8"))
    assert shown == real["project"]["entry-points"]


def test_the_settings_table_lists_every_key_with_its_default() -> None:
    rows = re.findall(r"^\| `(\w+)` \| (.+?) \|", README, flags=re.M)
    table = {key: default for key, default in rows if key in CsvSinkSettings.model_fields}
    # the sink's own keys; type and name (a sink's name in a fan-out) come from the base
    fields = {k: f for k, f in CsvSinkSettings.model_fields.items()
              if k not in SinkSettingsBase.model_fields}
    assert set(table) == set(fields)
    for key, field in fields.items():
        default = "(required)" if field.is_required() else f"`{str(field.default).lower()}`"
        assert table[key] == default, key


def test_the_commands_shown_name_real_paths() -> None:
    root = PACKAGE.parents[1]
    for line in blocks("bash")[0].splitlines():
        path = line.split("#")[0].split()[-1]
        assert (root / path).is_dir(), line
