"""``docker-compose.yml``: valid, scalable, supervised, and consistent with kstage's config.

The file is checked with ``docker-compose config`` (the Debian package ``docker-compose``,
installed by ``.ci/run``), which resolves it exactly as ``docker compose up`` would. Then
the kstage config it mounts is loaded with the container's environment, and every host it
names must be a service of the file: its Iceberg tables have their catalog in the
compose PostgreSQL and their warehouse in the bucket the compose MinIO gets, the appends
run on the compose Spark cluster, whose images are of the pinned pyspark's Spark line,
and the image kstage is built from fetches the pinned jars. No Docker daemon is needed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from actors.master import resolve_processors
from actors.sinks.spark.catalog import warehouse_location
from settings import load_settings
from tests.apache_kafka import KAFKA_VERSION

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
CONFIG_IN_CONTAINER = "/etc/kstage/kstage.yml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The file as ``docker-compose config`` resolves it (defaults of ``${VAR:-x}`` applied)."""
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.fail("docker-compose is not installed: .ci/run must install the Debian package "
                    "docker-compose (apt-get install -y docker-compose)", pytrace=False)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COMPOSE_", "DOCKER_", "KAFKA_", "SCHEMA_REGISTRY_",
                                "POSTGRES_", "SPARK_", "CONFLUENT_"))}
    result = subprocess.run([binary, "-f", str(COMPOSE), "config"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, f"docker-compose config failed:\n{result.stderr}"
    assert "WARNING" not in result.stderr, result.stderr  # e.g. an unset variable
    resolved: dict[str, Any] = yaml.safe_load(result.stdout)
    return resolved


def one_shot(compose: dict[str, Any]) -> set[str]:
    """Services another one waits for to complete (a setup job, not a server)."""
    return {name for service in compose["services"].values()
            for name, cond in service.get("depends_on", {}).items()
            if cond.get("condition") == "service_completed_successfully"}


def pinned_spark_line() -> str:
    """``4.1`` for the ``spark`` extra's ``pyspark==4.1.4``."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["spark"]
    [pin] = [req for req in extra if req.startswith("pyspark==")]
    major, minor, _ = pin.removeprefix("pyspark==").split(".")
    return f"{major}.{minor}"


def test_the_stack_has_every_service(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"kafka", "schema-registry", "spark-master", "spark-worker",
                             "postgres", "minio", "minio-bucket", "kstage"}
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["schema-registry"]["image"].startswith("confluentinc/cp-schema-registry:")
    assert services["postgres"]["image"] == "postgres:16"
    assert services["minio"]["image"].startswith("minio/minio:RELEASE.")
    for name, role in (("spark-master", "master.Master"), ("spark-worker", "worker.Worker")):
        # the Spark line of the pinned pyspark (the Iceberg runtime is built for it)
        assert services[name]["image"].startswith(f"apache/spark:{pinned_spark_line()}.")
        assert f"org.apache.spark.deploy.{role}" in services[name]["command"]
    assert "spark://spark-master:7077" in services["spark-worker"]["command"]
    assert services["kstage"]["build"]["context"] == str(ROOT)


def test_kafka_is_single_node_kraft_advertised_to_host_and_network(
    compose: dict[str, Any],
) -> None:
    env = compose["services"]["kafka"]["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert not any("ZOOKEEPER" in key for key in env)
    advertised = env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert "EXTERNAL://127.0.0.1:9092" in advertised
    assert "INTERNAL://kafka:29092" in advertised
    assert "127.0.0.1:9092:9092" in [_port(p) for p in compose["services"]["kafka"]["ports"]]


def test_every_service_has_a_healthcheck_and_a_restart_policy(compose: dict[str, Any]) -> None:
    jobs = one_shot(compose)
    assert jobs == {"minio-bucket"}
    for name, service in compose["services"].items():
        if name not in jobs:  # a job is done when it exited 0: nothing to probe
            assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        assert service.get("restart") in ("always", "unless-stopped", "on-failure"), \
            f"{name} has no restart policy"


def test_kstage_is_scalable(compose: dict[str, Any]) -> None:
    kstage = compose["services"]["kstage"]
    assert "container_name" not in kstage  # --scale needs generated names
    assert "ports" not in kstage  # a fixed host port would clash between replicas
    healthy = {"condition": "service_healthy"}
    assert kstage["depends_on"] == {
        "kafka": healthy, "schema-registry": healthy, "spark-worker": healthy,
        "postgres": healthy, "minio-bucket": {"condition": "service_completed_successfully"}}


def test_kstage_config_hosts_are_services_of_the_file(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    kstage = compose["services"]["kstage"]
    assert kstage["command"] == ["run", "-c", CONFIG_IN_CONTAINER]
    mounts = {_mount_target(v): _mount_source(v) for v in kstage["volumes"]}
    config = Path(mounts[CONFIG_IN_CONTAINER])
    assert config == ROOT / "examples" / "configs" / "compose.yml"
    settings = load_settings(config, environ=kstage["environment"])
    resolve_processors(settings)  # every processor installed, formats accepted
    hosts = {hostport.rsplit(":", 1)[0] for hostport in settings.kafka.bootstrap.split(",")}
    assert settings.schema_registry is not None
    hosts |= {urlsplit(url).hostname or "" for url in settings.schema_registry.urls}
    spark = settings.spark
    catalog = spark.catalog
    assert catalog.uri is not None and catalog.s3 is not None and catalog.s3.endpoint
    hosts |= {urlsplit(url).hostname or "" for url in (
        spark.master.replace("spark://", "http://"), catalog.uri.removeprefix("jdbc:"),
        catalog.s3.endpoint)}
    assert hosts == {"kafka", "schema-registry", "spark-master", "postgres", "minio"}
    assert hosts <= set(compose["services"]), hosts - set(compose["services"])
    # the bootstrap port is the listener Kafka advertises on the compose network
    assert settings.kafka.bootstrap == "kafka:29092"
    # every topic lands in an Iceberg staging table; dead letters in the shared /data
    assert {t.sink.type for g in settings.groups for t in g.topics} == {"spark"}
    assert "/data" in mounts
    paths = [g.failure.dead_letter_path for g in settings.groups]
    assert paths and all(str(p).startswith("/data/") for p in paths), paths


def test_the_catalog_is_the_compose_postgres_and_the_warehouse_its_minio_bucket(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    kstage = services["kstage"]
    mounts = {_mount_target(v): _mount_source(v) for v in kstage["volumes"]}
    settings = load_settings(Path(mounts[CONFIG_IN_CONTAINER]), environ=kstage["environment"])
    catalog = settings.spark.catalog
    postgres = services["postgres"]["environment"]
    assert catalog.type == "jdbc"
    assert catalog.uri == f"jdbc:postgresql://postgres:5432/{postgres['POSTGRES_DB']}"
    assert catalog.user == postgres["POSTGRES_USER"]
    assert catalog.password is not None
    assert catalog.password.get_secret_value() == postgres["POSTGRES_PASSWORD"]
    # the bucket minio-bucket creates, with the credentials MinIO has
    bucket = services["minio-bucket"]["environment"]["BUCKET"]
    assert warehouse_location(settings.spark).startswith(f"s3://{bucket}/")
    minio = services["minio"]["environment"]
    s3 = catalog.s3
    assert s3 is not None and s3.path_style_access
    assert s3.access_key_id is not None and s3.secret_access_key is not None
    assert s3.access_key_id.get_secret_value() == minio["MINIO_ROOT_USER"]
    assert s3.secret_access_key.get_secret_value() == minio["MINIO_ROOT_PASSWORD"]
    assert len(minio["MINIO_ROOT_PASSWORD"]) >= 8  # MinIO refuses a shorter one
    assert "mc mb" in " ".join(services["minio-bucket"]["entrypoint"])
    # A secret is masked wherever its value shows in a log line: a default one must not
    # be a word of kstage's logs (a password "kstage" would hide the catalog's name).
    for secret in (catalog.password, s3.access_key_id, s3.secret_access_key):
        value = secret.get_secret_value()
        assert len(value) >= 8 and value not in "kstage.kstage.stg_", value
    # the Spark master the replicas run on, with a core for each of the documented three
    # (an application that gets no executor never runs its appends)
    assert settings.spark.master == "spark://spark-master:7077"
    worker = services["spark-worker"]["command"]
    cores = int(worker[worker.index("--cores") + 1])
    assert "--scale kstage=3" in COMPOSE.read_text()
    assert cores >= 3 * int(settings.spark.conf["spark.cores.max"]), worker


def test_the_kstage_image_fetches_the_pinned_jars() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    lines = [line.strip() for line in dockerfile.splitlines()]
    # one RUN installs Maven and a JDK (the commit fence is built from source), fetches,
    # and removes them again
    fetch = lines.index("&& kstage jars fetch \\")
    run = max(i for i in range(fetch) if lines[i].startswith("RUN "))
    assert "maven openjdk-17-jdk-headless" in lines[run + 1]
    assert all(line.startswith("&&") for line in lines[run + 1:fetch + 3])
    assert lines[fetch + 1].startswith("&& apt-get purge -y --auto-remove maven")
    env = [line for line in lines if line.startswith("ENV KSTAGE_JARS_DIR=")]
    assert env and lines.index(env[0]) < run
    # fetched as root before the image drops to its user, into a path it can read
    assert fetch < lines.index("USER kstage")


def _port(port: Any) -> str:
    if isinstance(port, str):
        return port.removesuffix("/tcp")
    return f"{port.get('host_ip', '')}:{port['published']}:{port['target']}".lstrip(":")


def _mount_target(volume: Any) -> str:
    if isinstance(volume, str):
        return volume.split(":")[1]
    return str(volume["target"])


def _mount_source(volume: Any) -> str:
    if isinstance(volume, str):
        return volume.split(":")[0]
    return str(volume["source"])


def test_compose_runs_the_apache_kafka_the_suite_tests(compose: dict[str, Any]) -> None:
    """docker-compose.yml, the tests' POM and tests/apache_kafka.py name one version."""
    pom = (ROOT / "tests/jars/kafka/pom.xml").read_text()
    assert f"<artifactId>kafka_2.13</artifactId>\n      <version>{KAFKA_VERSION}</version>" in pom
    assert compose["services"]["kafka"]["image"] == f"apache/kafka:{KAFKA_VERSION}"
