"""Tests of actors.codecs.schema_registry and schema_files against the fake registry server.

The fake (tests/fake_registry.py) is a real HTTP server on 127.0.0.1, so these run the real
httpx transport; backoff waits go through an injected recorder instead of sleeping.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import socket
import ssl
import subprocess
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from actors.codecs.registries import registry_from_settings
from actors.codecs.schema_files import FileSchemaRegistry
from actors.codecs.schema_registry import (
    RegistryRequestError,
    RegistryUnavailable,
    SchemaNotFound,
    SchemaRegistryClient,
    SchemaVersion,
    normalize_schema_id,
)
from actors.codecs.schema_registry.transport import tls_verify
from processors.errors import PoisonMessage, ProcessorError
from settings import (
    ConfigValidationError,
    SchemaRegistrySettings,
    SchemaRegistryTls,
    Settings,
    load_settings,
)
from tests.fake_registry import CONTENT_TYPE, FakeRegistry

EVENT = '{"type": "record", "name": "Event", "fields": [{"name": "id", "type": "long"}]}'
EVENT_V2 = (
    '{"type": "record", "name": "Event", "fields": [{"name": "id", "type": "long"},'
    ' {"name": "note", "type": ["null", "string"], "default": null}]}'
)
HEX = "0123456789abcdef0123456789abcdef"
PASSWORD = "pa55-w0rd-s3cret"  # noqa: S105 - test value
TOKEN = "t0ken-s3cret"  # noqa: S105


class Sleeps:
    """Fake ``sleep``: records the waits, returns at once."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def registry() -> Iterator[FakeRegistry]:
    with FakeRegistry() as reg:
        yield reg


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def client(url: str, sleeps: Sleeps | None = None, **settings: Any) -> SchemaRegistryClient:
    return SchemaRegistryClient(
        SchemaRegistrySettings(url=url, **settings),
        sleep=sleeps or Sleeps(),
        jitter=lambda: 1.0,  # the full (capped) backoff: deterministic waits
    )


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# ------------------------------------------------------------------- lookups by id


async def test_get_schema_by_id_then_from_cache(registry: FakeRegistry) -> None:
    schema_id = registry.register("events-value", EVENT)
    async with client(registry.url) as c:
        first = await c.get_schema(schema_id)
        again = await c.get_schema(str(schema_id))  # same id as text: same cache entry

    assert json.loads(first) == json.loads(EVENT)
    assert again == first
    assert registry.count() == 1
    [request] = registry.requests
    assert (request.method, request.path) == ("GET", f"/schemas/ids/{schema_id}")
    assert CONTENT_TYPE in request.headers["accept"]


async def test_unknown_id_is_schema_not_found_with_the_registry_error(
    registry: FakeRegistry,
) -> None:
    async with client(registry.url) as c:
        with pytest.raises(SchemaNotFound) as info:
            await c.get_schema(42)

    err = info.value
    assert "schema id 42" in str(err) and "40403" in str(err) and "Schema not found" in str(err)
    assert (err.status_code, err.error_code, err.schema_id) == (404, 40403, 42)
    assert isinstance(err, PoisonMessage) and not err.retriable
    assert err.details == {"schema_id": 42}
    assert registry.count() == 1  # a 404 is not retried


async def test_not_found_is_not_cached(registry: FakeRegistry) -> None:
    async with client(registry.url) as c:
        with pytest.raises(SchemaNotFound):
            await c.get_schema(1)
        registry.register("late-value", EVENT)  # e.g. a registry follower caught up
        assert json.loads(await c.get_schema(1)) == json.loads(EVENT)
    assert registry.count("GET", "/schemas/ids/1") == 2


async def test_impossible_ids_fail_without_a_request(registry: FakeRegistry) -> None:
    async with client(registry.url) as c:
        for bad in (-1, 2**32, "x1", True):
            with pytest.raises(SchemaNotFound, match="invalid int schema id"):
                await c.get_schema(bad)
    assert registry.count() == 0
    assert normalize_schema_id(2**40, "long") == 2**40
    assert normalize_schema_id(HEX.upper(), "uuid") == HEX
    assert normalize_schema_id(int(HEX, 16), "uuid") == HEX


