"""Processor discovery through entry points: unknown, duplicate, claimed twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from processors import registry
from processors.errors import RegistryError
from settings import load_settings
from settings.errors import ConfigValidationError


def add_distribution(root: Path, name: str, entry_points: str,
                     group: str = "kstage.processors") -> None:
    info = root / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{entry_points}\n")


def test_builtins_are_found_through_entry_points() -> None:
    names = registry.available()
    assert names["json_rows"] == "processors.json_rows:JsonRowsProcessor"
    assert registry.load("datahub_mcl").table == "stg_datahub_mcl"


def test_unknown_name_lists_the_installed_ones() -> None:
    with pytest.raises(RegistryError, match=r"unknown processor 'nope' \(installed: .*json_rows"):
        registry.load("nope")


def test_a_name_registered_twice_is_refused(tmp_path, monkeypatch) -> None:
    add_distribution(tmp_path, "evil_plugin", "json_rows = evil_plugin:Other")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RegistryError, match="'json_rows' is registered more than once: "
                                            "evil_plugin:Other, processors.json_rows"):
        registry.load("json_rows")


def test_a_target_that_is_not_a_processor_is_refused(tmp_path, monkeypatch) -> None:
    add_distribution(tmp_path, "odd_plugin", "odd = json:JSONDecoder")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RegistryError, match="'odd' .json:JSONDecoder. is not a Processor"):
        registry.load("odd")


def test_a_topic_claimed_by_two_processors_is_refused() -> None:
    with pytest.raises(RegistryError, match="claimed by two processors: 'a' and 'b'"):
        registry.check_topics([("g", "t", "a"), ("g", "t", "b")])
    registry.check_topics([("g1", "t", "a"), ("g2", "t", "b")])  # other groups may


def test_a_topic_twice_in_one_group_is_a_config_error(tmp_path) -> None:
    cfg = tmp_path / "kstage.yml"
    cfg.write_text("name: svc\ngroups:\n  - topics:\n"
                   "      - {topic: t, processor: json_rows}\n"
                   "      - {topic: t, processor: log}\n")
    with pytest.raises(ConfigValidationError, match="topic 't' appears twice in group 'svc'"):
        load_settings(cfg, environ={})


def test_a_sink_type_registered_twice_is_refused_by_the_same_loader(tmp_path, monkeypatch) -> None:
    """Sinks go through the processors' loader (settings/plugins.py): a duplicate name is
    refused where it is used, in the settings and by the sink registry alike."""
    from actors.sinks import registry as sinks
    from settings import settings_from
    from settings.models import sink_entry_points

    add_distribution(tmp_path, "evil_sink", "jsonl = evil_sink:Sink", group="kstage.sinks")
    monkeypatch.syspath_prepend(str(tmp_path))
    sink_entry_points.cache_clear()
    try:
        with pytest.raises(sinks.SinkTypeError, match="sink type 'jsonl' is registered more "
                                                      "than once: actors.sinks.files"):
            sinks.load("jsonl")
        with pytest.raises(ConfigValidationError, match="registered more than once"):
            settings_from({"groups": [{"group_id": "g", "topics": [{
                "topic": "t", "processor": "json_rows",
                "sink": {"type": "jsonl", "path": "out.jsonl"}}]}]})
    finally:
        sink_entry_points.cache_clear()
