"""Every masked setting, listed: what is declared secret is masked, nothing else.

A typed settings field is a secret when it is a ``SecretStr``; the loader, which sees
untyped YAML, tells secrets by name (:func:`settings.secrets.secret_name`), so the names
of typed fields must say exactly what their types declare. A new secret field, or a field
whose name the rule takes for a secret, changes the list below: it shows up in review.

Free-form mappings (``kafka.consumer_config``, ``spark.conf``, ``properties``, HTTP
``headers``, a processor's ``options``) have no types: their keys are secrets when they
name a credential, and a name that merely ends in ``key`` (a list of key columns) is not
one, so an error about a key column shows the column (issue 33).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel, SecretStr

from actors.oidc import OidcOptions
from actors.sinks import registry
from service.cli import main
from settings import load_settings, secrets
from settings.models import Settings

# Every typed setting that is a secret (masked everywhere): path, with the sink type or
# the token provider in front where the model is theirs.
MASKED = [
    "schema_registry.basic_auth.password",
    "schema_registry.bearer_token",
    "service.control_token",
    "spark.catalog.oauth2.client_secret",
    "spark.catalog.password",
    "spark.catalog.s3.access_key_id",
    "spark.catalog.s3.secret_access_key",
    "sasl.oauthbearer.client_secret",
    "sink[http].auth.basic.password",
    "sink[http].auth.bearer",
    "sink[jdbc].password",
]
# Every free-form mapping of the settings: its keys are secrets by name (below).
FREE_FORM = [
    "groups.topics.filter.exclude",
    "groups.topics.filter.include",
    "groups.topics.options",
    "groups.topics.route.tables",  # routing value -> table: no credential
    "kafka.consumer_config",
    "spark.catalog.properties",
    "spark.conf",
    "spark.staging_write_options",
    "sink[http].headers",
    "sink[jdbc].properties",
    "sink[spark].table_properties",  # a staging table's Iceberg properties
]


def _kinds(annotation: Any) -> Iterator[Any]:
    """The types a field's annotation may hold (unions, containers and Annotated opened);
    ``dict`` for a mapping of free-form keys."""
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        yield from _kinds(get_args(annotation)[0])
    elif origin in (typing.Union, types.UnionType, list, tuple, set, frozenset):
        for arg in get_args(annotation):
            if arg is not Ellipsis:
                yield from _kinds(arg)
    elif origin is dict:
        yield dict
    else:
        yield annotation


def _fields(model: type[BaseModel], path: tuple[str, ...] = ()
            ) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, kind) of every leaf field of ``model``, nested models opened."""
    for name, field in model.model_fields.items():
        for kind in _kinds(field.annotation):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                yield from _fields(kind, (*path, name))
            else:
                yield (*path, name), kind


def _roots() -> list[tuple[str, type[BaseModel]]]:
    """The settings models: the file's, the built-in token provider's options and every
    built-in sink type's own model."""
    roots: list[tuple[str, type[BaseModel]]] = [("", Settings), ("sasl.oauthbearer.",
                                                                 OidcOptions)]
    for name in registry.available():
        sink = registry.load(name)
        if sink.__module__.startswith("actors."):  # not the test plugins' sinks
            roots.append((f"sink[{name}].", sink.settings_model))
    return roots


def _typed() -> dict[str, tuple[bool, bool]]:
    """Every typed leaf setting: (declared a SecretStr, taken for a secret by name)."""
    found: dict[str, tuple[bool, bool]] = {}
    for prefix, model in _roots():
        for path, kind in _fields(model):
            if kind is dict:
                continue
            key = prefix + ".".join(path)
            declared = found.get(key, (False, False))[0] or kind is SecretStr
            found[key] = (declared, secrets.secret_path(path))
    return found


def test_every_masked_setting_is_listed() -> None:
    typed = _typed()
    assert sorted(k for k, (declared, _) in typed.items() if declared) == sorted(MASKED)
    free_form = sorted({prefix + ".".join(path) for prefix, model in _roots()
                        for path, kind in _fields(model) if kind is dict})
    assert free_form == sorted(FREE_FORM)


