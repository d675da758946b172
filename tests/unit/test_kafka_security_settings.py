"""Kafka security settings that cannot work are refused by ``kstage validate`` and at
``kstage run`` start (exit 2, key and line); the protocol's and mechanism's case is
normalised (issue 12, defect 4)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from aiokafka.errors import KafkaConnectionError
from pydantic import SecretStr

from actors.kafka import build_consumer
from service.broker import free_port
from service.cli import main
from settings import load_settings, secrets
from settings.errors import ConfigValidationError


def config(tmp_path: Path, consumer_config: dict[str, object]) -> Path:
    path = tmp_path / "kstage.yml"
    path.write_text(yaml.safe_dump({
        "name": "g", "kafka": {"bootstrap": "127.0.0.1:9", "consumer_config": consumer_config},
        "groups": [{"topics": [{"topic": "t", "processor": "log"}]}]}, sort_keys=False))
    return path


def line_of(path: Path, key: str) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1)
                if text.strip().startswith(f"{key}:"))


async def test_lowercase_protocol_and_mechanism_are_normalised(tmp_path) -> None:
    path = config(tmp_path, {"security.protocol": "sasl_ssl", "sasl.mechanism": "scram-sha-512",
                             "sasl.username": "u", "sasl.password": "p"})
    settings = load_settings(path, {})
    assert settings.kafka.consumer_config["security.protocol"] == "SASL_SSL"
    assert settings.kafka.consumer_config["sasl.mechanism"] == "SCRAM-SHA-512"
    (group,) = settings.groups
    consumer = build_consumer(settings, group, "127.0.0.1:9", "t")  # aiokafka accepts it
    try:
        assert consumer._client._security_protocol == "SASL_SSL"
    finally:
        await consumer.stop()
    assert main(["validate", "-c", str(path)]) == 0


@pytest.mark.parametrize(("consumer_config", "key", "text"), [
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism",
     "OAUTHBEARER needs sasl.oauthbearer.method: the token provider (oidc for OIDC client "
     "credentials, or a token provider plugin's name)"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u",
      "sasl.password": "p", "sasl.oauthbearer.scope": "kafka"}, "sasl.oauthbearer.scope",
     "is set but the SASL mechanism is SCRAM-SHA-256: set sasl.mechanism: OAUTHBEARER"),
    ({"security.protocol": "TLS"}, "security.protocol",
     "'TLS' is not a security protocol (one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"sasl.mechanism": "PLAIN", "sasl.username": "u"}, "sasl.username",
     "is set but security.protocol is PLAINTEXT (the default): no SASL login"),
    ({"security.protocol": "PLAINTEXT", "ssl.ca.location": "/etc/ca.pem"}, "ssl.ca.location",
     "is set but security.protocol is PLAINTEXT: the connection would not use TLS"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
      "sasl.username": "u"}, "security.protocol",
     "SASL_SSL with SASL mechanism SCRAM-SHA-256 needs sasl.password"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"},
     "ssl.ca.location", "cannot load the CA bundle /nonexistent/ca.pem"),
])
def test_settings_that_cannot_work_are_refused_with_key_and_line(
        tmp_path, capsys, consumer_config, key, text) -> None:
    path = config(tmp_path, consumer_config)
    expected = f"kafka.consumer_config['{key}'] (line {line_of(path, key)}): {text}"
    with pytest.raises(ConfigValidationError) as info:
        load_settings(path, {})
    assert expected in str(info.value)
    assert main(["validate", "-c", str(path)]) == 2
    assert expected in capsys.readouterr().err
    # and at run start: refused before anything starts, not a crash loop at run time
    assert main(["run", "-c", str(path)]) == 2
    assert expected in capsys.readouterr().err


@pytest.mark.parametrize(("consumer_config", "key", "text"), [
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "oauthbearer",
      "sasl.oauthbearer.method": "kerberos-iam"}, "sasl.oauthbearer.method",
     "unknown token provider 'kerberos-iam' (installed: "),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
      "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "kstage",
      "sasl.oauthbearer.client.secret": "s3cret-value",
      "sasl.oauthbearer.token.endpoint.url": "ftp://idp/token"},
     "sasl.oauthbearer.token.endpoint.url",
     "Value error, must be an http:// or https:// URL, got 'ftp://idp/token' (token "
     "provider 'oidc')"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
      "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "kstage",
      "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
     "sasl.oauthbearer.client.secret", "Field required (token provider 'oidc')"),
])
def test_token_provider_keys_are_checked_by_validate_and_run(
        tmp_path, capsys, consumer_config, key, text) -> None:
    """The provider's own keys are checked with the provider (actors.preflight), so
    validate and run name them; a missing key is named without a line."""
    path = config(tmp_path, consumer_config)
    where = f"line {line_of(path, key)}" if f"{key}:" in path.read_text() else ""
    assert main(["validate", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"kafka.consumer_config['{key}']" in err and text in err, err
    assert where in err
    assert "s3cret-value" not in err
    assert main(["run", "-c", str(path)]) == 2
    assert text in capsys.readouterr().err


def test_oauthbearer_with_oidc_validates_and_only_the_client_secret_is_a_secret(
        tmp_path, capsys) -> None:
    """The scope, the client id and the endpoint are shown as they are; a scope "kafka"
    once masked every "kafka" in kstage's messages. The client secret is never shown."""
    path = config(tmp_path, {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.scope": "kafka",
        "sasl.oauthbearer.client.id": "kstage-client",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example.com/oauth2/token",
        "sasl.oauthbearer.client.secret": 987654321})
    settings = load_settings(path, {})
    kafka = settings.kafka.consumer_config
    assert kafka["sasl.oauthbearer.scope"] == "kafka"
    assert kafka["sasl.oauthbearer.client.id"] == "kstage-client"
    assert isinstance(kafka["sasl.oauthbearer.client.secret"], SecretStr)
    assert secrets.secret_values(settings) >= {"987654321"}
    assert not {"kafka", "kstage-client"} & secrets.secret_values(settings)
    assert "kafka" in repr(settings.kafka) and "987654321" not in repr(settings.kafka)
    assert main(["validate", "-c", str(path)]) == 0
    assert "987654321" not in capsys.readouterr().out


