"""The process's shared resources (actors/resources.py): one SparkActor, made on first use
and stopped by the owner; sinks get it through their SinkContext. No JVM starts here: an
actor starts its session at its first call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from actors.errors import FatalError
from actors.resources import Resources
from actors.sinks import SinkContext
from actors.sinks.spark.sink import SparkSink, SparkSinkSettings
from processors.base import Column
from settings.models import SparkSettings

ROOT = Path(__file__).resolve().parents[2]


async def test_one_actor_until_closed_then_a_new_one() -> None:
    resources = Resources(SparkSettings(master="local[1]"))
    actor = resources.spark()
    assert resources.spark() is actor and actor.settings.master == "local[1]"
    await resources.close()
    assert "stopped" in repr(actor)
    again = resources.spark()
    assert again is not actor
    await resources.close()
    await resources.close()  # idempotent


async def test_async_with_closes() -> None:
    async with Resources() as resources:
        actor = resources.spark()
    assert "stopped" in repr(actor)


async def test_a_sink_writes_on_the_actor_of_its_context() -> None:
    async with Resources() as resources:
        sink = SparkSink(SparkSinkSettings(table="stg_x"))
        sink.bind(SinkContext(columns=(Column("a"),), resources=resources))
        assert sink._spark() is resources.spark()


def test_a_sink_without_resources_nor_actor_says_so() -> None:
    sink = SparkSink(SparkSinkSettings(table="stg_x"))
    sink.bind(SinkContext(columns=(Column("a"),)))
    with pytest.raises(FatalError, match="no SparkActor"):
        sink._spark()


def test_the_resources_load_no_spark_module_until_used() -> None:
    code = ("import sys, actors, actors.master, actors.resources; "
            "bad = [m for m in sys.modules if m.startswith(('pyspark', 'actors.sinks.spark'))]; "
            "assert not bad, bad")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