async def test_concurrent_lookups_of_one_id_make_one_request(registry: FakeRegistry) -> None:
    schema_id = registry.register("events-value", EVENT)
    async with client(registry.url) as c:
        results = await asyncio.gather(*(c.get_schema(schema_id) for _ in range(20)))
        assert await c.get_schema(schema_id) == results[0]  # cache hit, no request

    assert len(set(results)) == 1
    assert registry.count() == 1


async def test_concurrent_lookups_share_a_failure_and_do_not_cache_it(
    registry: FakeRegistry,
) -> None:
    async with client(registry.url) as c:
        results = await asyncio.gather(*(c.get_schema(7) for _ in range(5)), return_exceptions=True)
    assert all(isinstance(r, SchemaNotFound) for r in results)
    assert registry.count() == 1


async def test_wherehows_uuid_lookup_returns_the_plain_text(registry: FakeRegistry) -> None:
    registry.add_uuid(HEX, EVENT)  # served verbatim, not JSON-wrapped
    dashed = f"{HEX[:8]}-{HEX[8:12]}-{HEX[12:16]}-{HEX[16:20]}-{HEX[20:]}".upper()
    async with client(registry.url, id_type="uuid") as c:
        assert await c.get_schema(HEX) == EVENT
        assert await c.get_schema(dashed) == EVENT  # normalised: cache hit
        with pytest.raises(SchemaNotFound, match="f" * 32):
            await c.get_schema("f" * 32)
        with pytest.raises(SchemaNotFound, match="invalid uuid"):
            await c.get_schema("not-a-uuid")

    assert [r.path for r in registry.requests] == [f"/schemas/id={HEX}", f"/schemas/id={'f' * 32}"]


# ------------------------------------------------------------- subjects, register


async def test_register_latest_subjects_versions(registry: FakeRegistry) -> None:
    async with client(registry.url) as c:
        first = await c.register("events-value", EVENT)
        assert await c.register("events-value", EVENT.replace(" ", "")) == first  # same schema
        second = await c.register("events-value", EVENT_V2)
        assert await c.register("other-value", EVENT) == first  # same id in another subject

        latest = await c.latest("events-value")
        assert latest == SchemaVersion(second, 2, registry.schema(second))
        schema_id, version, schema = latest
        assert await c.subjects() == ["events-value", "other-value"]
        assert await c.versions("events-value") == [1, 2]
        assert await c.get_schema(second) == schema  # latest() filled the cache
        with pytest.raises(SchemaNotFound, match="40401"):
            await c.latest("missing-value")
        with pytest.raises(SchemaNotFound, match="40401"):
            await c.versions("missing-value")

    assert (first, second, version) == (1, 2, 2)
    assert registry.count("GET", f"/schemas/ids/{second}") == 0
    post = next(r for r in registry.requests if r.method == "POST")
    assert post.headers["content-type"] == CONTENT_TYPE
    assert json.loads(post.body) == {"schema": EVENT}


async def test_invalid_schema_is_a_request_error_not_retried(
    registry: FakeRegistry, sleeps: Sleeps
) -> None:
    async with client(registry.url, sleeps) as c:
        with pytest.raises(RegistryRequestError, match="42201") as info:
            await c.register("events-value", "{not json")
    assert info.value.status_code == 422 and not info.value.retriable
    assert registry.count() == 1 and sleeps.waits == []


# ---------------------------------------------------------------------- auth


async def test_basic_auth_is_sent_and_a_wrong_password_is_not_retried(sleeps: Sleeps) -> None:
    with FakeRegistry(basic_auth=("svc", PASSWORD)) as reg:
        schema_id = reg.register("events-value", EVENT)
        auth = {"username": "svc", "password": PASSWORD}
        async with client(reg.url, basic_auth=auth) as c:
            await c.get_schema(schema_id)
        assert reg.requests[0].headers["authorization"].startswith("Basic ")

        wrong = {"username": "svc", "password": "wrong"}
        async with client(reg.url, sleeps, basic_auth=wrong) as c:
            with pytest.raises(RegistryRequestError) as info:
                await c.get_schema(schema_id)
        assert (info.value.status_code, info.value.error_code) == (401, 401)
        assert "Unauthorized" in str(info.value) and not info.value.retriable
        assert reg.count() == 2 and sleeps.waits == []


