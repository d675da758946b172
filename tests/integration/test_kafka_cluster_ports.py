"""The suite's Apache Kafka clusters start although another process takes a node's port
between the pick and the node's bind (tests/apache_kafka.py): a fresh-clone run lost a
3-node cluster's six tests to "Address already in use" on a controller port."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.apache_kafka import KafkaCluster


@pytest.mark.apache_kafka
@pytest.mark.slow
@pytest.mark.timeout(400)  # two Kafka node starts on a loaded 2-core machine
def test_a_port_taken_before_the_node_binds_it_is_replaced_and_the_cluster_starts(
        tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path / "kafka", 1)
    node = cluster.node(1)
    with socket.socket() as squatter:  # another process took the controller's port
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        squatter.bind(("127.0.0.1", node.controller_port))
        squatter.listen()
        taken = node.controller_port
        with cluster:
            assert node.controller_port != taken
            assert node.running
            socket.create_connection(("127.0.0.1", node.port), timeout=5).close()
    log = node.log_path.read_text()
    assert f"failed to bind to 127.0.0.1:{taken}: Address already in use" in log
    assert log.count("===== start ") == 2
