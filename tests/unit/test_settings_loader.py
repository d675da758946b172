"""Tests of settings.loader: YAML reading, ${VAR} expansion, KSTAGE_* overrides, errors."""

from __future__ import annotations
import __future__

import subprocess
import sys
import traceback
import types
from pathlib import Path

import pytest

import settings
from settings import (
    CommitMode,
    ConfigFileError,
    ConfigValidationError,
    FailureMode,
    Settings,
    SettingsError,
    UndefinedVariableError,
    load_settings,
)

EXAMPLE = """\
name: wherehows-etl
kafka:
  bootstrap: ${KAFKA_BOOTSTRAP:-embedded}   # "embedded" starts the bundled broker for you
  consumer_config: {}                        # free-form Kafka client keys: security.protocol, sasl.*, ssl.* ...
supervisor: {shutdown_grace_s: 30, abort_grace_s: 10, max_restarts: 5, restart_window_s: 60}
groups:
  - group_id: wherehows-etl                 # defaults to `name`
    auto_offset_reset: earliest             # earliest | latest | none (= refuse to start without a committed offset)
    max_poll_records: 2000
    max_poll_interval_ms: 300000
    commit: {mode: batch, max_messages: 1000, max_interval_s: 10}   # none | auto | per_message | batch | savepoint
    failure:
      mode: continue                        # continue | throw | retry
      max_retries: 3
      min_backoff_ms: 60000
      max_backoff_ms: 100000
      then: continue                        # after retries: continue | throw
      dead_letter_path: failed_events.log
    topics:
      - {topic: events_json, processor: json_rows, format: json, sink: {type: jsonl, path: out/events.jsonl}}
"""  # noqa: E501

MINIMAL_GROUP = """\
groups:
  - topics:
      - {topic: t, processor: p}
"""


def write(tmp_path: Path, text: str, name: str = "kstage.yml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def validation_error(path: Path, environ: dict[str, str] | None = None) -> ConfigValidationError:
    with pytest.raises(ConfigValidationError) as info:
        load_settings(path, environ or {})
    return info.value


# ----------------------------------------------------------------------- loading


def test_example_loads_as_written_without_kafka_bootstrap(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, EXAMPLE), {})

    assert s.name == "wherehows-etl"
    assert s.kafka.bootstrap == "embedded"
    assert s.kafka.embedded
    assert s.kafka.consumer_config == {}
    assert s.supervisor.shutdown_grace_s == 30
    assert s.supervisor.abort_grace_s == 10
    assert s.supervisor.max_restarts == 5
    assert s.supervisor.restart_window_s == 60
    [group] = s.groups
    assert group.group_id == "wherehows-etl"
    assert s.group_id(group) == "wherehows-etl"
    assert group.auto_offset_reset == "earliest"
    assert group.max_poll_records == 2000
    assert group.max_poll_interval_ms == 300000
    assert group.commit.mode is CommitMode.BATCH
    assert group.commit.max_messages == 1000
    assert group.commit.max_interval_s == 10
    assert group.failure.mode is FailureMode.CONTINUE
    assert group.failure.max_retries == 3
    assert group.failure.min_backoff_ms == 60000
    assert group.failure.max_backoff_ms == 100000
    assert group.failure.then == "continue"
    assert group.failure.dead_letter_path == "failed_events.log"
    [topic] = group.topics
    assert (topic.topic, topic.processor, topic.format) == ("events_json", "json_rows", "json")
    assert (topic.sink.type, topic.sink.path) == ("jsonl", "out/events.jsonl")


def test_example_loads_with_kafka_bootstrap_set(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, EXAMPLE), {"KAFKA_BOOTSTRAP": "k1:9092,k2:9092"})

    assert s.kafka.bootstrap == "k1:9092,k2:9092"
    assert not s.kafka.embedded
    assert s.groups[0].topics[0].processor == "json_rows"


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, "# nothing configured yet\n"), {})

    assert s == Settings.model_validate({})
    assert s.name == "kstage"
    assert s.kafka.bootstrap == "embedded"
    assert s.groups == []


