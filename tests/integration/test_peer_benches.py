"""The peer benchmarks' short variant runs to its last line (no figure is asserted: they
depend on the machine's load).

``bench/peers/both.py`` starts an Apache Kafka broker (tests/apache_kafka.py; here it
runs on the session's shared node, ``--bootstrap``), runs kstage, Spark Structured
Streaming and Kafka Connect with Iceberg's sink over the same 3 000 events (and 3 s of
paced ones), reads every table back with pyiceberg and compares its layout with kstage's,
and draws the picture of the three freshness runs (an SVG: a freshness line and a
data-files line per system, and a legend naming each). Its runs are those of
``bench/peers/spark_streaming.py`` and ``bench/peers/kafka_connect.py`` (their functions,
kstage's runs once); those two scripts add only their command lines, which
tests/unit/test_docs.py parses where the docs show them.
They need the jars of ``make kafka-jars peer-jars`` and ``kstage jars fetch`` (``make
test`` fetches them).
"""

from __future__ import annotations

import asyncio
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.kafkautil import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.apache_kafka]

_FIGURES = (r"{}: \d+ events/s \(3000 in [\d.]+ s\), freshness p50 -?\d+ ms p99 -?\d+ ms "
            r"\(\d+ events at \d+/s after \d+ of warm-up\), CPU [\d.]+ s/100k \(JVM [\d.]+\), "
            r"peak RSS \d+ MB, [\d.]+ data files/100k \(after the freshness run \d+: "
            r"[\d.]+/100k\); ")
_RATIOS = r"kstage/{}: events_s=[\d.]+ p99=-?[\d.]+ cpu=[\d.]+ rss=[\d.]+ files=[\d.]+"


async def _run(script: str, picture: Path, bootstrap: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bench" / "peers" / script), "--messages", "3000",
        "--fresh-s", "2", "--warm-s", "1", "--picture", str(picture),
        "--bootstrap", bootstrap, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 400)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    return text


def drawn(picture: Path, text: str, systems: tuple[str, ...]) -> None:
    """The run said where its picture went, and the picture is SVG with a freshness line
    and a data-files line per system and a legend line naming each."""
    assert f"picture: {picture}" in text, text
    root = ET.parse(picture).getroot()  # noqa: S314 - the file the run just wrote
    svg = "{http://www.w3.org/2000/svg}"
    lines = root.findall(f"{svg}polyline")
    assert len(lines) == 2 * len(systems), [line.attrib for line in lines]
    legends = [t.text or "" for t in root.findall(f"{svg}text")]
    for system in systems:
        assert any(t.startswith(f"{system}: p50 ") for t in legends), legends


@pytest.mark.timeout(420)
async def test_the_short_run_of_both_peers_prints_the_three_systems_and_the_ratios(
        tmp_path: Path, apache_kafka_broker: str) -> None:
    text = await _run("both.py", tmp_path / "peers.svg", apache_kafka_broker)
    systems = ("kstage", "spark_streaming", "kafka_connect")
    drawn(tmp_path / "peers.svg", text, systems)
    for system in systems:
        assert re.search("^" + _FIGURES.format(system), text, re.MULTILINE), text
    last = "; ".join(_RATIOS.format(peer) for peer in systems[1:])
    assert re.fullmatch(last, text.strip().splitlines()[-1]), text