@pytest.mark.parametrize(("name", "secret"), [
    ("sasl.oauthbearer.client.secret", True), ("sasl.oauthbearer.scope", False),
    ("sasl.oauthbearer.client.id", False), ("sasl.oauthbearer.token.endpoint.url", False),
    ("sasl.oauthbearer.method", False), ("sasl.oauthbearer.extensions", False),
    ("sasl.password", True), ("ssl.key.password", True), ("ssl.key.location", False),
    ("bearer_token", True), ("sasl.jaas.config", True), ("api_key", True),
])
def test_a_setting_is_a_secret_by_what_it_holds(name: str, secret: bool) -> None:
    assert secrets.secret_name(name) is secret


def test_a_refused_password_is_never_printed(tmp_path, capsys) -> None:
    path = config(tmp_path, {"security.protocol": "SSL", "sasl.mechanism": "PLAIN",
                             "sasl.username": "u", "sasl.password": 987654321})
    assert main(["validate", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert "kafka.consumer_config['sasl.password']" in err and "987654321" not in err


async def test_an_unreachable_broker_is_not_a_security_error(tmp_path) -> None:
    """Nothing listens: aiokafka's own (retriable) error, not KafkaSecurityError."""
    bootstrap = f"127.0.0.1:{free_port()}"
    path = config(tmp_path, {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                             "sasl.username": "u", "sasl.password": "p"})
    settings = load_settings(path, {})
    consumer = build_consumer(settings, settings.groups[0], bootstrap, "t")
    with pytest.raises(KafkaConnectionError):  # KafkaSecurityError is no KafkaError
        await consumer.start()


OIDC = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "kstage",
        "sasl.oauthbearer.client.secret": "s3cret-value"}
INSECURE = "sasl.oauthbearer.allow.insecure.token.endpoint"


@pytest.mark.parametrize("url", ["http://idp.example.com/oauth2/token",
                                 "HTTP://idp.example.com/token", "http://127.0.0.1:8080/token",
                                 "http://localhost/token", "http://[::1]:80/token"])
def test_an_http_token_endpoint_is_refused_without_the_flag(tmp_path, capsys, url) -> None:
    """client_secret_basic sends the client secret in every token request: over http://
    anyone on the path reads it. Loopback too needs the flag (see docs/security.md)."""
    key = "sasl.oauthbearer.token.endpoint.url"
    path = config(tmp_path, {**OIDC, key: url})
    assert main(["validate", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"kafka.consumer_config['{key}'] (line {line_of(path, key)})" in err, err
    assert "sends the client secret in cleartext" in err and INSECURE in err
    assert "s3cret-value" not in err
    assert main(["run", "-c", str(path)]) == 2
    assert "sends the client secret in cleartext" in capsys.readouterr().err


@pytest.mark.parametrize("flag", [True, "true"])
def test_an_http_token_endpoint_is_accepted_with_the_flag_which_is_no_secret(
        tmp_path, capsys, flag) -> None:
    path = config(tmp_path, {**OIDC, INSECURE: flag,
                             "sasl.oauthbearer.token.endpoint.url": "http://127.0.0.1:1/t"})
    settings = load_settings(path, {})
    assert settings.kafka.consumer_config[INSECURE] in (True, "true")
    assert not isinstance(settings.kafka.consumer_config[INSECURE], SecretStr)
    assert "true" not in secrets.secret_values(settings)
    assert main(["validate", "-c", str(path)]) == 0
    capsys.readouterr()


def test_an_https_token_endpoint_needs_no_flag_and_the_flag_is_a_boolean(
        tmp_path, capsys) -> None:
    path = config(tmp_path, {**OIDC, "sasl.oauthbearer.token.endpoint.url": "https://idp/t"})
    assert main(["validate", "-c", str(path)]) == 0
    path = config(tmp_path, {**OIDC, INSECURE: "maybe",
                             "sasl.oauthbearer.token.endpoint.url": "http://idp/t"})
    assert main(["validate", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"kafka.consumer_config['{INSECURE}'] (line {line_of(path, INSECURE)})" in err, err