def test_group_defaults(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, MINIMAL_GROUP), {})

    [group] = s.groups
    assert group.group_id is None
    assert s.group_id(group) == "kstage"
    assert group.commit.mode is CommitMode.BATCH
    assert group.failure.mode is FailureMode.CONTINUE
    assert group.max_poll_records == 2000
    assert group.topics[0].sink.type == "null"
    assert group.topics[0].format == "json"


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yml"
    with pytest.raises(ConfigFileError, match="absent.yml: cannot read configuration file"):
        load_settings(path, {})


# ---------------------------------------------------------------------- expansion


def test_defaults_expand_everywhere_and_single_plain_references_are_typed(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        """\
name: ${NAME:-svc}
kafka:
  bootstrap: ${HOST:-localhost}:${PORT:-9092}
  client_id: "${CLIENT:-500}"
  consumer_config:
    schema.registry.url: http://${SR_HOST:-localhost}:8081
    enable.idempotence: ${IDEMPOTENT:-true}
    retries: ${RETRIES}
groups:
  - max_poll_records: ${N:-250}
    commit:
      wait_for_ack: ${WAIT:-yes}
    topics:
      - {topic: "${TOPIC:-events}", processor: p, options: {n: "prefix-${N:-250}"}}
""",
    )
    s = load_settings(path, {"HOST": "broker", "RETRIES": "7", "NAME": ""})

    assert s.name == "svc"  # an empty variable takes the default too
    assert s.kafka.bootstrap == "broker:9092"
    assert s.kafka.client_id == "500"  # quoted: stays a string
    assert s.kafka.consumer_config["schema.registry.url"] == "http://localhost:8081"
    assert s.kafka.consumer_config["enable.idempotence"] is True
    assert s.kafka.consumer_config["retries"] == 7
    assert s.groups[0].max_poll_records == 250
    assert s.groups[0].commit.wait_for_ack is True
    assert s.groups[0].topics[0].topic == "events"
    assert s.groups[0].topics[0].options == {"n": "prefix-250"}


def test_expanded_values_are_not_reparsed_as_yaml(tmp_path: Path) -> None:
    # (free-form string settings: kafka.bootstrap must be a host:port list)
    path = write(tmp_path, "service:\n  http_host: ${HOSTS}\nkafka:\n  client_id: '${CID}'\n")
    s = load_settings(path, {"HOSTS": "[a, b]", "CID": "x\nkafka: {bootstrap: evil}"})

    assert s.service.http_host == "[a, b]"
    assert s.kafka.client_id == "x\nkafka: {bootstrap: evil}"


def test_double_dollar_is_a_literal_dollar(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "name: cost$$5\nkafka: {client_id: '$${NOT_A_VAR}'}\nservice: {http_host: a$b}\n",
    )
    s = load_settings(path, {})

    assert s.name == "cost$5"
    assert s.kafka.client_id == "${NOT_A_VAR}"
    assert s.service.http_host == "a$b"


def test_unset_variable_names_variable_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "name: svc\nkafka:\n\n  bootstrap: ${KAFKA_BOOTSTRAP}\n")
    with pytest.raises(UndefinedVariableError) as info:
        load_settings(path, {})

    assert str(info.value) == (
        f"{path}:4: environment variable KAFKA_BOOTSTRAP is not set "
        "(write ${KAFKA_BOOTSTRAP:-default} to give a default)"
    )
    assert isinstance(info.value, SettingsError)


def test_malformed_reference_is_a_file_error(tmp_path: Path) -> None:
    path = write(tmp_path, "name: svc\nkafka: {bootstrap: '${HOST'}\n")
    with pytest.raises(ConfigFileError, match=r"kstage.yml:2: malformed variable reference"):
        load_settings(path, {})


# ---------------------------------------------------------------------- YAML errors


def test_bad_yaml_names_file_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "name: svc\nkafka:\n  bootstrap: [a, b\nsupervisor: {}\n")
    with pytest.raises(ConfigFileError) as info:
        load_settings(path, {})

    message = str(info.value)
    assert message.startswith(f"{path}:4:")
    assert "expected ',' or ']'" in message


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "# a list\n- name: svc\n")
    with pytest.raises(ConfigFileError) as info:
        load_settings(path, {})

    assert str(info.value) == f"{path}:2: the top level must be a mapping of settings, not a list"


