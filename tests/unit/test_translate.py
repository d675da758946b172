"""``kstage config from-wherehows|from-datahub``: translated configs and their errors.

The seeds in ``examples/configs`` must translate to configs that ``kstage validate``
accepts (settings and processors); every untranslatable input exits 2 with a message
naming the file, the line and the key. No broker is needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from service.cli import main
from service.dev.translate import (
    WHEREHOWS_PROCESSORS,
    TranslationError,
    from_datahub,
    from_wherehows,
    translate_datahub,
    translate_file,
    translate_wherehows,
)
from settings import SettingsError, load_settings

ROOT = Path(__file__).resolve().parents[2]
WHEREHOWS_SEED = ROOT / "examples" / "configs" / "wherehows-kafka.job"
DATAHUB_SEED = ROOT / "examples" / "configs" / "datahub-actions.yml"

WH = """\
group.id=wh-etl
schemaRegistryUrl=http://registry:8081
bootstrap.servers=broker:9092
kafka.topics=GobblinTrackingEvent
kafka.processors=metadata.etl.kafka.GobblinTrackingCompactionProcessor
kafka.db.tables=stg_kafka_gobblin_compaction
"""

DH = """\
name: dh
source:
  type: kafka
  config:
    connection:
      bootstrap: broker:9092
      schema_registry_url: http://registry:8081
    topic_routes:
      mcl: MCL
action:
  type: hello_world
