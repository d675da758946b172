"""``kstage ctl status|pause|resume|restart``: the control API of a running ``kstage run``
(``service.control_token``)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from service.exits import EXIT_OK

if TYPE_CHECKING:
    from settings.models import Settings

_ACTIONS = (("status", "every group, topic and partition with its state, offsets, lag and "
                       "last error"),
            ("pause", "pause a topic's partitions (membership kept)"),
            ("resume", "resume a paused topic"),
            ("restart", "restart a topic's worker (it commits first)"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="ctl_command", required=True)
    for name, what in _ACTIONS:
        cmd = sub.add_parser(name, help=what)
        cmd.add_argument("-c", "--config", default="kstage.yml")
        cmd.add_argument("--url", default=None,
                         help="the process's status server (default: the config's "
                              "service.http_host and http_port)")
        if name == "status":
            cmd.add_argument("--json", action="store_true", help="print the JSON answer")
        else:
            cmd.add_argument("--topic", required=True)
            cmd.add_argument("--group", default=None,
                             help="the group (needed when several groups consume the topic)")


def run(args: argparse.Namespace) -> int:
    from service.commands.common import operate

    def body(settings: Settings) -> int:
        from service.ops import ctl

        if args.ctl_command == "status":
            status = ctl.call(settings, "GET", "/status", args.url)
            print(json.dumps(status, indent=2) if args.json
                  else "\n".join(ctl.status_lines(status)))
            return EXIT_OK
        print(ctl.act(settings, args.ctl_command, args.topic, args.group, args.url))
        return EXIT_OK

    return operate(args, body)
