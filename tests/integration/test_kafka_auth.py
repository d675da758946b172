"""Authentication on a real broker: Apache Kafka with SASL/SCRAM-SHA-256 and -512 and
SASL/OAUTHBEARER over plaintext and TLS, and mutual TLS, directly on its listeners.

The broker (one KRaft node, the module's) has, besides its plaintext listener for the
test's own clients, ``SASLPLAIN`` (SASL_PLAINTEXT), ``SASLSSL`` (SASL_SSL) and ``MTLS``
(SSL, client certificates required) with a private CA (tests/tls_certs.py). SCRAM users
are created when the node is formatted; OAUTHBEARER tokens come from a small OpenID
Connect provider on loopback (tests/oidc_server.py) and the broker validates them against
its JWKS (``OAuthBearerValidatorCallbackHandler``). ``connections.max.reauth.ms`` makes
the broker end a login's session after a few seconds (or at its token's expiry), as a
security-minded cluster does: aiokafka does not re-authenticate, so it logs in again on a
new connection, with the password or token it has then.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from service.broker import free_port
from tests.apache_kafka import KafkaCluster, Listener
from tests.kafkautil import (
    CHILD_PATH,
    FAST_GROUP,
    ROOT,
    KstageProcess,
    create_topic,
    produce,
    read_jsonl,
    unique,
    wait_readyz,
    wait_until,
)
from tests.oidc_server import AUDIENCE, ISSUER, OidcServer
from tests.tls_certs import Pki, make_pki

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.apache_kafka]

EVENTS = 20
USER, PASSWORD = "alice", "alice-scram-secret-1"  # test credentials
WRONG_PASSWORD = "not-" + "alices-password"  # split: not in a traceback line
CLIENT, CLIENT_SECRET = "kstage-client", "oidc-client-secret-7f3a"
WRONG_SECRET = "wrong-" + "oidc-secret"
REAUTH_MS = 5000  # a login's session on the broker (and at most a token's lifetime)
_OAUTH_HANDLER = "org.apache.kafka.common.security.oauthbearer"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


@dataclass
class SecuredKafka:
    kafka: KafkaCluster
    listeners: dict[str, Listener]
    pki: Pki
    idp: OidcServer

    @property
    def plaintext(self) -> str:
        return self.kafka.bootstrap

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.listeners[listener].port}"


def _keystore(pki: Pki, directory: Path) -> Path:
    """The broker's PEM keystore: its key as PKCS#8 (what Kafka reads) and certificate."""
    key = load_pem_private_key(pki.server_key.read_bytes(), None)
    pkcs8 = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
    path = directory / "server-keystore.pem"
    path.write_bytes(pkcs8 + pki.server_cert.read_bytes())
    return path


def _properties(pki: Pki, keystore: Path, idp: OidcServer) -> dict[str, str]:
    props = {
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "sasl.oauthbearer.jwks.endpoint.url": idp.jwks_url,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "sasl.oauthbearer.clock.skew.seconds": "0",  # an expired token is refused at once
        "connections.max.reauth.ms": str(REAUTH_MS),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "listener.name.mtls.ssl.client.auth": "required",
    }
    for name in ("saslplain", "saslssl"):
        prefix = f"listener.name.{name}"
        props |= {
            f"{prefix}.scram-sha-256.sasl.jaas.config": _SCRAM_MODULE,
            f"{prefix}.scram-sha-512.sasl.jaas.config": _SCRAM_MODULE,
            f"{prefix}.oauthbearer.sasl.jaas.config":
                f"{_OAUTH_HANDLER}.OAuthBearerLoginModule required;",
            f"{prefix}.oauthbearer.sasl.server.callback.handler.class":
                f"{_OAUTH_HANDLER}.OAuthBearerValidatorCallbackHandler",
        }
    return props


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    directory = tmp_path_factory.mktemp("secured-kafka")
    pki = make_pki(directory)
    listeners = {"saslplain": Listener("SASLPLAIN", "SASL_PLAINTEXT"),
                 "saslssl": Listener("SASLSSL", "SASL_SSL"),
                 "mtls": Listener("MTLS", "SSL")}
    scram = f"[name={USER},password={PASSWORD}]"
    with OidcServer({CLIENT: CLIENT_SECRET}) as idp:
        kafka = KafkaCluster(
            directory / "kafka", 1, properties=_properties(pki, _keystore(pki, directory), idp),
            listeners=lambda _: list(listeners.values()),
            format_args=["--add-scram", f"SCRAM-SHA-256={scram}",
                         "--add-scram", f"SCRAM-SHA-512={scram}"],
            jvm_options=["-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls="
                         f"{idp.jwks_url},{idp.token_url}"])
        try:
            kafka.start()
        except Exception as exc:  # noqa: BLE001 - a broker that cannot start fails loudly
            pytest.fail(f"the secured Apache Kafka did not start: {exc}", pytrace=False)
        try:
            yield SecuredKafka(kafka, listeners, pki, idp)
        finally:
            kafka.kill()


