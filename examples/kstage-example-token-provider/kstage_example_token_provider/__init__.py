"""``exec_token``: OAUTHBEARER tokens printed by a command, a kstage token provider plugin.

Cloud logins hand out short-lived tokens through their own tools: ``az account
get-access-token`` (Azure Event Hubs' Kafka endpoint takes an Entra ID token), ``gcloud
auth print-access-token`` (Google Cloud Managed Service for Apache Kafka), a sidecar's
script. This provider runs the configured command whenever kstage needs a new token and
reads its JSON output::

    kafka:
      consumer_config:
        security.protocol: SASL_SSL
        sasl.mechanism: OAUTHBEARER
        sasl.oauthbearer.method: exec_token
        sasl.oauthbearer.command: az account get-access-token -o json --resource RESOURCE

The output is a JSON object with the token under ``access_token``, ``accessToken`` or
``token``, and its expiry as ``expires_in`` (seconds), ``expires_on`` / ``expires_at``
(Unix time) or ``expiresOn`` (``az``'s local time text); without one, the token is taken
to live five minutes. A command that fails, times out or prints no token is an outage
(retried by kstage and named in ``/readyz``), never a crash.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from datetime import datetime
from typing import Any

from actors.tokens import Token, TokenError, TokenProvider
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ExecOptions", "ExecTokenProvider", "parse_token"]

_DEFAULT_LIFETIME_S = 300.0


class ExecOptions(BaseModel):
    """Options of ``exec_token`` (``sasl.oauthbearer.*`` keys)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str = Field(min_length=1, description="The command (split like a shell "
                                                   "would, but run without one).")
    timeout_s: float = Field(30, gt=0, description="How long the command may take.")


def _expiry(body: dict[str, Any]) -> float:
    now = time.time()
    if isinstance(body.get("expires_in"), int | float):
        return now + float(body["expires_in"])
    for key in ("expires_on", "expires_at"):
        value = body.get(key)
        if isinstance(value, int | float) or (isinstance(value, str) and value.isdigit()):
            return float(value)
    text = body.get("expiresOn")
    if isinstance(text, str):  # az: "2026-11-26 10:00:00.000000", the local time
        try:
            return datetime.fromisoformat(text).timestamp()
        except ValueError:
            pass
    return now + _DEFAULT_LIFETIME_S


def parse_token(output: str) -> Token:
    """The token of a command's JSON output (TokenError when there is none)."""
    try:
        body = json.loads(output)
    except ValueError as exc:
        raise TokenError(f"printed no JSON ({exc})") from exc
    if not isinstance(body, dict):
        raise TokenError("printed JSON that is not an object")
    value = body.get("access_token") or body.get("accessToken") or body.get("token")
    if not isinstance(value, str) or not value:
        raise TokenError("printed no access_token, accessToken or token")
    return Token(value, _expiry(body))


class ExecTokenProvider(TokenProvider):
    """Runs ``command`` for every new token (see the module doc)."""

    name = "exec_token"
    options_model = ExecOptions
    options: ExecOptions

    def describe(self) -> str:
        return f"token command {shlex.split(self.options.command)[0]!r}"

    async def fetch(self) -> Token:
        argv = shlex.split(self.options.command)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        except OSError as exc:
            raise TokenError(f"did not start: {exc}") from exc
        try:
            async with asyncio.timeout(self.options.timeout_s):
                out, err = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise TokenError(f"took more than {self.options.timeout_s:g}s") from None
        if proc.returncode != 0:
            said = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
            raise TokenError(f"exited {proc.returncode}: {said[0][:200]}")
        return parse_token(out.decode(errors="replace"))
