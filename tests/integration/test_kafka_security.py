"""``kstage run --drain`` over TLS, mutual TLS and SASL (PLAIN, SCRAM-SHA-256/512) over
TLS, and the clear, non-looping failures of a wrong CA, an expired certificate and a
wrong password.

What is real and what is not: the broker is the real embedded one (Tansu), kstage's
aiokafka client and Python's TLS are real, the certificates are real X.509 made by a
private CA. Tansu's own ``--cert`` listener does not complete a TLS handshake here
(measured again for this test: "early eof", with ``--cert`` holding certificate and key;
``--cert`` with ``--key`` is refused by its argument parser), and its
``--authentication`` offers no PLAIN ("NoSharedMechanism") and no way to create SCRAM
users. So TLS is terminated by a proxy on loopback (tests/kafka_tls_proxy.py) with the
broker advertising the proxy's address, and the SASL server side is that proxy's small
implementation of Kafka's SaslHandshake/SaslAuthenticate with PLAIN and SCRAM (RFC 5802
/ 7677), a faithful fake because no real SASL server runs here.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.helpers import create_ssl_context

from service.broker import broker_binary, free_port
from tests.kafka_tls_proxy import KafkaTlsProxy, ProxyMode
from tests.kafkautil import FAST_GROUP, read_jsonl, unique
from tests.tls_certs import Pki, make_pki

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

EVENTS = 20
USERS = {"alice": "correct horse battery staple"}
WRONG_PASSWORD = "Tr0ub4dor&3-wrong"  # noqa: S105 - a test credential
SCENARIOS = ("tls", "mtls", "plain", "scram256", "scram512", "wrong_ca", "expired_server",
             "expired_client", "wrong_password")


@dataclass
class SecureBroker:
    proxy: KafkaTlsProxy
    pki: Pki
    topics: dict[str, str]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.proxy.port}"

    def server_context(self, *, expired: bool = False, client_certs: bool = False
                       ) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        if expired:
            context.load_cert_chain(self.pki.expired_cert, self.pki.expired_key)
        else:
            context.load_cert_chain(self.pki.server_cert, self.pki.server_key)
        if client_certs:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(self.pki.ca)
        return context


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def _fill(bootstrap: str, pki: Pki, topics: list[str]) -> None:
    context = create_ssl_context(cafile=str(pki.ca))
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, security_protocol="SSL",
                                ssl_context=context)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, 1, 1) for t in topics])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, security_protocol="SSL",
                                ssl_context=context)
    await producer.start()
    try:
        for topic in topics:
            for i in range(EVENTS):
                await producer.send(topic, json.dumps({"i": i, "topic": topic}).encode())
        await producer.flush()
    finally:
        await producer.stop()


@pytest.fixture(scope="module")
def secure_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    """A dedicated broker advertising the TLS proxy in front of it; one filled topic per
    scenario (produced through the proxy over TLS)."""
    broker_port, proxy_port = free_port(), free_port()
    log = tmp_path_factory.mktemp("secure-broker") / "broker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(  # fixed binary, no shell
            [broker_binary(), "broker", "--listener-url", f"tcp://127.0.0.1:{broker_port}",
             "--advertised-listener-url", f"tcp://127.0.0.1:{proxy_port}",
             "--storage-engine", "memory://tansu/"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    proxy = KafkaTlsProxy(broker_port, proxy_port)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", broker_port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail(f"the secure test broker did not start; see {log}")
                time.sleep(0.02)
        proxy.start()
        secure = SecureBroker(proxy, pki, {s: unique(s) for s in SCENARIOS})
        proxy.configure(ProxyMode(ssl_context=secure.server_context()))
        asyncio.run(_fill(secure.bootstrap, pki, list(secure.topics.values())))
        yield secure
    finally:
        proxy.stop()
        proc.kill()
        proc.wait(10)


def _config(tmp_path: Path, secure: SecureBroker, scenario: str,
            consumer_config: dict[str, Any]) -> Path:
    group = unique(f"g-{scenario}")
    cfg = {
        "name": group,
        "kafka": {"bootstrap": secure.bootstrap, "consumer_config": consumer_config},
        "service": {"http_port": 0},
        "supervisor": {"shutdown_grace_s": 10, "abort_grace_s": 5, "max_restarts": 3,
                       "restart_window_s": 60, "min_backoff_s": 0.1, "max_backoff_s": 1},
        "groups": [{
            "group_id": group, **FAST_GROUP,
            "failure": {"dead_letter_path": str(tmp_path / "dead.jsonl")},
            "topics": [{"topic": secure.topics[scenario], "processor": "json_rows",
                        "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}],
        }],
    }
    path = tmp_path / "kstage.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _sasl(mechanism: str, protocol: str = "SASL_SSL") -> dict[str, Any]:
    return {"security.protocol": protocol,
            "sasl.mechanism": mechanism, "sasl.username": "alice",
            "sasl.password": "${KAFKA_PASSWORD}"}


def _cases(pki: Pki) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """scenario -> (proxy mode keywords, consumer_config)."""
    ca = {"ssl.ca.location": str(pki.ca)}
    client = {"ssl.certificate.location": str(pki.client_cert),
              "ssl.key.location": str(pki.client_key)}
    sasl = {"mechanisms": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), "users": USERS}
    return {
        "tls": ({}, {"security.protocol": "SSL", **ca}),
        "mtls": ({"client_certs": True}, {"security.protocol": "SSL", **ca, **client}),
        # lowercase on purpose: normalised (defect 4; it crashed six times before)
        "plain": (sasl, {**_sasl("PLAIN", "sasl_ssl"), **ca}),
        "scram256": (sasl, {**_sasl("scram-sha-256"), **ca}),
        "scram512": (sasl, {**_sasl("SCRAM-SHA-512"), **ca}),
    }


def _use(secure: SecureBroker, *, client_certs: bool = False, expired: bool = False,
         mechanisms: tuple[str, ...] = (), users: dict[str, str] | None = None) -> None:
    secure.proxy.configure(ProxyMode(
        ssl_context=secure.server_context(expired=expired, client_certs=client_certs),
        mechanisms=mechanisms, users=users or {}))


@pytest.mark.parametrize("scenario", ["tls", "mtls", "plain", "scram256", "scram512"])
async def test_run_drains_over_tls_and_sasl(scenario, secure_broker, pki, tmp_path,
                                            kstage) -> None:
    mode, consumer_config = _cases(pki)[scenario]
    _use(secure_broker, **mode)
    cfg = _config(tmp_path, secure_broker, scenario, consumer_config)
    proc = kstage(cfg, "--drain", env={"KAFKA_PASSWORD": USERS["alice"]})
    assert await proc.wait(timeout=120) == 0, proc.output()
    rows = read_jsonl(tmp_path / "out.jsonl")
    assert sorted(r["i"] for r in rows) == list(range(EVENTS)), proc.output()
    if mode.get("mechanisms"):
        assert secure_broker.proxy.logins > 0 and secure_broker.proxy.failed_logins == 0
    assert USERS["alice"] not in proc.output()


@pytest.mark.parametrize(("scenario", "named", "reason"), [
    ("wrong_ca", "kafka.consumer_config['ssl.ca.location']", "unable to get local issuer"),
    ("expired_server", "kafka.consumer_config['ssl.ca.location']", "certificate has expired"),
    ("expired_client", "kafka.consumer_config['ssl.certificate.location']",
     "CERTIFICATE_EXPIRED"),
    ("wrong_password", "kafka.consumer_config['sasl.password']", "invalid credentials"),
])
async def test_refused_security_is_a_clear_config_error(scenario, named, reason,
                                                        secure_broker, pki, tmp_path,
                                                        kstage) -> None:
    ca = {"ssl.ca.location": str(pki.ca)}
    if scenario == "wrong_ca":
        _use(secure_broker)
        consumer_config = {"security.protocol": "SSL", "ssl.ca.location": str(pki.other_ca)}
    elif scenario == "expired_server":
        _use(secure_broker, expired=True)
        consumer_config = {"security.protocol": "SSL", **ca}
    elif scenario == "expired_client":
        _use(secure_broker, client_certs=True)
        consumer_config = {"security.protocol": "SSL", **ca,
                           "ssl.certificate.location": str(pki.expired_client_cert),
                           "ssl.key.location": str(pki.expired_client_key)}
    else:
        _use(secure_broker, mechanisms=("SCRAM-SHA-256",), users=USERS)
        consumer_config = {**_sasl("SCRAM-SHA-256"), **ca}
    cfg = _config(tmp_path, secure_broker, scenario, consumer_config)
    proc = kstage(cfg, "--drain", env={"KAFKA_PASSWORD": WRONG_PASSWORD})
    code = await proc.wait(timeout=120)
    output = proc.output()
    assert code == 2, output  # a configuration error, like `kstage validate`
    assert named in output and reason in output, output
    assert "restarting in" not in output, output  # no crash loop: not retried
    assert not read_jsonl(tmp_path / "out.jsonl")
    assert WRONG_PASSWORD not in output
    if scenario == "wrong_password":  # aiokafka's own attempt and the probe: bounded
        assert 1 <= secure_broker.proxy.failed_logins <= 2, secure_broker.proxy.failed_logins
