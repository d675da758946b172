"""``kstage broker [--port N]``: run the embedded Kafka-compatible broker in the
foreground."""

from __future__ import annotations

import argparse
import signal
import threading

from service.exits import EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=9092)


def run(args: argparse.Namespace) -> int:
    from service.broker import EmbeddedBroker
    from service.logs import configure_logging

    configure_logging()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with EmbeddedBroker(port=args.port) as broker:
        print(f"embedded broker listening on {broker.bootstrap}; Ctrl-C stops it", flush=True)
        stop.wait()
    return EXIT_OK
