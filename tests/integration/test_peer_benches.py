"""The peer benchmarks' short variants run to their last line (no figure is asserted: they
depend on the machine's load).

``bench/peers/spark_streaming.py`` and ``bench/peers/kafka_connect.py`` each start an
Apache Kafka broker (tests/apache_kafka.py; here they run on the session's shared node,
``--bootstrap``), run kstage and a peer (Spark Structured Streaming; Kafka Connect with
Iceberg's sink) over the same 3 000 events (and 3 s of paced ones), read every table back
with pyiceberg and compare its layout with kstage's, and draw the picture of both
freshness runs (an SVG: a freshness line and a data-files line per system, and a legend
naming each).
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
    out, _ = await asyncio.wait_for(proc.communicate(), 280)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    return text


def drawn(picture: Path, text: str, systems: tuple[str, str]) -> None:
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


@pytest.mark.timeout(300)
async def test_the_short_spark_streaming_run_prints_both_systems_and_the_ratios(
        tmp_path: Path, apache_kafka_broker: str) -> None:
    text = await _run("spark_streaming.py", tmp_path / "peers.svg", apache_kafka_broker)
    drawn(tmp_path / "peers.svg", text, ("kstage", "spark_streaming"))
    for system in ("kstage", "spark_streaming"):
        assert re.search("^" + _FIGURES.format(system), text, re.MULTILINE), text
    assert re.fullmatch(_RATIOS.format("spark_streaming"), text.strip().splitlines()[-1]), text


@pytest.mark.timeout(300)
async def test_the_short_kafka_connect_run_prints_both_systems_and_the_ratios(
        tmp_path: Path, apache_kafka_broker: str) -> None:
    text = await _run("kafka_connect.py", tmp_path / "peers.svg", apache_kafka_broker)
    drawn(tmp_path / "peers.svg", text, ("kstage", "kafka_connect"))
    for system in ("kstage", "kafka_connect"):
        assert re.search("^" + _FIGURES.format(system), text, re.MULTILINE), text
    assert re.fullmatch(_RATIOS.format("kafka_connect"), text.strip().splitlines()[-1]), text