"""


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def topics(config: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(t["topic"], t["processor"], t["format"])
            for g in config["groups"] for t in g["topics"]]


# ------------------------------------------------------------------------------ seeds


@pytest.mark.parametrize(("kind", "seed"), [("wherehows", WHEREHOWS_SEED),
                                            ("datahub", DATAHUB_SEED)])
def test_seed_translates_to_a_config_kstage_validate_accepts(
    kind: str, seed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "kstage.yml"
    code, stdout, err = run_cli(capsys, "config", f"from-{kind}", str(seed), "-o", str(out))
    assert (code, err) == (0, "")
    assert stdout.startswith(f"{out}: translated from {seed}")
    code, stdout, err = run_cli(capsys, "validate", "-c", str(out))
    assert (code, err) == (0, "")
    assert stdout.startswith(f"{out}: OK (1 group(s)")


def test_wherehows_seed_topics_processors_formats_exactly() -> None:
    config = from_wherehows(WHEREHOWS_SEED.read_text(), str(WHEREHOWS_SEED))
    assert topics(config) == [
        ("GobblinTrackingEvent", "gobblin_compaction", "avro"),
        ("GobblinTrackingEvent_distcp_ng", "gobblin_distcp", "avro"),
        ("GobblinTrackingEvent_lumos", "gobblin_lumos", "avro"),
        ("MetastoreTableAuditEvent", "metastore_audit", "avro"),
    ]
    assert config["name"] == config["groups"][0]["group_id"] == "wherehows-kafka-etl"
    assert config["kafka"] == {"bootstrap": "${KAFKA_BOOTSTRAP:-localhost:9092}"}
    assert config["schema_registry"] == {"url": "${SCHEMA_REGISTRY_URL:-http://localhost:8081}"}
    group = config["groups"][0]
    assert group["auto_offset_reset"] == "earliest"  # auto.offset.reset=smallest
    assert group["commit"] == {"mode": "batch", "max_interval_s": 1.0}
    assert [t["sink"]["path"] for t in group["topics"]] == [
        "out/stg_kafka_gobblin_compaction.jsonl", "out/stg_kafka_gobblin_distcp.jsonl",
        "out/stg_kafka_gobblin_lumos.jsonl", "out/stg_kafka_metastore_audit.jsonl"]


def test_datahub_seed_topics_processors_formats_exactly() -> None:
    config = from_datahub(DATAHUB_SEED.read_text(), str(DATAHUB_SEED))
    assert topics(config) == [
        ("MetadataChangeLog_Versioned_v1", "datahub_mcl", "avro"),
        ("PlatformEvent_v1", "datahub_entity_change", "avro"),
    ]
    assert [t["filter"] for t in config["groups"][0]["topics"]] == [
        {"include": {"entityType": ["dataset"]}},
        {"include": {"payload.value.entityType": ["dataset"]}}]
    assert config["name"] == config["groups"][0]["group_id"] == "datahub_staging_loader"
    assert config["kafka"] == {"bootstrap": "${KAFKA_BOOTSTRAP:-localhost:9092}",
                               "consumer_config": {"security.protocol": "PLAINTEXT"}}
    assert config["schema_registry"] == {"url": "${SCHEMA_REGISTRY_URL:-http://localhost:8081}"}
    group = config["groups"][0]
    assert group["auto_offset_reset"] == "earliest"
    assert group["failure"] == {
        "mode": "continue",
        "dead_letter_path": "${ACTIONS_FAILED_EVENTS_DIR:-/tmp/datahub/actions}"
                            "/datahub_staging_loader/failed_events.log"}


@pytest.mark.parametrize(("kind", "seed"), [("wherehows", WHEREHOWS_SEED),
                                            ("datahub", DATAHUB_SEED)])
def test_printed_yaml_round_trips_and_kstage_expands_the_variables(
    kind: str, seed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text, _ = run_cli(capsys, "config", f"from-{kind}", str(seed))
    assert code == 0
    assert text.startswith("# kstage configuration translated by")
    translate = from_wherehows if kind == "wherehows" else from_datahub
    assert yaml.safe_load(text) == translate(seed.read_text(), str(seed))
    path = tmp_path / "kstage.yml"
    path.write_text(text)
    env = {"KAFKA_BOOTSTRAP": "k1:9092,k2:9092", "SCHEMA_REGISTRY_URL": "http://sr:8081"}
    settings = load_settings(path, environ=env)
    assert settings.kafka.bootstrap == "k1:9092,k2:9092"
    assert settings.schema_registry is not None
    assert settings.schema_registry.url == "http://sr:8081"
    assert [(t.topic, t.processor, t.format) for g in settings.groups for t in g.topics] == \
        topics(yaml.safe_load(text))


# ------------------------------------------------------------------- translation rules


def test_wherehows_properties_syntax_and_defaults() -> None:
    text = (
        "! a comment\n"
        "group.id : wh-etl\n"
        "schemaRegistryUrl=http\\://registry\\:8081\n"
        "bootstrap.servers   broker:9092\n"
        "kafka.topics=MetastoreTableAuditEvent, \\\n"
        "    MetastorePartitionAuditEvent,\n"
        "kafka.processors=models.kafka.MetastoreAuditProcessor,\\\n"
        "  wherehows.processors.MetastoreAuditProcessor\n"
        "kafka.db.tables=wherehows.stg_kafka_metastore_audit,stg_kafka_metastore_audit\n"
        "security.protocol=SSL\n"
        "ssl.ca.location=/etc/ssl/ca.pem\n"
        "session.timeout.ms=30000\n"
        "zookeeper.connect=zk:2181\n"
    )
    translation = translate_wherehows(text, "src.job")
    config = translation.config
    assert config["schema_registry"] == {"url": "http://registry:8081"}
    assert config["kafka"] == {"bootstrap": "broker:9092", "consumer_config": {
        "security.protocol": "SSL", "ssl.ca.location": "/etc/ssl/ca.pem"}}
    group = config["groups"][0]
    assert group["group_id"] == "wh-etl"
    assert group["auto_offset_reset"] == "latest"  # WhereHows' consumer default (largest)
    assert group["session_timeout_ms"] == 30000
    assert topics(config) == [("MetastoreTableAuditEvent", "metastore_audit", "avro"),
                              ("MetastorePartitionAuditEvent", "metastore_audit", "avro")]
    assert any("zookeeper.connect" in note for note in translation.notes)
    assert any("auto_offset_reset: latest" in note for note in translation.notes)


def test_datahub_defaults_retries_group_id_and_registry_auth() -> None:
    text = """\
