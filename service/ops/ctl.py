"""``kstage ctl status|pause|resume|restart``: the control API of a running ``kstage run``
(:mod:`service.control`), called with the config's ``service.control_token``.

The process is found at ``http://<service.http_host>:<service.http_port>`` of the config
(``0.0.0.0`` read as the loopback address), or at ``--url``: processes sharing one config
on one host take the next free ports, so name the one meant. ``--group`` may be left out
when one group of the config consumes the topic.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from service.ops.lag import OpsError
from settings.models import Settings

TIMEOUT_S = 10.0


def base_url(settings: Settings, url: str | None) -> str:
    """Where the process's status server answers."""
    if url:
        return url.rstrip("/")
    service = settings.service
    if not service.http_port:
        raise OpsError("service.http_port is 0 in the config: the status server (and its "
                       "control API) is off; name the process with --url")
    host = "127.0.0.1" if service.http_host in ("0.0.0.0", "") else service.http_host  # noqa: S104 - read, not bound
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{service.http_port}"


def group_of(settings: Settings, topic: str, group: str | None) -> str:
    """The group meant: ``group`` if the config has it consuming ``topic``, else the one
    group that does; OpsError naming the choices otherwise."""
    groups = [settings.group_id(g) for g in settings.groups
              if any(t.topic == topic for t in g.topics)]
    if group is not None:
        if group not in groups:
            raise OpsError(f"group {group!r} of the config does not consume topic {topic!r}"
                           f" (groups that do: {', '.join(groups) or 'none'})")
        return group
    if len(groups) != 1:
        raise OpsError(f"topic {topic!r} is consumed by " + (
            f"groups {', '.join(groups)}: name one with --group" if groups
            else "no group of the config"))
    return groups[0]


def call(settings: Settings, method: str, path: str, url: str | None) -> dict[str, Any]:
    """One call of the control API; OpsError saying what went wrong."""
    if settings.service.control_token is None:
        raise OpsError("service.control_token is not set in the config: the control API "
                       "is off")
    base = base_url(settings, url)
    headers = {"Authorization": f"Bearer {settings.service.control_token.get_secret_value()}"}
    try:
        response = httpx.request(method, f"{base}{path}", headers=headers, timeout=TIMEOUT_S)
    except httpx.TransportError as exc:
        raise OpsError(f"no kstage status server answers at {base} ({type(exc).__name__}): "
                       "is `kstage run` running with this config? Another port: --url"
                       ) from exc
    try:
        body: dict[str, Any] = response.json()
    except ValueError:
        body = {"error": response.text[:200]}
    if response.status_code != 200:
        raise OpsError(f"{method} {base}{path}: HTTP {response.status_code}: "
                       f"{body.get('error', body)}")
    return body


def act(settings: Settings, action: str, topic: str, group: str | None,
        url: str | None) -> str:
    """Pause, resume or restart ``topic``'s worker; the line to print."""
    group = group_of(settings, topic, group)
    path = f"/groups/{quote(group, safe='')}/topics/{quote(topic, safe='')}/{action}"
    body = call(settings, "POST", path, url)
    done = {"pause": "paused", "resume": "resumed", "restart": "restarting"}[action]
    return f"{group}/{topic}: {done}" + ("" if body.get("changed") else
                                         f" (it already was {done})")


def status_lines(status: dict[str, Any]) -> list[str]:
    """``GET /status`` as lines: a topic per line, then its partitions."""
    lines = []
    for group in status["groups"]:
        for topic in group["topics"]:
            crash = topic["last_crash"]
            lines.append(f"{group['group']}/{topic['topic']}: {topic['state']}, restarts "
                         f"{topic['restarts']}" + (f"; {topic['error']}" if topic.get("error")
                                                   else "")
                         + (f"; last crash: {crash['error']}" if crash else ""))
            for p in topic["partitions"]:
                failing = p.get("failing")
                lines.append(f"  [{p['partition']}] {p['state']} committed {p['committed']} "
                             f"high-water {p['high_water']} lag {p['lag']}"
                             + (f"; {failing['error']}" if failing else ""))
    lines += [f"stalled: {reason}" for reason in status.get("stalled", [])]
    return lines


__all__ = ["act", "base_url", "call", "group_of", "status_lines"]