async def test_bearer_token_is_sent() -> None:
    with FakeRegistry(bearer_token=TOKEN) as reg:
        schema_id = reg.register("events-value", EVENT)
        async with client(reg.url, bearer_token=TOKEN) as c:
            await c.get_schema(schema_id)
        async with client(reg.url) as c:
            with pytest.raises(RegistryRequestError, match="401"):
                await c.latest("events-value")
        assert reg.requests[0].headers["authorization"] == f"Bearer {TOKEN}"
        assert "authorization" not in reg.requests[1].headers


async def test_secrets_never_appear_in_reprs_errors_or_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    auth = {"username": "svc", "password": PASSWORD}
    settings = SchemaRegistrySettings(url=closed_port_url(), basic_auth=auth, max_retries=1)
    root = Settings(schema_registry=settings.model_dump())
    texts = [repr(settings), str(settings), repr(root), str(root)]
    reprs: list[str] = []
    with FakeRegistry(bearer_token=TOKEN) as reg:
        for kwargs in ({"basic_auth": auth}, {"bearer_token": TOKEN}):
            c = SchemaRegistryClient(
                SchemaRegistrySettings(url=f"{closed_port_url()},{reg.url}", **kwargs),
                sleep=Sleeps(),
            )
            async with c:
                texts += [repr(c), str(c)]
                reprs.append(repr(c))
                for call in (c.get_schema(1), c.latest("x")):
                    with pytest.raises(ProcessorError) as info:
                        await call
                    texts += ["".join(traceback.format_exception(info.value))]
    async with SchemaRegistryClient(settings, sleep=Sleeps()) as c:
        with pytest.raises(RegistryUnavailable) as unavailable:
            await c.get_schema(1)
    texts += ["".join(traceback.format_exception(unavailable.value)), caplog.text]

    for text in texts:
        assert PASSWORD not in text and TOKEN not in text
    assert "auth=basic" in reprs[0] and "auth=bearer" in reprs[1]


# ------------------------------------------------------- failover and retries


async def test_failover_from_a_closed_port_and_the_good_url_is_remembered(
    registry: FakeRegistry, sleeps: Sleeps, caplog: pytest.LogCaptureFixture
) -> None:
    schema_id = registry.register("events-value", EVENT)
    registry.register("more-value", EVENT_V2)
    down = closed_port_url()
    async with client(f"{down},{registry.url}", sleeps) as c:
        assert c.url == down
        await c.get_schema(schema_id)
        assert c.url == registry.url
        caplog.clear()
        await c.get_schema(schema_id + 1)

    assert registry.count() == 2 and sleeps.waits == []  # failover does not wait
    assert down not in caplog.text  # the second lookup went straight to the good URL


async def test_failover_when_the_first_url_answers_503(sleeps: Sleeps) -> None:
    with FakeRegistry() as first, FakeRegistry() as second:
        for reg in (first, second):
            reg.register("events-value", EVENT)
            reg.register("events-value", EVENT_V2)
        first.fail_next(10, status=503)
        async with client(f"{first.url},{second.url}", sleeps) as c:
            await c.get_schema(1)
            await c.get_schema(2)
            await c.latest("events-value")
        assert (first.count(), second.count()) == (1, 3)
        assert sleeps.waits == []


async def test_retries_on_503_with_capped_exponential_backoff_then_success(
    registry: FakeRegistry, sleeps: Sleeps
) -> None:
    schema_id = registry.register("events-value", EVENT)
    registry.fail_next(4, status=503)
    async with client(registry.url, sleeps, min_backoff_s=0.2, max_backoff_s=1) as c:
        assert json.loads(await c.get_schema(schema_id)) == json.loads(EVENT)

    assert registry.count() == 5
    assert sleeps.waits == pytest.approx([0.2, 0.4, 0.8, 1.0])  # jitter=1: the full cap


async def test_backoff_has_full_jitter(registry: FakeRegistry, sleeps: Sleeps) -> None:
    registry.fail_next(2, status=500)
    settings = SchemaRegistrySettings(url=registry.url, min_backoff_s=1, max_backoff_s=10)
    c = SchemaRegistryClient(settings, sleep=sleeps, jitter=iter([0.5, 0.25]).__next__)
    async with c:
        with pytest.raises(SchemaNotFound):
            await c.get_schema(1)
    assert sleeps.waits == pytest.approx([0.5, 0.5])  # 0.5 * 1, 0.25 * 2


