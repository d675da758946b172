"""Every secret setting stays a secret: typed as text whatever its YAML or JSON type, and
never printed by an error, a repr, a traceback or ``kstage validate``.

Each secret field of the settings (``settings/models.py``, the JDBC and HTTP sinks'
models, the schema registry's) is set once from the YAML file through ``${VAR}`` and once
from a ``KSTAGE_*`` variable, with a value of digits (YAML and JSON read it as a number),
and once more wrongly typed next to a typo, so that validation fails around it.
"""

from __future__ import annotations

import json
import logging
import traceback
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, SecretStr, ValidationError

from actors.deadletters.file import dead_letter_line
from actors.sinks.registry import settings_for
from service.cli import main
from service.commands import common
from service.logs import configure_logging
from settings import SettingsError, load_settings, secrets
from settings.models import Settings

SECRET = "98765432123"  # noqa: S105 - a test value, printed nowhere
TOKEN = "tok-" + "5b1e7c9d2a"  # a test value, split like NOT_AN_INT
NOT_AN_INT = "five" + "-hundred-thousand"  # split: a traceback shows this line's source
MARK = "__SECRET__"
JDBC = {"type": "jdbc", "url": "jdbc:postgresql://db:5432/staging", "user": "kstage"}
HTTP = {"type": "http", "url": "https://api.example.com/events"}

# (case id, top-level section, that section with MARK where the secret goes)
CASES: list[tuple[str, str, Any]] = [
    ("kafka.sasl.password", "kafka", {"consumer_config": {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "u", "sasl.password": MARK}}),
    ("kafka.sasl.plain.password", "kafka", {"consumer_config": {
        "security.protocol": "SASL_SSL", "sasl.plain.username": "u",
        "sasl.plain.password": MARK}}),
    ("kafka.ssl.key.password", "kafka", {"consumer_config": {
        "security.protocol": "SSL", "ssl.key.password": MARK}}),
    ("registry.basic_auth.password", "schema_registry",
     {"url": "https://registry:8081", "basic_auth": {"username": "u", "password": MARK}}),
    ("registry.bearer_token", "schema_registry",
     {"url": "https://registry:8081", "bearer_token": MARK}),
    ("spark.conf.secret.key", "spark", {"conf": {"spark.hadoop.fs.s3a.secret.key": MARK}}),
    ("jdbc.password", "sink", {**JDBC, "password": MARK}),
    ("jdbc.properties.password", "sink", {**JDBC, "properties": {"password": MARK}}),
    ("http.auth.bearer", "sink", {**HTTP, "auth": {"bearer": MARK}}),
    ("http.auth.basic.password", "sink",
     {**HTTP, "auth": {"basic": {"username": "u", "password": MARK}}}),
    ("http.headers.X-Api-Key", "sink", {**HTTP, "headers": {"X-Api-Key": MARK}}),
    ("http.headers.Authorization", "sink", {**HTTP, "headers": {"Authorization": MARK}}),
]


def _replace(data: Any, value: Any) -> Any:
    if isinstance(data, dict):
        return {k: _replace(v, value) for k, v in data.items()}
    return value if data == MARK else data


def _config(top: str, section: Any) -> dict[str, Any]:
    """A whole configuration with ``section`` at ``top`` (a sink goes into a topic)."""
    topic = {"topic": "t", "processor": "json_rows"}
    if top == "sink" and section.get("type") == "jdbc":
        topic["processor"] = "gobblin_compaction"  # a table sink needs typed columns
    if top == "sink":
        topic["sink"] = section
    config: dict[str, Any] = {"groups": [{"topics": [topic]}]}
    if top != "sink":
        config[top] = section
    return config


def _typed_sink(sink: Any) -> BaseModel:
    """The sink's own settings model, as the sink builds it at run time."""
    return settings_for(sink)


def _value_at(settings: Settings, top: str, section: Any) -> Any:
    """The loaded value where ``section`` has MARK."""
    current: Any = (_typed_sink(settings.groups[0].topics[0].sink) if top == "sink"
                    else getattr(settings, top))
    node = section
    while node != MARK:
        key = next(k for k, v in node.items() if MARK in json.dumps(v))
        node = node[key]
        current = current[key] if isinstance(current, dict) else getattr(current, key)
    return current.get_secret_value() if isinstance(current, SecretStr) else current