def test_duplicate_key_is_reported(tmp_path: Path) -> None:
    path = write(tmp_path, "name: a\nkafka: {}\nname: b\n")
    with pytest.raises(ConfigFileError, match=r"kstage.yml:3:1: duplicate key 'name'"):
        load_settings(path, {})


# ---------------------------------------------------------------- validation errors


def test_all_validation_problems_are_reported_at_once_with_paths_and_lines(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        """\
name: my service
groups:
  - commit: {mode: sometimes}
    topics:
      - {topic: a, processor: p}
      - topic: b
        format: json
""",
    )
    err = validation_error(path)

    assert err.source == str(path)
    assert err.problems == [
        "name (line 1): must be non-empty and contain no whitespace, got 'my service'",
        "groups[0].commit.mode (line 3): "
        "Input should be 'none', 'auto', 'per_message', 'batch' or 'savepoint'",
        "groups[0].topics[1].processor (line 6): Field required",
    ]
    assert str(err).startswith(f"{path}: 3 configuration problem(s):\n  - name (line 1)")


def test_unknown_key_is_reported(tmp_path: Path) -> None:
    path = write(tmp_path, "name: svc\nkafka:\n  bootstrap: b:9092\n  bootstrp: typo\nextra: 1\n")
    err = validation_error(path)

    assert err.problems == [
        "kafka.bootstrp (line 4): Extra inputs are not permitted; did you mean 'bootstrap'?",
        "extra (line 5): Extra inputs are not permitted",
    ]


def test_model_level_error_cites_the_model_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        MINIMAL_GROUP + "    failure: {min_backoff_ms: 10, max_backoff_ms: 5}\n",
    )
    err = validation_error(path)

    assert err.problems == ["groups[0].failure (line 4): max_backoff_ms must be >= min_backoff_ms"]


def test_merge_interval_needs_a_spark_sink(tmp_path: Path) -> None:
    path = write(tmp_path, "merge: {interval_s: 60}\n" + MINIMAL_GROUP)
    err = validation_error(path)
    assert len(err.problems) == 1
    assert "merge.interval_s is set but no topic has a sink of type spark" in err.problems[0]
    ok = write(tmp_path, "merge: {interval_s: 60}\n" + MINIMAL_GROUP.replace(
        "processor: p}", "processor: p, sink: {type: spark}}"))
    assert load_settings(ok).merge.interval_s == 60


def test_spark_warehouse_is_a_path_a_file_uri_or_s3(tmp_path: Path) -> None:
    ok = write(tmp_path, "spark: {warehouse: 'file:///data/wh'}\n")
    assert load_settings(ok).spark.warehouse == "/data/wh"
    bad = write(tmp_path, "spark: {warehouse: 'hdfs://nn:8020/wh'}\n")
    [problem] = validation_error(bad).problems
    assert problem.startswith("spark.warehouse (line 1): ")
    assert ("'hdfs://nn:8020/wh': a warehouse is a local (or shared) path, file://, or "
            "s3://bucket/prefix") in problem


# ------------------------------------------------------------------- environment


def test_environment_overrides_beat_the_file(tmp_path: Path) -> None:
    environ = {
        "KSTAGE_KAFKA__BOOTSTRAP": "env-broker:9092",
        "KSTAGE_SUPERVISOR__SHUTDOWN_GRACE_S": "5",
        "KSTAGE_NAME": "from-env",
        "KAFKA_BOOTSTRAP": "from-file-variable:9092",
    }
    s = load_settings(write(tmp_path, EXAMPLE), environ)

    assert s.kafka.bootstrap == "env-broker:9092"
    assert s.supervisor.shutdown_grace_s == 5
    assert s.supervisor.abort_grace_s == 10  # the rest of the section still comes from the file
    assert s.name == "from-env"
    assert s.groups[0].group_id == "wherehows-etl"