async def test_429_honours_retry_after_up_to_max_backoff(
    registry: FakeRegistry, sleeps: Sleeps
) -> None:
    schema_id = registry.register("events-value", EVENT)
    registry.fail_next(1, status=429, retry_after=2)
    registry.fail_next(1, status=429, retry_after=3600)
    registry.fail_next(1, status=429)  # no Retry-After: the normal backoff
    async with client(registry.url, sleeps, min_backoff_s=0.1, max_backoff_s=5) as c:
        await c.get_schema(schema_id)

    assert sleeps.waits == pytest.approx([2.0, 5.0, 0.4])
    assert registry.count() == 4


async def test_429_does_not_fail_over(sleeps: Sleeps) -> None:
    with FakeRegistry() as first, FakeRegistry() as second:
        first.register("events-value", EVENT)
        first.fail_next(1, status=429, retry_after=1)
        async with client(f"{first.url},{second.url}", sleeps) as c:
            await c.get_schema(1)
        assert (first.count(), second.count(), sleeps.waits) == (2, 0, [1.0])


async def test_exhausted_retries_raise_registry_unavailable(
    registry: FakeRegistry, sleeps: Sleeps
) -> None:
    registry.fail_next(100, status=503)
    async with client(registry.url, sleeps, max_retries=3) as c:
        with pytest.raises(RegistryUnavailable) as info:
            await c.get_schema(1)

    err = info.value
    assert err.retriable and isinstance(err, ProcessorError) and err.status_code == 503
    assert "4 attempts" in str(err) and "503" in str(err) and "50001" in str(err)
    assert registry.count() == 4 and len(sleeps.waits) == 3


async def test_every_url_down_is_unavailable_after_rounds_over_all_urls(sleeps: Sleeps) -> None:
    urls = f"{closed_port_url()},{closed_port_url()}"
    async with client(urls, sleeps, max_retries=2) as c:
        with pytest.raises(RegistryUnavailable, match="3 attempts over 2 URL") as info:
            await c.latest("events-value")
    assert isinstance(info.value.__cause__, Exception)  # the httpx error, chained
    assert len(sleeps.waits) == 2


async def test_a_hung_request_times_out_and_is_retried(
    registry: FakeRegistry, sleeps: Sleeps
) -> None:
    schema_id = registry.register("events-value", EVENT)
    registry.hang_next(1, seconds=10)
    async with client(registry.url, sleeps, timeout_s=0.2) as c:
        await c.get_schema(schema_id)
    assert registry.count() == 2 and len(sleeps.waits) == 1


# ------------------------------------------------------------------ lifecycle


async def test_lifecycle_is_guarded(registry: FakeRegistry) -> None:
    c = client(registry.url)
    with pytest.raises(RuntimeError, match="INIT; start"):
        await c.get_schema(1)
    await c.start()
    assert "RUNNING" in repr(c)
    with pytest.raises(RuntimeError, match="not INIT"):
        await c.start()
    await c.close()
    await c.close()  # idempotent
    assert "CLOSED" in repr(c)
    with pytest.raises(RuntimeError, match="CLOSED"):
        await c.start()
    with pytest.raises(ValueError, match="file://"):
        SchemaRegistryClient(SchemaRegistrySettings(url="file://schemas"))


async def test_close_ends_a_lookup_in_flight(registry: FakeRegistry) -> None:
    registry.register("events-value", EVENT)
    registry.hang_next(1, seconds=10)
    c = client(registry.url, timeout_s=30)
    await c.start()
    lookup = asyncio.create_task(c.get_schema(1))
    async with asyncio.timeout(5):
        while registry.count() == 0:
            await asyncio.sleep(0.01)
    await c.close()
    with pytest.raises(RuntimeError, match="closed during the lookup"):
        await lookup


# ---------------------------------------------------------------- file registry


def write_index(directory: Path, index: dict[str, Any], files: dict[str, str]) -> None:
    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text, encoding="utf-8")
    (directory / "index.json").write_text(json.dumps(index), encoding="utf-8")


