"""``docker-compose.yml``: valid, scalable, supervised, and consistent with kstage's config.

The file is checked with ``docker-compose config`` (the Debian package ``docker-compose``,
installed by ``.ci/run``), which resolves it exactly as ``docker compose up`` would. Then
the kstage config it mounts is loaded with the container's environment, and every host it
names must be a service of the file. No Docker daemon is needed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from actors.master import resolve_processors
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


def test_the_stack_has_every_service(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"kafka", "schema-registry", "spark-master", "spark-worker",
                             "postgres", "kstage"}
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["schema-registry"]["image"].startswith("confluentinc/cp-schema-registry:")
    assert services["postgres"]["image"] == "postgres:16"
    for name, role in (("spark-master", "master.Master"), ("spark-worker", "worker.Worker")):
        assert services[name]["image"].startswith("apache/spark:")
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
    for name, service in compose["services"].items():
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        assert service.get("restart") in ("always", "unless-stopped", "on-failure"), \
            f"{name} has no restart policy"


def test_kstage_is_scalable(compose: dict[str, Any]) -> None:
    kstage = compose["services"]["kstage"]
    assert "container_name" not in kstage  # --scale needs generated names
    assert "ports" not in kstage  # a fixed host port would clash between replicas
    assert kstage["depends_on"] == {"kafka": {"condition": "service_healthy"},
                                    "schema-registry": {"condition": "service_healthy"}}


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
    assert hosts == {"kafka", "schema-registry"}
    assert hosts <= set(compose["services"]), hosts - set(compose["services"])
    # the bootstrap port is the listener Kafka advertises on the compose network
    assert settings.kafka.bootstrap == "kafka:29092"
    # every sink and dead-letter file is under the shared /data volume
    assert "/data" in mounts
    paths = [t.sink.path for g in settings.groups for t in g.topics]
    paths += [g.failure.dead_letter_path for g in settings.groups]
    assert paths and all(str(p).startswith("/data/") for p in paths), paths


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