def _sasl(mechanism: str, protocol: str, secure: SecuredKafka) -> dict[str, Any]:
    config: dict[str, Any] = {"security.protocol": protocol, "sasl.mechanism": mechanism}
    if mechanism == "OAUTHBEARER":
        config |= {"sasl.oauthbearer.method": "oidc",
                   "sasl.oauthbearer.token.endpoint.url": secure.idp.token_url,
                   # the test's IdP is http:// on loopback: allowed only when said
                   "sasl.oauthbearer.allow.insecure.token.endpoint": True,
                   "sasl.oauthbearer.client.id": CLIENT,
                   "sasl.oauthbearer.client.secret": "${OIDC_SECRET}",
                   "sasl.oauthbearer.scope": "kafka"}
    else:
        config |= {"sasl.username": USER, "sasl.password": "${KAFKA_PASSWORD}"}
    if protocol == "SASL_SSL":
        config["ssl.ca.location"] = str(secure.pki.ca)
    return config


def _case(scenario: str, secure: SecuredKafka) -> tuple[str, dict[str, Any]]:
    """scenario -> (listener, consumer_config)."""
    pki = secure.pki
    if scenario == "mtls":
        return "mtls", {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca),
                        "ssl.certificate.location": str(pki.client_cert),
                        "ssl.key.location": str(pki.client_key)}
    mechanism, _, transport = scenario.rpartition("-")
    mechanism = {"scram256": "SCRAM-SHA-256", "scram512": "SCRAM-SHA-512",
                 "oauth": "OAUTHBEARER"}[mechanism]
    if transport == "plain":
        return "saslplain", _sasl(mechanism, "SASL_PLAINTEXT", secure)
    return "saslssl", _sasl(mechanism, "SASL_SSL", secure)