async def test_file_registry_serves_avsc_files_by_id(tmp_path: Path) -> None:
    index = {
        "1": {"subject": "events-value", "file": "Event.avsc"},
        "2": {"subject": "events-value", "file": "v2/Event.avsc"},
        "9": {"subject": "audit-value", "file": "Event.avsc", "version": 3},
    }
    write_index(tmp_path, index, {"Event.avsc": EVENT, "v2/Event.avsc": EVENT_V2})
    settings = SchemaRegistrySettings(url=f"file://{tmp_path}")
    registry = registry_from_settings(settings)
    assert isinstance(registry, FileSchemaRegistry)

    async with registry as r:
        assert await r.get_schema(1) == EVENT
        assert await r.get_schema("2") == EVENT_V2
        assert await r.latest("events-value") == SchemaVersion(2, 2, EVENT_V2)
        assert await r.latest("audit-value") == SchemaVersion(9, 3, EVENT)
        assert await r.subjects() == ["audit-value", "events-value"]
        assert await r.versions("events-value") == [1, 2]
        with pytest.raises(SchemaNotFound, match="schema id 5 is not in"):
            await r.get_schema(5)
        with pytest.raises(SchemaNotFound, match="subject 'nope'"):
            await r.latest("nope")
    with pytest.raises(RuntimeError, match="not running"):
        await r.get_schema(1)


async def test_file_registry_with_uuid_ids(tmp_path: Path) -> None:
    write_index(tmp_path, {HEX.upper(): {"subject": "s", "file": "E.avsc"}}, {"E.avsc": EVENT})
    async with FileSchemaRegistry(tmp_path, id_type="uuid") as r:
        assert await r.get_schema(HEX) == EVENT
        assert (await r.latest("s")).id == HEX


@pytest.mark.parametrize(
    ("index", "files", "problem"),
    [
        ({"1": {"subject": "s", "file": "missing.avsc"}}, {}, "cannot read"),
        ({"1": {"subject": "s", "file": "E.avsc"}}, {"E.avsc": "{bad"}, "not valid JSON"),
        ({"x": {"subject": "s", "file": "E.avsc"}}, {"E.avsc": EVENT}, "not a int id"),
        ({"1": {"file": "E.avsc"}}, {"E.avsc": EVENT}, "must be strings"),
        ({"1": {"subject": "s", "file": "../E.avsc"}}, {}, "outside the directory"),
        ({"1": {"subject": "s", "file": "E.avsc", "version": 0}}, {"E.avsc": EVENT}, "positive"),
        ([1, 2], {}, "expected a JSON object"),
    ],
)
async def test_file_registry_checks_the_index_at_start(
    tmp_path: Path, index: Any, files: dict[str, str], problem: str
) -> None:
    write_index(tmp_path, index, files)
    with pytest.raises(RegistryRequestError, match=problem):
        await FileSchemaRegistry(tmp_path).start()


async def test_file_registry_without_index(tmp_path: Path) -> None:
    with pytest.raises(RegistryRequestError, match="index.json: cannot read"):
        await FileSchemaRegistry(tmp_path).start()


# -------------------------------------------------------------------- settings


def test_settings_validate_urls_and_auth() -> None:
    s = SchemaRegistrySettings(url=" http://a:8081/ , https://b ")
    assert (s.urls, s.file_dir) == (["http://a:8081", "https://b"], None)
    assert SchemaRegistrySettings(url="file://./schemas").file_dir == "./schemas"

    auth = {"username": "u", "password": PASSWORD}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"url": "ftp://x"}, r"http\(s\)://host"),
        ({"url": f"http://u:{PASSWORD}@host"}, "credentials in the URL"),
        ({"url": "file://a,http://b"}, "only URL"),
        ({"url": " , "}, "at least one URL"),
        ({"basic_auth": auth, "bearer_token": TOKEN}, "not both"),
        ({"min_backoff_s": 2, "max_backoff_s": 1}, "max_backoff_s"),
        ({"tls": {"client_key": "k.pem"}}, "client_key needs client_cert"),
        ({"id_type": "short"}, "id_type"),
        ({"timeout": 3}, "Extra inputs"),
    ]
    for bad, problem in cases:
        with pytest.raises(ValidationError, match=problem) as info:
            SchemaRegistrySettings(**bad)
        # pydantic's own str() shows inputs; our messages never do (the loader hides inputs)
        assert all(PASSWORD not in e["msg"] for e in info.value.errors())


