"""The built-in ``oidc`` token provider against a real token endpoint on loopback
(tests/oidc_server.py), and the cache that hands aiokafka its tokens: one fetch for
connections made at once, a new token from 80% of the lifetime on, the held token while
the endpoint is out and still valid, a connection error (retried by aiokafka) and a
reason for /readyz once it is not."""

from __future__ import annotations

import asyncio
import math
import time

import pytest
from aiokafka.errors import KafkaConnectionError

from actors.oidc import OidcOptions, OidcTokenProvider, jwt_expiry
from actors.tokens import CachedTokens, TokenError
from service.broker import free_port
from tests.oidc_server import OidcServer

SECRET = "client-" + "secret-9c1"  # a test credential


def provider(url: str, secret: str = SECRET) -> OidcTokenProvider:
    # the test's endpoint is http:// on loopback: allowed only when said (docs/security.md)
    return OidcTokenProvider(OidcOptions(token_endpoint_url=url, client_id="kstage",
                                         client_secret=secret, scope="kafka",
                                         allow_insecure_token_endpoint=True))


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


class WallClock:
    """The cache's wall clock, moved by the test: the token's lifetime (60 s from the
    endpoint's real clock) passes in steps, whatever time the machine takes."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead


async def test_the_cache_fetches_once_and_again_from_80_percent_of_the_lifetime() -> None:
    with OidcServer({"kstage": SECRET}, ttl_s=60) as idp:
        clock = WallClock()
        cache = CachedTokens(provider(idp.token_url), clock=clock)
        first = await asyncio.gather(*(cache.token() for _ in range(5)))
        assert len(set(first)) == 1 and idp.issued == 1, "one fetch for five connections"
        clock.ahead = 20  # a third of the lifetime
        assert await cache.token() == first[0] and idp.issued == 1
        clock.ahead = 50  # past 80% (48 s)
        assert await cache.token() != first[0] and idp.issued == 2


async def test_an_outage_uses_the_valid_token_then_is_a_connection_error() -> None:
    with OidcServer({"kstage": SECRET}, ttl_s=60) as idp:
        clock = WallClock()
        cache = CachedTokens(provider(idp.token_url), clock=clock)
        held = await cache.token()
        idp.down = True
        clock.ahead = 50  # not fresh, still valid
        assert await cache.token() == held
        assert cache.unusable is None and cache.error is not None
        clock.ahead = 61  # expired
        with pytest.raises(KafkaConnectionError, match="no OAUTHBEARER token"):
            await cache.token()
        assert cache.unusable is not None and "HTTP 503" in cache.unusable
        assert idp.token_url in cache.unusable
        idp.down = False
        # The failed fetch's wait (below 0.5 s, on the real monotonic clock) passes.
        fresh = await _token_within(cache, 30.0)
        assert fresh != held
        assert cache.unusable is None and cache.error is None


async def _token_within(cache: CachedTokens, seconds: float) -> str:
    """The cache's token once it hands one out (the wait after a failed fetch), within
    ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return await cache.token()
        except KafkaConnectionError:
            assert time.monotonic() < deadline, "no token after the endpoint came back"
            await asyncio.sleep(0.05)


async def test_an_outage_is_not_a_request_per_connection_attempt() -> None:
    """aiokafka asks for a token at every connection attempt (dozens a second while the
    brokers cannot be reached): after a failed fetch the cache answers with its reason
    and asks the endpoint again only after a backoff (0.5 s doubling, half random)."""
    with OidcServer({"kstage": SECRET}) as idp:
        cache = CachedTokens(provider(idp.token_url))
        idp.down = True
        loop = asyncio.get_running_loop()
        started, asked = loop.time(), 0
        # ~20 connection attempts a second, at least 30 of them over at least 2 s (a
        # loaded machine makes the attempts slower, never fewer).
        while loop.time() - started < 2.0 or asked < 30:
            with pytest.raises(KafkaConnectionError, match="answered HTTP 503"):
                await cache.token()
            asked += 1
            await asyncio.sleep(0.05)
        elapsed = loop.time() - started
        # Fetches at 0, then each after a wait of at least 0.25, 0.5, 1, 2 ... s: in
        # ``elapsed`` seconds at most 1 + k of them, where 0.25 * (2**k - 1) <= elapsed
        # (4 in 2 s), whatever the pace of the attempts.
        most = 1 + int(math.log2(4 * elapsed + 1))
        assert 2 <= idp.unavailable <= most, (idp.unavailable, elapsed, asked)
        assert cache.unusable is not None and "HTTP 503" in cache.unusable
        idp.down = False
        # The wait after the last failure is below 0.5 * 2**(failures - 1) s.
        await _token_within(cache, 2.0 + 0.5 * 2 ** (idp.unavailable - 1))
        assert idp.issued == 1