def test_environment_problems_say_from_environment(tmp_path: Path) -> None:
    environ = {"KSTAGE_SUPERVISOR__SHUTDOWN_GRACE_S": "soon", "KSTAGE_SUPERVISOR__BOGUS": "1"}
    err = validation_error(write(tmp_path, EXAMPLE), environ)

    assert sorted(err.problems) == [
        "supervisor.bogus (from environment): Extra inputs are not permitted",
        "supervisor.shutdown_grace_s (from environment): "
        "Input should be a valid number, unable to parse string as a number",
    ]


def test_given_environ_replaces_os_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KSTAGE_NAME", "from-os-environ")
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "os:9092")
    path = write(tmp_path, EXAMPLE)

    explicit = load_settings(path, {})
    assert (explicit.name, explicit.kafka.bootstrap) == ("wherehows-etl", "embedded")

    default = load_settings(path)
    assert (default.name, default.kafka.bootstrap) == ("from-os-environ", "os:9092")


def test_lowercase_variables_override_too(tmp_path: Path) -> None:
    """Variable names are matched without regard to case, as pydantic-settings does."""
    s = load_settings(write(tmp_path, EXAMPLE), {"kstage_kafka__bootstrap": "lower:9092"})
    assert s.kafka.bootstrap == "lower:9092"


def test_settings_built_in_code_never_read_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the loader applies ``KSTAGE_*`` variables: settings a caller builds in code
    (the demo's, a test's) are what it wrote, whatever the environment holds."""
    monkeypatch.setenv("KSTAGE_NAME", "from-os-environ")
    monkeypatch.setenv("KSTAGE_KAFKA__BOOTSTRAP", "os:9092")
    built = Settings(kafka={"bootstrap": "code:9092"})  # type: ignore[arg-type]
    assert (built.name, built.kafka.bootstrap) == ("kstage", "code:9092")


# ------------------------------------------------------------------------ secrets


def test_secret_from_variable_never_appears(tmp_path: Path) -> None:
    hidden = "hunter2-s3cr3t"
    config = """\
name: svc
kafka:
  consumer_config:
    security.protocol: SASL_SSL
    sasl.username: svc
    sasl.password: ${SR_PASSWORD}
"""
    s = load_settings(write(tmp_path, config), {"SR_PASSWORD": hidden})

    assert s.kafka.consumer_config["security.protocol"] == "SASL_SSL"
    assert s.kafka.consumer_config["sasl.password"].get_secret_value() == hidden
    for text in (str(s), repr(s), str(s.kafka), repr(s.kafka.consumer_config)):
        assert hidden not in text

    # The same secret next to validation problems, in a valid place and in a misspelt
    # section: neither the message nor the chained traceback may show it.
    broken = """\
name: svc
kafka:
  consumer_config: {security.protocol: SASL_SSL, sasl.username: svc,
                    sasl.password: "${SR_PASSWORD}"}
  consumer_confg: {sasl.password: "${SR_PASSWORD}"}
supervisor: {max_restarts: -1}
"""
    err = validation_error(write(tmp_path, broken), {"SR_PASSWORD": hidden})
    assert err.problems == [
        "kafka.consumer_confg (line 5): Extra inputs are not permitted; did you mean "
        "'consumer_config'?",
        "supervisor.max_restarts (line 6): Input should be greater than or equal to 0",
    ]
    assert hidden not in str(err)
    assert hidden not in "".join(traceback.format_exception(err))


# ----------------------------------------------------------------------- package


def test_all_lists_every_public_name() -> None:
    public = {
        name
        for name, value in vars(settings).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and value is not __future__.annotations
    }
    assert sorted(settings.__all__) == sorted(public)
    for module in (settings.models, settings.errors):
        defined = {
            name
            for name, value in vars(module).items()
            if isinstance(value, type)
            and value.__module__ == module.__name__
            and not name.startswith("_")
        }
        assert defined <= set(settings.__all__), module.__name__
    assert "load_settings" in settings.__all__


def test_import_pulls_in_neither_pyspark_nor_aiokafka() -> None:
    code = (
        "import sys, settings; "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'aiokafka')); "
        "sys.exit(', '.join(heavy) or None)"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr or result.stdout
