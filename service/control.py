"""The control API of the status server, as Kafka Connect's REST API has one:

* ``GET /status``: every group, topic and partition: the topic's state (``running``,
  ``paused``, ``failed``: its worker crashed and is not running, with the last crash;
  ``starting``), each partition's (``running``, ``paused``, ``retrying``, ``no_leader``,
  ``refused``), committed
  offset, high-water mark, lag, and the last sink error with the time it began; who
  paused a topic; the stalled partitions;
* ``POST /groups/{group}/topics/{topic}/pause`` and ``.../resume``: the topic's
  partitions are paused (the group membership is kept, nothing is revoked; the pause
  survives rebalances and the worker's restarts, see :mod:`actors.control`);
* ``POST /groups/{group}/topics/{topic}/restart``: its worker stops as in a shutdown
  (drain, commit) and starts again.

Every call needs ``Authorization: Bearer <service.control_token>``: a missing or wrong
token gets 401 and changes nothing. Without a token configured the endpoints are off
(404); ``/metrics``, ``/healthz`` and ``/readyz`` stay unauthenticated. Each action and
each refused call is a log line naming the caller's address (never the token). Path
segments are percent-decoded (a group id may hold a ``/``: ``%2F``).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from actors.master import Master

logger = logging.getLogger(__name__)

ACTIONS = ("pause", "resume", "restart")

Reply = tuple[int, dict[str, Any]]


class ControlApi:
    """Answers the control endpoints for one master (called on the server's threads).

    Args:
        master: the process's master.
        on_loop: runs a function on the event loop and returns its result (the master
            and its workers are touched only there).
        token: ``service.control_token``; None turns the endpoints off.
    """

    def __init__(self, master: Master, on_loop: Callable[[Callable[[], Any]], Any],
                 token: str | None) -> None:
        self.master = master
        self._on_loop = on_loop
        self._token = None if token is None else token.encode()

    def __repr__(self) -> str:
        return f"<ControlApi {'on' if self.enabled else 'off'}>"

    @property
    def enabled(self) -> bool:
        return self._token is not None

    def _refused(self, what: str, caller: str, authorization: str | None) -> Reply | None:
        """The answer when the call may not go on (off, no or wrong token), else None."""
        if self._token is None:
            return 404, {"error": "the control API is off: set service.control_token to "
                                  "turn it on"}
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                              self._token):
            return None
        why = "no bearer token" if not given else "wrong bearer token"
        logger.warning("control: refused %s from %s: %s", what, caller, why)
        return 401, {"error": f"{why}: send Authorization: Bearer <service.control_token>"}

    def status(self, caller: str, authorization: str | None) -> Reply:
        """``GET /status``."""
        refused = self._refused("GET /status", caller, authorization)
        if refused is not None:
            return refused
        try:
            return 200, self._on_loop(self.master.status)
        except (TimeoutError, RuntimeError) as exc:
            return 503, {"error": f"event loop: {exc!r}"}

    def act(self, path: str, caller: str, authorization: str | None) -> Reply:
        """``POST /groups/{group}/topics/{topic}/{action}``."""
        parts = path.strip("/").split("/")
        if len(parts) != 5 or parts[0] != "groups" or parts[2] != "topics" \
                or parts[4] not in ACTIONS:
            if self._token is None:
                return 404, {"error": "not found"}
            return 404, {"error": "not found: POST /groups/{group}/topics/{topic}/"
                                  f"{'|'.join(ACTIONS)}"}
        group, topic, action = unquote(parts[1]), unquote(parts[3]), parts[4]
        refused = self._refused(f"{action} of {group}/{topic}", caller, authorization)
        if refused is not None:
            return refused
        try:
            changed, paused = self._on_loop(
                lambda: self._apply(action, group, topic, caller))
        except LookupError as exc:
            return 404, {"error": str(exc.args[0] if exc.args else exc)}
        except (TimeoutError, RuntimeError) as exc:
            return 503, {"error": f"event loop: {exc!r}"}
        logger.warning("control: %s of %s/%s by %s%s", action, group, topic, caller,
                       "" if changed else " (no change: it already was)")
        return 200, {"group": group, "topic": topic, "action": action, "changed": changed,
                     "paused": paused}

    def _apply(self, action: str, group: str, topic: str,
               caller: str) -> tuple[bool, bool]:
        """On the event loop: carry ``action`` out; whether anything changed, and whether
        the topic is paused after it."""
        control = self.master.control(group, topic)
        if action == "pause":
            changed = control.pause(by=caller)
        elif action == "resume":
            changed = control.resume()
        else:
            self.master.restart(group, topic)
            changed = True
        return changed, control.paused


__all__ = ["ACTIONS", "ControlApi"]
