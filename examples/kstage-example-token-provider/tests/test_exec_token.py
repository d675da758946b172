"""``exec_token`` on its own: what a command prints becomes a token with its expiry; a
command that fails, hangs or prints no token is an outage (TokenError), never a crash.
kstage's own suite logs in to a real Apache Kafka with it
(tests/integration/test_kafka_auth.py::test_a_token_provider_plugin_logs_in)."""

from __future__ import annotations

import json
import shlex
import sys
import time
from importlib.metadata import entry_points

import pytest
from actors.tokens import TokenError, provider_class

from kstage_example_token_provider import ExecOptions, ExecTokenProvider, parse_token


def printing(body: object, *, code: int = 0, sleep_s: float = 0) -> str:
    """A command that prints ``body`` as JSON (after ``sleep_s``) and exits ``code``."""
    script = (f"import sys, time; time.sleep({sleep_s}); sys.stdout.write({json.dumps(body)!r}); "
              f"print('boom', file=sys.stderr); sys.exit({code})")
    return shlex.join([sys.executable, "-c", script])


def provider(command: str, timeout_s: float = 30) -> ExecTokenProvider:
    return ExecTokenProvider(ExecOptions(command=command, timeout_s=timeout_s))


def test_the_entry_point_is_the_package_s_own() -> None:
    [ep] = [ep for ep in entry_points(group="kstage.token_providers") if ep.name == "exec_token"]
    assert ep.value == "kstage_example_token_provider:ExecTokenProvider"
    assert provider_class("exec_token") is ExecTokenProvider


@pytest.mark.parametrize(("body", "lifetime"), [
    ({"access_token": "a.b.c", "expires_in": 600}, 600),
    ({"token": "a.b.c", "expires_at": int(time.time()) + 120}, 120),
    ({"accessToken": "a.b.c", "expiresOn": "2999-01-01 00:00:00.000000"}, None),
    ({"accessToken": "a.b.c"}, 300),
])
async def test_the_printed_token_and_its_expiry(body: dict[str, object],
                                                lifetime: float | None) -> None:
    token = await provider(printing(body)).fetch()
    assert token.value == "a.b.c"
    if lifetime is not None:
        assert token.expires_at == pytest.approx(time.time() + lifetime, abs=5)
    else:
        assert token.expires_at > time.time() + 10**8


@pytest.mark.parametrize(("command", "said"), [
    (printing({"access_token": "x"}, code=3), "exited 3: boom"),
    (printing({"expires_in": 5}), "printed no access_token"),
    (printing({"access_token": "x"}, sleep_s=5), "took more than 1s"),
    ("/nonexistent/token-helper", "did not start"),
])
async def test_a_failing_command_is_a_token_error(command: str, said: str) -> None:
    with pytest.raises(TokenError) as info:
        await provider(command, timeout_s=1).fetch()
    assert said in str(info.value) and not info.value.refused


def test_output_that_is_not_json_is_a_token_error() -> None:
    with pytest.raises(TokenError, match="printed no JSON"):
        parse_token("Please run 'az login' first")
