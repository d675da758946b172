"""``spark.catalog.oauth2``: a REST catalog's OAuth2 client credentials. What ``kstage
validate`` refuses (file, line, key), the Iceberg catalog properties it becomes on Spark,
and the client secret kept out of every output (validate, repr, the refusals)."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.sinks.spark.catalog import catalog_conf
from settings import SparkSettings
from tests.unit.test_iceberg_settings import config, jars, validate

__all__ = ["jars"]  # the fixture, used by name

SECRET = "idp-secret-value-0123"  # noqa: S105 - a test value, looked for in output
REST = "catalog:\n  type: rest\n  uri: 'https://catalog.example.com/api/catalog'\n"
OAUTH = ("  oauth2:\n    token_url: 'https://idp.example.com/oauth2/token'\n"
         "    client_id: kstage\n    client_secret: '${IDP_SECRET}'\n    scope: catalog\n")


@pytest.mark.parametrize(("extra", "key", "line", "why"), [
    ("    token_url: 'ftp://idp/token'\n", "spark.catalog.oauth2.token_url", 10,
     "is not an http:// or https:// URL"),
    ("    token_url: 'http://idp.example.com/token'\n", "spark.catalog.oauth2.token_url", 10,
     "the client secret would travel in clear text: use https://"),
    ("    client_id: ''\n", "spark.catalog.oauth2.client_id", 10, "at least 1 character"),
    ("    scope: ''\n", "spark.catalog.oauth2.scope", 10, "at least 1 character"),
    ("    audience: 3\n", "spark.catalog.oauth2.audience", 11, "a valid string"),
    ("    token_ttl: 5\n", "spark.catalog.oauth2.token_ttl", 11, "Extra inputs"),
])
def test_a_bad_oauth2_setting_is_named_with_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], jars: Path,
        monkeypatch: pytest.MonkeyPatch, extra: str, key: str, line: int, why: str) -> None:
    monkeypatch.setenv("IDP_SECRET", SECRET)
    lines = OAUTH.splitlines(keepends=True)
    field = extra.split(":")[0]  # the field replaced (moved to the last line)
    oauth = "".join(x for x in lines if not x.startswith(field + ":")) + extra
    path = config(tmp_path, REST + oauth)
    code, output = validate(path, capsys)
    assert code == 2, output
    assert f"{path}: {key} (line {line}): " in output, output
    assert why in output, output
    assert SECRET not in output


@pytest.mark.parametrize(("spark", "key", "line", "why"), [
    ("catalog:\n  oauth2: {token_url: 'https://idp/t', client_id: k, client_secret: s}\n",
     "spark.catalog", 3, "oauth2 is a rest catalog's login: set type: rest"),
    (REST + "  properties: {credential: 'k:s'}\n" + OAUTH, "spark.catalog", 3,
     "spark.catalog.properties sets credential, which spark.catalog.oauth2 sets"),
    (REST + "  oauth2: {token_url: 'https://idp/t', client_id: k}\n",
     "spark.catalog.oauth2.client_secret", 6, "Field required"),
])
def test_oauth2_on_a_wrong_catalog_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], jars: Path,
        monkeypatch: pytest.MonkeyPatch, spark: str, key: str, line: int, why: str) -> None:
    monkeypatch.setenv("IDP_SECRET", SECRET)
    path = config(tmp_path, spark)
    code, output = validate(path, capsys)
    assert code == 2, output
    assert f"{path}: {key} (line {line}): " in output, output
    assert why in output, output
    assert SECRET not in output


def test_a_good_oauth2_section_validates_without_printing_its_secret(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], jars: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IDP_SECRET", SECRET)
    code, output = validate(config(tmp_path, REST + OAUTH), capsys)
    assert code == 0, output
    assert SECRET not in output


def test_oauth2_becomes_icebergs_rest_catalog_properties() -> None:
    settings = SparkSettings.model_validate({"catalog": {
        "type": "rest", "uri": "https://catalog.example.com/api",
        "oauth2": {"token_url": "https://idp.example.com/token", "client_id": "kstage",
                   "client_secret": SECRET, "scope": "catalog lake",
                   "audience": "https://catalog.example.com"}}})
    conf = catalog_conf(settings)
    prefix = "spark.sql.catalog.kstage"
    assert conf[f"{prefix}.credential"] == f"kstage:{SECRET}"
    assert conf[f"{prefix}.oauth2-server-uri"] == "https://idp.example.com/token"
    assert conf[f"{prefix}.scope"] == "catalog lake"
    assert conf[f"{prefix}.audience"] == "https://catalog.example.com"
    assert conf[f"{prefix}.token-refresh-enabled"] == "true"
    # A refresh is a new client-credentials grant: most identity providers have no
    # token exchange (RFC 8693), which Iceberg would try first.
    assert conf[f"{prefix}.token-exchange-enabled"] == "false"
    assert SECRET not in repr(settings) and SECRET not in str(settings)
    assert SECRET not in repr(settings.catalog.oauth2)


def test_loopback_http_needs_the_insecure_flag() -> None:
    oauth = {"token_url": "http://127.0.0.1:8080/token", "client_id": "k",
             "client_secret": SECRET, "allow_insecure_http": True}
    settings = SparkSettings.model_validate({"catalog": {
        "type": "rest", "uri": "http://127.0.0.1:19120/iceberg", "oauth2": oauth}})
    assert settings.catalog.oauth2 is not None
    assert settings.catalog.oauth2.scope == "catalog"  # Iceberg's own default