def test_settings_from_yaml_with_the_url_variable(tmp_path: Path) -> None:
    config = tmp_path / "kstage.yml"
    config.write_text(
        "schema_registry:\n"
        "  url: ${SCHEMA_REGISTRY_URL:-http://localhost:8081}\n"
        "  id_type: long\n"
        "  basic_auth: {username: svc, password: '${SR_PASSWORD}'}\n"
        "  tls: {verify: false}\n",
        encoding="utf-8",
    )
    s = load_settings(config, {"SR_PASSWORD": PASSWORD}).schema_registry
    assert s is not None
    assert (s.urls, s.id_type, s.tls.verify, s.max_retries) == (
        ["http://localhost:8081"],
        "long",
        False,
        5,
    )
    assert s.basic_auth is not None and s.basic_auth.password.get_secret_value() == PASSWORD

    env = {"SR_PASSWORD": PASSWORD, "SCHEMA_REGISTRY_URL": "http://a:1,http://b:2"}
    s = load_settings(config, env).schema_registry
    assert s is not None and s.urls == ["http://a:1", "http://b:2"]
    assert Settings().schema_registry is None

    # a password pasted into the URL is refused without being echoed
    config.write_text("schema_registry: {url: 'http://svc:${SR_PASSWORD}@host:8081'}\n")
    with pytest.raises(ConfigValidationError) as info:
        load_settings(config, {"SR_PASSWORD": PASSWORD})
    assert "credentials in the URL are not allowed" in str(info.value)
    assert PASSWORD not in "".join(traceback.format_exception(info.value))


# ------------------------------------------------------------------------- TLS


def test_tls_options_give_httpx_verify_settings(tmp_path: Path) -> None:
    assert tls_verify(SchemaRegistryTls()) is True
    assert tls_verify(SchemaRegistryTls(verify=False)) is False

    cert, key = self_signed(tmp_path)
    context = tls_verify(SchemaRegistryTls(ca_file=str(cert)))
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "127.0.0.1"),),)]

    mutual = tls_verify(
        SchemaRegistryTls(verify=False, client_cert=str(cert), client_key=str(key))
    )
    assert isinstance(mutual, ssl.SSLContext) and mutual.verify_mode == ssl.CERT_NONE

    with pytest.raises(RegistryRequestError, match="schema_registry.tls"):
        tls_verify(SchemaRegistryTls(ca_file=str(tmp_path / "missing.pem")))


async def test_mutual_tls_against_an_https_fake(tmp_path: Path, sleeps: Sleeps) -> None:
    cert, key = self_signed(tmp_path)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    server.verify_mode = ssl.CERT_REQUIRED  # clients must show a certificate
    server.load_verify_locations(cert)
    with FakeRegistry(ssl_context=server) as reg:
        schema_id = reg.register("events-value", EVENT)
        tls = {"ca_file": str(cert), "client_cert": str(cert), "client_key": str(key)}
        async with client(reg.url, sleeps, tls=tls) as c:
            assert json.loads(await c.get_schema(schema_id)) == json.loads(EVENT)

        # the default trust store does not know the self-signed certificate
        async with client(reg.url, sleeps, max_retries=0) as c:
            with pytest.raises(RegistryUnavailable, match="ConnectError"):
                await c.get_schema(schema_id)
        assert reg.count() == 1


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, made with the openssl command."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is not installed")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return cert, key


# ----------------------------------------------------------------- the fake itself


async def test_fake_follows_the_documented_errors(registry: FakeRegistry) -> None:
    registry.register("events-value", EVENT)
    import httpx

    async with httpx.AsyncClient(base_url=registry.url) as http:
        cases = {
            "/schemas/ids/5": (404, 40403),
            "/subjects/nope/versions": (404, 40401),
            "/subjects/nope/versions/latest": (404, 40401),
            "/subjects/events-value/versions/2": (404, 40402),
            "/subjects/events-value/versions/zero": (422, 42202),
            "/schemas/id=" + HEX: (404, 40403),
        }
        for path, (status, error_code) in cases.items():
            response = await http.get(path)
            assert response.status_code == status, path
            assert response.headers["content-type"] == CONTENT_TYPE
            assert response.json()["error_code"] == error_code, path
        found = await http.post("/subjects/events-value", json={"schema": EVENT})
        assert found.json() == {
            "subject": "events-value",
            "version": 1,
            "id": 1,
            "schema": registry.schema(1),
        }
        assert (await http.get("/subjects/events-value/versions/1")).json() == found.json()
    assert registry.schema(1) == json.dumps(json.loads(EVENT), separators=(",", ":"))