def _write(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "kstage.yml"
    text = yaml.safe_dump(config, default_flow_style=False, sort_keys=False)
    path.write_text(text.replace(MARK, "${SECRET_VALUE}"))  # plain: YAML types it a number
    return path


def _sources(tmp_path: Path, top: str, section: Any, value: Any,
             how: str) -> tuple[Path, dict[str, str]]:
    """The file and environment that set the secret to ``value`` from YAML or from env."""
    if how == "yaml":
        return (_write(tmp_path, _config(top, section)),
                {"SECRET_VALUE": value if isinstance(value, str) else json.dumps(value)})
    config = _config(top, _replace(section, value))
    name = "groups" if top == "sink" else top
    env = {f"KSTAGE_{name.upper()}": json.dumps(config.pop(name))}  # JSON: 987... a number
    if top == "sink":
        config["groups"] = []
    return _write(tmp_path, config), env


def _everything_printed(path: Path, env: dict[str, str]) -> tuple[str, bool]:
    """All a failed load or sink build prints (message, traceback, repr), and whether one
    failed."""
    out: list[str] = []
    failed = False
    try:
        settings = load_settings(path, env)
        out.append(repr(settings))
        for group in settings.groups:
            for topic in group.topics:
                out.append(repr(topic.sink))
                if topic.sink.type in ("jdbc", "http"):
                    try:
                        out.append(repr(_typed_sink(topic.sink)))
                    except ValidationError as exc:
                        failed = True
                        out += [str(exc), "".join(traceback.format_exception(exc))]
    except SettingsError as exc:
        failed = True
        out += [str(exc), "".join(traceback.format_exception(exc))]
    return "\n".join(out), failed


@pytest.mark.parametrize("how", ["yaml", "env"])
@pytest.mark.parametrize(("case", "top", "section"), CASES, ids=[c[0] for c in CASES])
def test_a_secret_of_digits_is_text_and_never_shown(
        tmp_path: Path, case: str, top: str, section: Any, how: str) -> None:
    path, env = _sources(tmp_path, top, section, int(SECRET), how)
    settings = load_settings(path, env)
    assert _value_at(settings, top, section) == SECRET  # the text, not 98765432123 the int
    printed, failed = _everything_printed(path, env)
    assert not failed
    assert SECRET not in printed


@pytest.mark.parametrize("how", ["yaml", "env"])
@pytest.mark.parametrize(("case", "top", "section"), CASES, ids=[c[0] for c in CASES])
def test_a_wrongly_typed_secret_next_to_a_typo_is_never_shown(
        tmp_path: Path, case: str, top: str, section: Any, how: str) -> None:
    # a list where a string belongs, and an unknown key beside it: both fail validation
    wrong = {**section, "bogus_key": SECRET}
    value: Any = [int(SECRET), {"nested": int(SECRET)}]
    path, env = _sources(tmp_path, top, wrong, value, how)
    printed, failed = _everything_printed(path, env)
    assert failed, printed
    assert SECRET not in printed


@pytest.mark.parametrize(("case", "top", "section"), CASES, ids=[c[0] for c in CASES])
def test_validate_prints_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str], case: str, top: str,
                                   section: Any) -> None:
    path, env = _sources(tmp_path, top, section, int(SECRET), "yaml")
    monkeypatch.setenv("SECRET_VALUE", env["SECRET_VALUE"])
    assert main(["validate", "-c", str(path)]) == 0
    wrong = _config(top, {**_replace(section, [int(SECRET)]), "bogus_key": 1})
    wrong_path = tmp_path / "wrong.yml"
    wrong_path.write_text(yaml.safe_dump(wrong))
    code = main(["validate", "-c", str(wrong_path)])
    out, err = capsys.readouterr()
    assert SECRET not in out + err
    assert code == 2 and "bogus_key" in err


def test_a_secret_named_variable_is_masked_in_a_problem_line(tmp_path: Path) -> None:
    # the service name check quotes its value: a value from a secret-named variable is
    # masked there too, wherever in the file it was put
    path = tmp_path / "kstage.yml"
    path.write_text("name: 'x ${DB_PASSWORD}'\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(path, {"DB_PASSWORD": SECRET})
    assert "name (line 1)" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_a_substituted_value_is_not_echoed_by_a_yaml_error(tmp_path: Path) -> None:
    path = tmp_path / "kstage.yml"
    path.write_text("supervisor:\n  max_restarts: !!int ${RESTARTS}\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(path, {"RESTARTS": NOT_AN_INT})
    printed = str(caught.value) + "".join(traceback.format_exception(caught.value))
    assert NOT_AN_INT not in printed


def test_a_number_setting_from_a_variable_is_still_a_number(tmp_path: Path) -> None:
    path = tmp_path / "kstage.yml"
    path.write_text("service:\n  http_port: ${PORT}\n")
    assert load_settings(path, {"PORT": "9200"}).service.http_port == 9200


@pytest.fixture
def known_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process-wide secret registry, emptied for this test only."""
    monkeypatch.setattr(secrets, "_known", [])


def _jdbc_and_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "kstage.yml"
    path.write_text(yaml.safe_dump(_config("sink", {**JDBC, "password": MARK}))
                    .replace(MARK, "${PG_PASSWORD}"))
    monkeypatch.setenv("PG_PASSWORD", SECRET)
    monkeypatch.setenv("KSTAGE_SCHEMA_REGISTRY__BEARER_TOKEN", TOKEN)
    return path


def test_a_log_line_never_shows_a_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str],
                                         known_secrets: None) -> None:
    """Whatever a library's exception quotes (here a driver quoting its connection
    string), the log line of a process that loaded the settings masks their secrets."""
    settings = common.load(str(_jdbc_and_registry(tmp_path, monkeypatch)))  # as `run` loads
    assert settings.schema_registry is not None
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        for fmt in ("text", "json"):
            configure_logging("INFO", fmt)
            try:
                raise RuntimeError(f"connect to jdbc:postgresql://db/x?password={SECRET} "
                                   f"with Bearer {TOKEN}")
            except RuntimeError:
                logging.getLogger("actors.sinks.jdbc").exception(
                    "write failed (password %s)", SECRET)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    err = capsys.readouterr().err
    assert err.count("write failed (password **********)") == 2
    assert SECRET not in err and TOKEN not in err


def test_a_dead_letter_line_never_shows_a_secret(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 known_secrets: None) -> None:
    common.load(str(_jdbc_and_registry(tmp_path, monkeypatch)))
    error = RuntimeError(f"jdbc:postgresql://db/x?password={SECRET}, Bearer {TOKEN}")
    line = dead_letter_line(group="g", topic="t", partition=0, offset=1, timestamp=0,
                            key=None, value=b"{}", headers=(), processor="json_rows",
                            exc=error, attempts=1)
    assert "password=**********" in json.loads(line)["error"]
    assert SECRET not in line and TOKEN not in line