name: my-pipeline
source:
  type: kafka
  config:
    connection:
      bootstrap: broker:9092
      schema_registry_url: https://registry
      consumer_config:
        group.id: ${GROUP_ID:-actions}
        sasl.mechanism: PLAIN
        sasl.username: ${KAFKA_USER}
        sasl.password: ${KAFKA_PASSWORD}
        max.poll.interval.ms: ${POLL_MS:-600000}
      schema_registry_config:
        basic.auth.user.info: ${SR_USER:-u}:${SR_PASSWORD}
    async_commit_enabled: true
    async_commit_interval: 5000
action: {type: hello_world}
options: {retry_count: 2, failure_mode: THROW, failed_events_dir: /var/log/actions/}
"""
    translation = translate_datahub(text, "dh.yml")
    config = translation.config
    assert topics(config) == [("MetadataChangeLog_Versioned_v1", "datahub_mcl", "avro"),
                              ("MetadataChangeLog_Timeseries_v1", "datahub_mcl", "avro"),
                              ("PlatformEvent_v1", "datahub_entity_change", "avro")]
    assert any("no topic_routes" in note for note in translation.notes)
    group = config["groups"][0]
    assert group["group_id"] == "${GROUP_ID:-actions}"
    assert group["auto_offset_reset"] == "latest"  # DataHub's default
    assert group["max_poll_interval_ms"] == "${POLL_MS:-600000}"
    assert group["commit"] == {"mode": "batch", "max_interval_s": 5.0}
    assert group["failure"] == {
        "mode": "retry", "max_retries": 2, "min_backoff_ms": 0, "max_backoff_ms": 0,
        "then": "throw", "dead_letter_path": "/var/log/actions/my-pipeline/failed_events.log"}
    assert config["kafka"]["consumer_config"] == {
        "sasl.mechanism": "PLAIN", "sasl.username": "${KAFKA_USER}",
        "sasl.password": "${KAFKA_PASSWORD}"}
    assert config["schema_registry"] == {"url": "https://registry", "basic_auth": {
        "username": "${SR_USER:-u}", "password": "${SR_PASSWORD}"}}


def test_translation_error_is_a_settings_error() -> None:
    assert issubclass(TranslationError, SettingsError)
    with pytest.raises(TranslationError) as info:
        from_wherehows("group.id=g\n", "x.job")
    assert info.value.problems[0].startswith("x.job: schemaRegistryUrl: is missing")


# ----------------------------------------------------------------------------- errors

_WH_ERRORS = [
    # (description, text, expected line prefix, key and reason fragments)
    ("missing key", WH.replace("schemaRegistryUrl=http://registry:8081\n", ""),
     None, "schemaRegistryUrl: is missing"),
    ("zookeeper only", WH.replace("bootstrap.servers=broker:9092\n", "zookeeper.connect=zk\n"),
     None, "bootstrap.servers: is missing; kstage connects to the brokers, not to ZooKeeper"),
    ("unequal lists", WH.replace("kafka.topics=GobblinTrackingEvent", "kafka.topics=A,B"),
     4, "kafka.topics, kafka.processors, kafka.db.tables: the three lists must have equal "
        "length (WhereHows pairs them by position): 2 topics, 1 processors, 1 tables"),
    ("unknown class", WH.replace("GobblinTrackingCompactionProcessor",
                                 "GobblinTrackingAuditProcessor"),
     5, "kafka.processors: unknown WhereHows processor class "
        "'metadata.etl.kafka.GobblinTrackingAuditProcessor' (entry 1); kstage translates "
        + ", ".join(f"{k} -> {v}" for k, v in WHEREHOWS_PROCESSORS.items())),
    ("wrong table", WH.replace("stg_kafka_gobblin_compaction", "stg_gobblin_tracking_compaction"),
     6, "kafka.db.tables: entry 1 is 'stg_gobblin_tracking_compaction', but topic "
        "'GobblinTrackingEvent' goes to kstage's gobblin_compaction, whose rows follow the DDL "
        "of 'stg_kafka_gobblin_compaction'"),
    ("unsupported key", WH + "consumer.timeout.ms=100\n",
     7, "consumer.timeout.ms: not supported by kstage's Kafka consumer (supported: "),
    ("bare variable", WH.replace("broker:9092", "$BROKERS"),
     3, "bootstrap.servers: $BROKERS is not expanded by kstage: write ${BROKERS}"),
    ("bad reset", WH + "auto.offset.reset=oldest\n", 7, "auto.offset.reset: 'oldest' is not"),
    ("empty entry", WH.replace("kafka.topics=GobblinTrackingEvent", "kafka.topics=,X"),
     4, "kafka.topics: entry 1 ('') is empty or has whitespace"),
]

_DH_ERRORS = [
    ("not kafka", DH.replace("type: kafka", "type: datahub-cloud"),
     3, "source.type: 'datahub-cloud' cannot be translated: kstage consumes Kafka"),
    ("failure mode", DH + "options: {failure_mode: SKIP}\n",
     12, "options.failure_mode: 'SKIP' is not a DataHub failure mode (CONTINUE | THROW)"),
    ("consumer_config key", DH.replace(
        "      schema_registry_url", "      consumer_config: {enable.auto.commit: true}\n"
                                     "      schema_registry_url"),
     7, "source.config.connection.consumer_config['enable.auto.commit']: not supported by "
        "kstage's Kafka consumer (supported: "),
    ("missing bootstrap", DH.replace("      bootstrap: broker:9092\n", ""),
     5, "source.config.connection.bootstrap: is missing"),
    ("missing name", DH.replace("name: dh\n", ""), None, "name: is missing"),
    ("route", DH.replace("      mcl: MCL", "      mce: MCE"),
     9, "source.config.topic_routes.mce: unknown route (DataHub's Kafka source routes mcl, "
         "mcl_timeseries, pe)"),
    ("unknown key", DH + "options: {retries: 3}\n", 12, "options.retries: unknown key"),
    ("wrong type", DH + "options: {retry_count: many}\n",
     12, "options.retry_count: must be an integer, not str"),
    ("invalid yaml", "name: dh\nsource: [\n", 3, "(YAML): expected the node content"),
    ("malformed variable", DH.replace("broker:9092", "${BROKERS"),
     6, "source.config.connection.bootstrap: malformed variable reference"),
    ("registry config", DH.replace(
        "      schema_registry_url: http://registry:8081",
        "      schema_registry_url: http://registry:8081\n"
        "      schema_registry_config: {bearer.auth.token: t}"),
     8, "source.config.connection.schema_registry_config['bearer.auth.token']: not supported"),
]


@pytest.mark.parametrize(("kind", "text", "line", "message"), [
    pytest.param("wherehows", text, line, message, id=f"wherehows-{name}")
    for name, text, line, message in _WH_ERRORS
] + [
    pytest.param("datahub", text, line, message, id=f"datahub-{name}")
    for name, text, line, message in _DH_ERRORS
])
def test_untranslatable_input_exits_2_naming_file_line_and_key(
    kind: str, text: str, line: int | None, message: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = tmp_path / ("job.job" if kind == "wherehows" else "pipeline.yml")
    source.write_text(text)
    out = tmp_path / "out.yml"
    code, stdout, err = run_cli(capsys, "config", f"from-{kind}", str(source), "-o", str(out))
    assert (code, stdout) == (2, "")
    where = f"{source}:{line}" if line else f"{source}"
    assert f"kstage: {where}: {message}" in err, err
    assert not out.exists()


def test_every_problem_is_reported_at_once_in_file_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "bad.job"
    source.write_text(WH.replace("GobblinTrackingCompactionProcessor", "AuditProcessor")
                      + "consumer.timeout.ms=1\nfetch.message.max.bytes=2\n")
    code, _, err = run_cli(capsys, "config", "from-wherehows", str(source))
    assert code == 2
    lines = err.splitlines()
    assert [line.split(": ")[1] for line in lines] == [
        f"{source}:5", f"{source}:7", f"{source}:8"]
    assert [line.split(": ")[2] for line in lines] == [
        "kafka.processors", "consumer.timeout.ms", "fetch.message.max.bytes"]


def test_unreadable_source_and_unwritable_output_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.job"
    code, _, err = run_cli(capsys, "config", "from-wherehows", str(missing))
    assert code == 2
    assert err == (f"kstage: {missing}: cannot read a WhereHows Kafka consumer job: "
                   "No such file or directory\n")
    out = tmp_path / "no-such-dir" / "kstage.yml"
    code, _, err = run_cli(capsys, "config", "from-datahub", str(DATAHUB_SEED), "-o", str(out))
    assert code == 2
    assert err == f"kstage: {out}: cannot write: No such file or directory\n"


def test_config_without_a_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["config"])
    assert info.value.code == 2
    assert "from-wherehows" in capsys.readouterr().err


def test_translate_file_renders_notes_as_comments() -> None:
    text = translate_file("datahub", str(DATAHUB_SEED))
    head = text.split("\nname:")[0].splitlines()
    assert all(line.startswith("#") for line in head)
    assert any("not translated: action" in line for line in head)


# ---------------------------------------------------------------------------- filters

DH_FILTER = DH.replace("      mcl: MCL\n", "      mcl: MCL\n      pe: PE\n")


def test_datahub_filter_event_becomes_each_topics_include() -> None:
    """DataHub's nested ``filter.event`` -> dotted include paths; a platform event's
    EntityChangeEvent is read from its JSON payload (``payload.value``)."""
    translation = translate_datahub(DH_FILTER + """\