def test_the_names_of_typed_settings_say_what_their_types_declare() -> None:
    """The loader's rule (names) and the models' declarations (types) agree: no
    SecretStr the loader would take for plain text (a password of digits typed as a
    number, a value printed in a validate line before the model exists), and no plain
    setting masked for its name (``client_key``, a file's path)."""
    typed = _typed()
    assert [k for k, (declared, named) in typed.items() if declared != named] == []


@pytest.mark.parametrize(("key", "secret"), [
    # credentials: masked
    ("sasl.password", True), ("sasl.plain.password", True), ("ssl.key.password", True),
    ("sasl.jaas.config", True), ("sasl.oauthbearer.client.secret", True),
    ("spark.hadoop.fs.s3a.secret.key", True), ("spark.hadoop.fs.s3a.access.key", True),
    ("spark.hadoop.fs.azure.account.key", True), ("s3.secret-access-key", True),
    ("s3.access-key-id", True), ("gcs.oauth2.token", True), ("private_key", True),
    ("Authorization", True), ("X-Api-Key", True), ("Cookie", True), ("password", True),
    ("spark.hadoop.fs.s3a.encryption.key", True), ("fs.s3a.server-side-encryption.key", True),
    ("ssl.keystore.key", True), ("ssl.key.pem", True),
    # not credentials: shown as they are
    ("key", False), ("partition_key", False), ("primary_key", False), ("key_columns", False),
    ("client_key", False), ("ssl.key.location", False), ("Idempotency-Key", False),
    ("sasl.oauthbearer.client.id", False), ("sasl.oauthbearer.token.endpoint.url", False),
    ("sasl.oauthbearer.allow.insecure.token.endpoint", False), ("keys", False),
    ("spark.io.encryption.keySizeBits", False), ("ssl.keystore.location", False),
    ("ssl.keystore.type", False),
])
def test_a_free_form_key_is_a_secret_when_it_names_a_credential(key: str, secret: bool) -> None:
    assert secrets.secret_name(key) is secret


def test_values_under_key_settings_are_not_collected_as_secrets() -> None:
    data = {"options": {"key": ["customer_uuid"], "partition_key": "region_code"},
            "sink": {"tls": {"client_key": "/etc/kstage/client.pem"}}}
    assert secrets.secret_values(data) == set()
    assert secrets.masked(data["options"], ("options",)) == data["options"]


def test_an_error_about_a_key_column_shows_its_value(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A processor's list of key columns named ``key``, one of them missing: the error
    names the column. (It read ``key column(s) ********** are not among ...``.)"""
    path = tmp_path / "kstage.yml"
    path.write_text(yaml.safe_dump({
        "kafka": {"bootstrap": "127.0.0.1:9"},
        "groups": [{"group_id": "g", "topics": [
            {"topic": "customers", "processor": "test_keyed", "format": "json",
             "options": {"key": ["customer_uuid"], "columns": ["id", "email"]},
             "sink": {"type": "null"}}]}]}, sort_keys=False))
    settings = load_settings(path, {})
    assert "customer_uuid" not in secrets.secret_values(settings)
    assert "customer_uuid" in repr(settings.groups[0].topics[0])
    assert main(["validate", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert "key column(s) customer_uuid are not among the columns (id, email)" in err, err
    assert secrets.MASK not in err


def _documented() -> list[str]:
    """The secret settings docs/security.md's table lists, as :data:`MASKED` names them."""
    text = (Path(__file__).parents[2] / "docs" / "security.md").read_text()
    table = text[text.index("| Where | Secret settings |"):].split("\n\n", 1)[0]
    found: list[str] = []
    for row in table.splitlines()[2:]:
        where, names = (cell.strip() for cell in row.strip("|").split("|"))
        sink = where.removeprefix("sink ").strip("`")
        prefix = (f"sink[{sink}]." if where.startswith("sink ")
                  else "" if "oidc" in where else f"{where.strip('`')}.")
        for name in names.split(","):
            name = name.strip().strip("`")
            if "oidc" in where:  # the consumer_config key: the option's name
                name = "sasl.oauthbearer." + name.removeprefix("sasl.oauthbearer.").replace(
                    ".", "_")
            found.append(prefix + name)
    return found


def test_the_documented_secret_settings_are_the_masked_ones() -> None:
    assert sorted(_documented()) == sorted(MASKED)
