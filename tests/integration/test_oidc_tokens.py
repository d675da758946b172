"""The built-in ``oidc`` token provider against a real token endpoint on loopback
(tests/oidc_server.py), and the cache that hands aiokafka its tokens: one fetch for
connections made at once, a new token from 80% of the lifetime on, the held token while
the endpoint is out and still valid, a connection error (retried by aiokafka) and a
reason for /readyz once it is not."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka.errors import KafkaConnectionError

from actors.oidc import OidcOptions, OidcTokenProvider, jwt_expiry
from actors.tokens import CachedTokens, TokenError
from service.broker import free_port
from tests.oidc_server import OidcServer

SECRET = "client-" + "secret-9c1"  # a test credential


def provider(url: str, secret: str = SECRET) -> OidcTokenProvider:
    return OidcTokenProvider(OidcOptions(token_endpoint_url=url, client_id="kstage",
                                         client_secret=secret, scope="kafka"))


async def test_a_token_with_its_expiry_from_client_credentials() -> None:
    with OidcServer({"kstage": SECRET}, ttl_s=120) as idp:
        token = await provider(idp.token_url).fetch()
    assert idp.issued == 1
    assert token.value.count(".") == 2
    assert abs(token.expires_at - (time.time() + 120)) < 5
    assert jwt_expiry(token.value) == pytest.approx(token.expires_at, abs=5)


@pytest.mark.parametrize(("case", "refused", "said"), [
    ("wrong secret", True, "refused client 'kstage': HTTP 401 invalid_client bad credentials"),
    ("down", False, "answered HTTP 503"),
    ("unreachable", False, "unreachable: ConnectError"),
])
async def test_refusals_are_told_from_outages(case: str, refused: bool, said: str) -> None:
    with OidcServer({"kstage": SECRET}) as idp:
        idp.down = case == "down"
        url = f"http://127.0.0.1:{free_port()}/token" if case == "unreachable" \
            else idp.token_url
        with pytest.raises(TokenError) as info:
            await provider(url, "wrong" if case == "wrong secret" else SECRET).fetch()
    assert info.value.refused is refused
    assert said in str(info.value)
    assert SECRET not in str(info.value)


async def test_the_cache_fetches_once_and_again_from_80_percent_of_the_lifetime() -> None:
    with OidcServer({"kstage": SECRET}, ttl_s=3) as idp:
        cache = CachedTokens(provider(idp.token_url))
        first = await asyncio.gather(*(cache.token() for _ in range(5)))
        assert len(set(first)) == 1 and idp.issued == 1, "one fetch for five connections"
        await asyncio.sleep(1)
        assert await cache.token() == first[0] and idp.issued == 1
        await asyncio.sleep(1.6)  # 2.6 s of 3: past 80%
        assert await cache.token() != first[0] and idp.issued == 2


async def test_an_outage_uses_the_valid_token_then_is_a_connection_error() -> None:
    with OidcServer({"kstage": SECRET}, ttl_s=3) as idp:
        cache = CachedTokens(provider(idp.token_url))
        held = await cache.token()
        idp.down = True
        await asyncio.sleep(2.5)  # not fresh, still valid
        assert await cache.token() == held
        assert cache.unusable is None and cache.error is not None
        await asyncio.sleep(1)  # expired
        with pytest.raises(KafkaConnectionError, match="no OAUTHBEARER token"):
            await cache.token()
        assert cache.unusable is not None and "HTTP 503" in cache.unusable
        assert idp.token_url in cache.unusable
        idp.down = False
        assert await cache.token() != held
        assert cache.unusable is None and cache.error is None
