"""The suite's Apache Kafka nodes start with the class-data archive (tests/kafka_jvm.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.apache_kafka import NODE_OPTS, KafkaCluster
from tests.kafka_jvm import existing_archive, node_opts


@pytest.mark.apache_kafka
@pytest.mark.slow
@pytest.mark.timeout(400)  # a Kafka node on a loaded 2-core machine
def test_a_kafka_node_of_the_suite_loads_its_classes_from_the_archive(
        tmp_path: Path) -> None:
    archive = existing_archive()
    assert archive is not None, "the session made no archive (see its stderr)"
    assert os.environ[NODE_OPTS] == node_opts(archive)
    loads = tmp_path / "class-load.log"
    cluster = KafkaCluster(tmp_path / "kafka", 1,
                           jvm_options=(f"-Xlog:class+load=info:file={loads}",))
    node = cluster.node(1)
    with cluster:
        assert f"-XX:SharedArchiveFile={archive}" in Path(
            f"/proc/{node.pid}/cmdline").read_bytes().decode().split("\0")
    lines = loads.read_text().splitlines()
    shared = [line for line in lines if "source: shared objects file (top)" in line]
    assert len(shared) > len(lines) / 2, (len(shared), len(lines))
    assert any("kafka.server." in line for line in shared)
    assert "cds" not in node.log_path.read_text()