filter:
  event_type: [EntityChangeEvent_v1, MetadataChangeLogEvent_v1]
  event:
    entityType: dataset
    category: [TAG, GLOSSARY_TERM]
    aspect: {value: {removed: false}}
""", "dh.yml")
    by_topic = {t["topic"]: t["filter"] for t in translation.config["groups"][0]["topics"]}
    assert by_topic == {
        "MCL": {"include": {"entityType": ["dataset"], "category": ["TAG", "GLOSSARY_TERM"],
                            "aspect.value.removed": [False]}},
        "PE": {"include": {"payload.value.entityType": ["dataset"],
                           "payload.value.category": ["TAG", "GLOSSARY_TERM"],
                           "payload.value.aspect.value.removed": [False]}}}
    assert not any("not translated: filter" in n for n in translation.notes)
    load_settings_from_dict(translation.config)


def test_datahub_filter_event_type_leaves_out_the_topics_of_other_types() -> None:
    translation = translate_datahub(DH_FILTER + "filter:\n  event_type: EntityChangeEvent_v1\n",
                                    "dh.yml")
    assert topics(translation.config) == [("PE", "datahub_entity_change", "avro")]
    assert "filter" not in translation.config["groups"][0]["topics"][0]
    assert any("does not list MetadataChangeLogEvent_v1: topic MCL" in n
               for n in translation.notes)


@pytest.mark.parametrize(("block", "problem"), [
    ("filter:\n  event_type: RelationshipChangeEvent_v1\n",
     "dh.yml:14: filter.event_type: lists none of the routed topics' event types"),
    ("filter:\n  event: {entityType: dataset}\n", "dh.yml:13: filter.event_type: is missing"),
    ("filter:\n  event_type: []\n", "dh.yml:14: filter.event_type: must be an event type"),
    ("filter:\n  event_type: EntityChangeEvent_v1\n  event:\n    a.b: x\n",
     "dh.yml:16: filter.event['a.b']: a key with a dot"),
    ("filter:\n  event_type: EntityChangeEvent_v1\n  event:\n    tags: [[a]]\n",
     "dh.yml:16: filter.event.tags: cannot be translated"),
    ("filter:\n  event_type: EntityChangeEvent_v1\n  events: {}\n",
     "dh.yml:15: filter.events: unknown key"),
])
def test_untranslatable_datahub_filters_name_the_line_and_key(block: str, problem: str) -> None:
    with pytest.raises(TranslationError) as info:
        translate_datahub(DH_FILTER + block, "dh.yml")
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems


def load_settings_from_dict(config: dict[str, Any]) -> None:
    from settings import Settings

    Settings.model_validate(config)
