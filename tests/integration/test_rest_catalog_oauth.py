"""``spark.catalog.oauth2``: kstage through an Iceberg REST catalog that requires OAuth2
bearer tokens (Project Nessie with Quarkus OIDC on loopback, tests/rest_catalog.py; its
identity provider tests/oidc_server.py, whose tokens live a few seconds).

* Appends land exactly once through the authenticated catalog while tokens expire during
  the run and are refreshed (the identity provider counts more than one token issued),
  and the merge into the final table, on the same Spark session, does too;
* the identity provider down mid-run: the appends fail once the token expired, are
  retried, ``/readyz`` names the identity provider, nothing is committed to Kafka past the
  table and nothing is dead-lettered; the provider back, the same process lands every
  event once;
* the client secret appears in none of kstage's output.

Each runs with both append paths: ``spark.appends: spark`` (Iceberg's Java REST client in
the Spark session) and ``pyiceberg`` (pyiceberg's ``RestCatalog`` logged in by kstage,
actors/sinks/spark/pyiceberg_rest.py; the merge still on Spark), each path on one broker
and the brokers swapped between the two tests (tests/brokers.py, ``PAIRWISE``): the
broker only feeds the appends, and each test and each path still runs on both brokers.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyiceberg.expressions import EqualTo

from service.broker import free_port
from tests.fake_registry import FakeRegistry
from tests.integration.test_spark_exactly_once import (
    FINAL,
    TABLE,
    config,
    expected,
    produce_events,
    total_committed,
)
from tests.kafkautil import (
    KstageProcess,
    create_topic,
    status_port,
    unique,
    wait_readyz,
    wait_until,
)
from tests.oidc_server import OidcServer
from tests.rest_catalog import RestCatalog, appended_by_spark

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]

SECRET = "kstage-idp-secret-4f1c9a"  # noqa: S105 - a test value, looked for in output
TOKEN_TTL_S = 5


@pytest.fixture(scope="module")
def idp() -> Iterator[OidcServer]:
    with OidcServer({"kstage": SECRET}, ttl_s=TOKEN_TTL_S) as server:
        yield server


@pytest.fixture(scope="module")
def rest(tmp_path_factory: pytest.TempPathFactory, idp: OidcServer) -> Iterator[RestCatalog]:
    with RestCatalog(tmp_path_factory.mktemp("rest-oauth"), auth_server_url=idp.url) as cat:
        yield cat


def staged(rest: RestCatalog, idp: OidcServer, topic: str,
           table: str = TABLE) -> Counter[tuple[int, int]]:
    """The (partition, offset) counts of ``topic`` in ``table`` (the staging table; the
    module's tests share it), read by pyiceberg through the authenticated REST catalog (a
    token of its own, not counted as issued)."""
    catalog = rest.reader(token=idp.mint("reader", 60))
    if not catalog.table_exists(("kstage", table)):
        return Counter()
    rows = catalog.load_table(("kstage", table)).scan(
        row_filter=EqualTo("_topic", topic),
        selected_fields=("_kafka_partition", "_offset")).to_arrow().to_pylist()
    return Counter((r["_kafka_partition"], r["_offset"]) for r in rows)


def oauth_config(tmp_path: Path, broker: str, group: str, topic: str,
                 registry: FakeRegistry, rest: RestCatalog, idp: OidcServer,
                 merge_s: float | None = None, appends: str = "spark") -> Path:
    cfg = config(tmp_path, broker, group, topic, registry, tmp_path / "unused",
                 flush_rows=100, merge_s=merge_s)
    data: dict[str, Any] = yaml.safe_load(cfg.read_text())
    data["spark"] = rest.spark(flush_max_rows=100, flush_max_interval_s=0.5, appends=appends)
    data["spark"]["catalog"]["oauth2"] = {
        "token_url": idp.token_url, "client_id": "kstage", "client_secret": "${IDP_SECRET}",
        "scope": "catalog", "allow_insecure_http": True}
    data["supervisor"]["sink_unready_after_s"] = 1
    data["service"]["http_port"] = free_port()
    cfg.write_text(yaml.safe_dump(data))
    return cfg


async def stop(proc: KstageProcess) -> None:
    proc.proc.send_signal(signal.SIGTERM)
    assert await proc.wait(timeout=120) == 0, proc.output()[-4000:]


async def test_tokens_expire_and_are_refreshed_while_appends_land_once(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], rest: RestCatalog,
        idp: OidcServer, appends: str) -> None:
    half, partitions = 200, 2
    topic, group = unique("oauth"), unique("g-oauth")
    with FakeRegistry() as registry:
        await create_topic(broker, topic, partitions=partitions)
        await produce_events(broker, registry, topic, 0, half, partitions)
        cfg = oauth_config(tmp_path, broker, group, topic, registry, rest, idp, merge_s=1,
                           appends=appends)
        proc = kstage(cfg, env={"IDP_SECRET": SECRET})
        await wait_until(lambda: proc.proc.poll() is not None
                         or sum(staged(rest, idp, topic).values()) >= half, timeout=240,
                         what="the first half in the staging table")
        assert proc.proc.poll() is None, proc.output()[-4000:]
        # Two more tokens issued: the first one has expired (a refresh comes before
        # the expiry, the second after it); the second half lands after that.
        issued = idp.issued
        await wait_until(lambda: idp.issued >= issued + 2, timeout=8 * TOKEN_TTL_S,
                         what="two token refreshes")
        await produce_events(broker, registry, topic, half, half, partitions)
        await wait_until(lambda: proc.proc.poll() is not None
                         or sum(staged(rest, idp, topic).values()) >= 2 * half, timeout=240,
                         what="the second half in the staging table")
        # The merge, on the same session, logs in the same way.
        await wait_until(lambda: proc.proc.poll() is not None
                         or sum(staged(rest, idp, topic, FINAL).values()) >= 2 * half,
                         timeout=240, what="every event merged into the final table")
        await stop(proc)
        assert await total_committed(broker, group, topic, partitions) == 2 * half
    rows = staged(rest, idp, topic)
    assert sorted(rows) == expected(2 * half, partitions)
    assert max(rows.values()) == 1
    final = staged(rest, idp, topic, FINAL)
    assert sorted(final) == expected(2 * half, partitions) and max(final.values()) == 1
    assert idp.refused == 0
    assert SECRET not in proc.output()
    # pyiceberg's token was replaced before it expired, never after a 401.
    assert "pyiceberg: the REST catalog refused the token" not in proc.output()
    catalog = rest.reader(token=idp.mint("reader", 60))
    assert appended_by_spark(catalog, TABLE, group) == {appends == "spark"}


async def test_the_identity_provider_down_is_named_retried_and_recovered(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], rest: RestCatalog,
        idp: OidcServer, appends: str) -> None:
    half, partitions = 200, 2
    topic, group = unique("oauth-down"), unique("g-oauth-down")
    with FakeRegistry() as registry:
        await create_topic(broker, topic, partitions=partitions)
        await produce_events(broker, registry, topic, 0, half, partitions)
        cfg = oauth_config(tmp_path, broker, group, topic, registry, rest, idp,
                           appends=appends)
        proc = kstage(cfg, env={"IDP_SECRET": SECRET})
        base = f"http://127.0.0.1:{await status_port(proc)}"
        await wait_until(lambda: proc.proc.poll() is not None
                         or sum(staged(rest, idp, topic).values()) >= half, timeout=240,
                         what="the first half in the staging table")
        assert proc.proc.poll() is None, proc.output()[-4000:]
        committed = await total_committed(broker, group, topic, partitions)
        try:
            refused_before = idp.unavailable  # the module's server: other tests' refusals
            idp.down = True
            if appends == "spark":
                # The token kstage holds expires during the outage: the catalog's
                # refreshes fail (6 attempts over more than 3 s after the first, due
                # before expiry).
                await wait_until(lambda: idp.unavailable >= refused_before + 6,
                                 timeout=8 * TOKEN_TTL_S,
                                 what="the catalog's token refreshes failing")
            else:
                # pyiceberg asks for a token only when it calls the catalog: the one it
                # holds has expired once a token's life has passed.
                await asyncio.sleep(TOKEN_TTL_S + 1)
            await produce_events(broker, registry, topic, half, half, partitions)
            body = await wait_readyz(base, proc, 503, "identity provider", timeout=120)
            assert idp.token_url in str(body), body
            assert sum(staged(rest, idp, topic).values()) == half
            assert await total_committed(broker, group, topic, partitions) <= max(
                committed, half)
        finally:
            idp.down = False
        await wait_until(lambda: proc.proc.poll() is not None
                         or sum(staged(rest, idp, topic).values()) >= 2 * half, timeout=240,
                         what="the second half in the staging table, without a restart")
        await wait_readyz(base, proc, 200, timeout=120)
        if appends == "spark":
            # Iceberg had given up refreshing: kstage built the catalog again (a new token).
            assert "is built again with a new token" in proc.output()
        else:
            assert idp.unavailable > refused_before  # asked while down, with a backoff
            assert "identity provider" in proc.output() and "gives tokens again" \
                in proc.output()
        await stop(proc)
        assert await total_committed(broker, group, topic, partitions) == 2 * half
    rows = staged(rest, idp, topic)
    assert sorted(rows) == expected(2 * half, partitions)
    assert max(rows.values()) == 1
    assert not (tmp_path / "dead.jsonl").exists() or not (tmp_path / "dead.jsonl").read_text()
    assert SECRET not in proc.output()


async def test_refused_credentials_at_start_exit_2_and_an_outage_at_start_is_waited_out(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], rest: RestCatalog,
        idp: OidcServer) -> None:
    """Client credentials the identity provider refuses when ``kstage run`` starts are the
    configuration's fault: exit 2 naming the provider, before any worker starts (a Kafka
    login the brokers refuse is the same). The provider out of reach at start is an
    outage: the process runs, says so, and lands every event once it answers."""
    events = 20
    topic, group = unique("oauth-start"), unique("g-oauth-start")
    wrong = "wrong-" + SECRET
    with FakeRegistry() as registry:
        await create_topic(broker, topic)
        await produce_events(broker, registry, topic, 0, events, 1)
        cfg = oauth_config(tmp_path, broker, group, topic, registry, rest, idp,
                           appends="pyiceberg")
        refused = kstage(cfg, env={"IDP_SECRET": wrong})
        assert await refused.wait(timeout=120) == 2, refused.output()[-4000:]
        said = refused.output()
        assert (f"spark.catalog.oauth2: the REST catalog's identity provider "
                f"{idp.token_url} refuses the client credentials (HTTP 401 "
                "invalid_client): check client_id and client_secret") in said, said[-4000:]
        assert "joining group" not in said, "a worker started"
        assert wrong not in said and SECRET not in said
        assert await total_committed(broker, group, topic, 1) == 0

        idp.down = True
        try:
            proc = kstage(cfg, env={"IDP_SECRET": SECRET})
            base = f"http://127.0.0.1:{await status_port(proc)}"
            await proc.wait_for_log("at start; the appends retry it", timeout=120)
            # The staging table cannot be opened: opened again with backoff (no crash
            # loop that gives up), the provider named in /readyz meanwhile.
            await proc.wait_for_log("opening the sink again in", timeout=120)
            body = await wait_readyz(base, proc, 503, "identity provider", timeout=120)
            assert idp.token_url in str(body), body
            await proc.wait_for_log("opening the sink again in", timeout=120, count=2)
        finally:
            idp.down = False
        await wait_until(lambda: proc.proc.poll() is not None
                         or sum(staged(rest, idp, topic).values()) >= events, timeout=240,
                         what="every event in the staging table")
        await stop(proc)
        assert await total_committed(broker, group, topic, 1) == events
    rows = staged(rest, idp, topic)
    assert sorted(rows) == expected(events, 1) and max(rows.values()) == 1
    assert SECRET not in proc.output()
    assert "crashed" not in proc.output(), proc.output()[-4000:]