def _config(tmp_path: Path, bootstrap: str, topic: str, consumer_config: dict[str, Any],
            port: int = 0) -> Path:
    group = unique("g-auth")
    cfg = {
        "name": group,
        "kafka": {"bootstrap": bootstrap, "consumer_config": consumer_config},
        "service": {"http_port": port, "http_host": "127.0.0.1"},
        "supervisor": {"shutdown_grace_s": 10, "abort_grace_s": 5, "max_restarts": 3,
                       "restart_window_s": 60, "min_backoff_s": 0.1, "max_backoff_s": 1},
        "groups": [{
            "group_id": group, **FAST_GROUP,
            "failure": {"dead_letter_path": str(tmp_path / "dead.jsonl")},
            "topics": [{"topic": topic, "processor": "json_rows",
                        "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}],
        }],
    }
    path = tmp_path / "kstage.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


ENV = {"KAFKA_PASSWORD": PASSWORD, "OIDC_SECRET": CLIENT_SECRET}
SCENARIOS = ["scram256-plain", "scram512-plain", "scram256-tls", "scram512-tls", "mtls",
             "oauth-plain", "oauth-tls"]


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_run_drains_over_each_login(scenario: str, secured: SecuredKafka,
                                          tmp_path: Path, kstage: type[KstageProcess]
                                          ) -> None:
    listener, consumer_config = _case(scenario, secured)
    topic = unique(scenario)
    await create_topic(secured.plaintext, topic)
    await produce(secured.plaintext, topic, ({"i": i} for i in range(EVENTS)))
    issued = secured.idp.issued
    cfg = _config(tmp_path, secured.bootstrap(listener), topic, consumer_config)
    proc = kstage(cfg, "--drain", env=ENV)
    assert await proc.wait(timeout=120) == 0, proc.output()
    assert sorted(r["i"] for r in read_jsonl(tmp_path / "out.jsonl")) == list(range(EVENTS))
    output = proc.output()
    assert PASSWORD not in output and CLIENT_SECRET not in output
    if scenario.startswith("oauth"):
        assert secured.idp.issued > issued, "no token was fetched"


@pytest.mark.parametrize(("scenario", "named", "reason"), [
    ("scram512-plain", "kafka.consumer_config['sasl.password']", "refused the SASL login"),
    ("scram256-tls", "kafka.consumer_config['sasl.password']", "refused the SASL login"),
    ("oauth-tls", "kafka.consumer_config['sasl.oauthbearer.client.secret']",
     "refused client 'kstage-client': HTTP 401 invalid_client"),
    ("mtls", "kafka.consumer_config['ssl.certificate.location']", "refused the TLS"),
])
async def test_a_wrong_credential_at_start_exits_2_naming_the_setting(
        scenario: str, named: str, reason: str, secured: SecuredKafka, tmp_path: Path,
        kstage: type[KstageProcess]) -> None:
    listener, consumer_config = _case(scenario, secured)
    if scenario == "mtls":
        consumer_config |= {"ssl.certificate.location": str(secured.pki.expired_client_cert),
                            "ssl.key.location": str(secured.pki.expired_client_key)}
    topic = unique("refused")
    await create_topic(secured.plaintext, topic)
    cfg = _config(tmp_path, secured.bootstrap(listener), topic, consumer_config)
    proc = kstage(cfg, "--drain", env={"KAFKA_PASSWORD": WRONG_PASSWORD,
                                       "OIDC_SECRET": WRONG_SECRET})
    code = await proc.wait(timeout=120)
    output = proc.output()
    assert code == 2, output
    assert named in output and reason in output, output
    assert "restarting in" not in output, output  # not retried: the same settings fail
    assert WRONG_PASSWORD not in output and WRONG_SECRET not in output, output


def _base(port: int) -> str:
    """The status server's URL of the kstage listening on ``port``."""
    return f"http://127.0.0.1:{port}"


class Feed:
    """Produces ``{"i": n}`` through the plaintext listener, ``count`` at a time."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic, self.sent = bootstrap, topic, 0

    async def send(self, count: int) -> None:
        await produce(self.bootstrap, self.topic,
                      ({"i": i} for i in range(self.sent, self.sent + count)))
        self.sent += count


async def _running(scenario: str, secured: SecuredKafka, tmp_path: Path,
                   kstage: type[KstageProcess]) -> tuple[KstageProcess, int, Feed]:
    """``kstage run`` (not draining) over ``scenario``'s login on a fresh topic, assigned
    its partition; the process, its status port and the topic's feed."""
    listener, consumer_config = _case(scenario, secured)
    topic = unique(scenario)
    await create_topic(secured.plaintext, topic)
    port = free_port()
    proc = kstage(_config(tmp_path, secured.bootstrap(listener), topic, consumer_config,
                          port), env=ENV)
    await proc.wait_for_log("assigned partitions [0]", timeout=60)
    return proc, port, Feed(secured.plaintext, topic)


async def test_oauthbearer_tokens_are_refreshed_before_they_expire(
        secured: SecuredKafka, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    """Tokens live 6 s; the broker ends a session at its token's expiry (and after
    ``REAUTH_MS``). Over 25 s of consuming, every new connection logs in with a token
    that is not expired: nothing is refused, everything lands."""
    secured.idp.ttl_s = 6
    try:
        issued = secured.idp.issued
        proc, port, feed = await _running("oauth-tls", secured, tmp_path, kstage)
        started = time.monotonic()
        while time.monotonic() - started < 25:
            await feed.send(10)
            await asyncio.sleep(1)
        await wait_until(lambda: len(read_jsonl(tmp_path / "out.jsonl")) >= feed.sent, 60,
                         "every row")
        assert {r["i"] for r in read_jsonl(tmp_path / "out.jsonl")} == set(range(feed.sent))
        assert secured.idp.issued - issued >= 4, "tokens were not refreshed"
        output = proc.output()
        # Every login succeeded at once: the group never went out of reach.
        assert "lost its group membership" not in output, output
        assert "refused the OAUTHBEARER token" not in output, output
        # Ready once caught up (a single read could land on a moment when a token
        # refresh of a loaded machine was late: wait for the answer, naming the last).
        await wait_readyz(_base(port), proc, 200, timeout=60)
        proc.signal(signal.SIGTERM)
        assert await proc.wait(60) == 0, output
    finally:
        secured.idp.ttl_s = 300


async def test_token_endpoint_down_mid_run_is_retried_and_named(
        secured: SecuredKafka, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    secured.idp.ttl_s = 6
    try:
        proc, port, feed = await _running("oauth-plain", secured, tmp_path, kstage)
        await feed.send(10)
        await wait_until(lambda: len(read_jsonl(tmp_path / "out.jsonl")) == 10, 60, "rows")
        secured.idp.down = True
        reasons = (await wait_readyz(_base(port), proc, 503, "no OAUTHBEARER token",
                                     timeout=60))["reasons"]
        assert secured.idp.token_url in " ".join(reasons), reasons
        assert "HTTP 503" in " ".join(reasons), reasons
        await feed.send(10)  # produced while kstage has no token
        unavailable = secured.idp.unavailable
        await asyncio.sleep(3)
        # Not a request per connection attempt (78 in these 3 s before the backoff).
        assert secured.idp.unavailable - unavailable <= 6
        assert proc.proc.poll() is None, proc.output()
        secured.idp.down = False
        await wait_readyz(_base(port), proc, 200, timeout=60)
        await wait_until(lambda: {r["i"] for r in read_jsonl(tmp_path / "out.jsonl")}
                         == set(range(20)), 60, "every row after the endpoint is back")
        assert not read_jsonl(tmp_path / "dead.jsonl")
        assert CLIENT_SECRET not in proc.output()
        proc.signal(signal.SIGTERM)
        assert await proc.wait(60) == 0, proc.output()
    finally:
        secured.idp.ttl_s, secured.idp.down = 300, False


def _set_password(bootstrap: str, password: str) -> None:
    """Alice's SCRAM-SHA-512 password, changed through the broker (KIP-554)."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    upsert = UserScramCredentialUpsertion(
        USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)


async def test_a_password_rotated_mid_run_is_retried_and_named(
        secured: SecuredKafka, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    """Alice's password changes on the broker while kstage runs with the old one: its
    next login (the broker ends sessions after ``REAUTH_MS``) is refused. kstage keeps
    running, /readyz names the refused login, nothing is lost; once the password kstage
    has works again, everything lands."""
    proc, port, feed = await _running("scram512-plain", secured, tmp_path, kstage)
    try:
        await feed.send(10)
        await wait_until(lambda: len(read_jsonl(tmp_path / "out.jsonl")) == 10, 60, "rows")
        await asyncio.to_thread(_set_password, secured.plaintext, "rotated-" + PASSWORD)
        reasons = (await wait_readyz(_base(port), proc, 503, "refused the SASL login",
                                     timeout=90))["reasons"]
        assert f"user {USER!r}" in " ".join(reasons) and "sasl.password" in " ".join(reasons)
        await feed.send(10)
        await asyncio.sleep(2)
        assert proc.proc.poll() is None, proc.output()
    finally:
        await asyncio.to_thread(_set_password, secured.plaintext, PASSWORD)
    await wait_readyz(_base(port), proc, 200, timeout=90)
    await wait_until(lambda: {r["i"] for r in read_jsonl(tmp_path / "out.jsonl")}
                     == set(range(20)), 60, "every row once the password works again")
    output = proc.output()
    assert PASSWORD not in output and not read_jsonl(tmp_path / "dead.jsonl")
    proc.signal(signal.SIGTERM)
    assert await proc.wait(60) == 0, output


EXAMPLE = ROOT / "examples" / "kstage-example-token-provider"
_FETCH = """\
import base64, sys, urllib.request
url, client, secret = sys.argv[1:]
request = urllib.request.Request(url, data=b"grant_type=client_credentials", headers={
    "Authorization": "Basic " + base64.b64encode(f"{client}:{secret}".encode()).decode()})
print(urllib.request.urlopen(request, timeout=10).read().decode())
"""


def _plugin_path(directory: Path) -> str:
    """PYTHONPATH of a kstage process that finds the example token provider through its
    entry point without installing it: the package and a dist-info of its own."""
    info = directory / "kstage_example_token_provider-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kstage-example-token-"
                                   "provider\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[kstage.token_providers]\n"
        "exec_token = kstage_example_token_provider:ExecTokenProvider\n")
    return os.pathsep.join([CHILD_PATH, str(directory), str(EXAMPLE)])


async def test_a_token_provider_plugin_logs_in(secured: SecuredKafka, tmp_path: Path,
                                              kstage: type[KstageProcess]) -> None:
    """The example plugin (examples/kstage-example-token-provider), found through its
    entry point: its command fetches the token, the broker validates it."""
    script = tmp_path / "fetch_token.py"
    script.write_text(_FETCH)
    command = shlex.join([sys.executable, str(script), secured.idp.token_url, CLIENT,
                          CLIENT_SECRET])
    consumer_config = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                       "ssl.ca.location": str(secured.pki.ca),
                       "sasl.oauthbearer.method": "exec_token",
                       "sasl.oauthbearer.command": command}
    topic = unique("plugin")
    await create_topic(secured.plaintext, topic)
    await produce(secured.plaintext, topic, ({"i": i} for i in range(EVENTS)))
    issued = secured.idp.issued
    cfg = _config(tmp_path, secured.bootstrap("saslssl"), topic, consumer_config)
    proc = kstage(cfg, "--drain", env={"PYTHONPATH": _plugin_path(tmp_path / "site")})
    assert await proc.wait(timeout=120) == 0, proc.output()
    assert sorted(r["i"] for r in read_jsonl(tmp_path / "out.jsonl")) == list(range(EVENTS))
    assert secured.idp.issued > issued, "the plugin's command fetched no token"
