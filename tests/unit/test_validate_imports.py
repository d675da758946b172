"""``kstage validate`` imports what its configuration needs, nothing more: the checks of a
JSON topic writing JSON lines load neither Spark nor a Kafka client, the worker, the
master, the table jobs, the Avro codecs nor the embedded broker. A spark sink over a
registry-typed (``schema_rows``) topic loads the spark sink's checks and what fetches the
topic's latest writer schema, still no pyspark, Kafka client, worker or table job. The
import set is what makes ``validate`` quick (issue 36: under 0.3 s); its time is
measured by hand (docs/benchmarks.md), never asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fake_registry import FakeRegistry

ROOT = Path(__file__).resolve().parents[2]

# Never needed to check a configuration: the running parts, a Kafka client, Spark.
NEVER = ("pyspark", "aiokafka", "kafka", "actors.worker", "actors.master",
         "actors.supervisor", "actors.tables.merge", "actors.tables.maintenance",
         "actors.tables.migrate", "service.broker",
         "service.http", "service.lifecycle", "opentelemetry", "pyiceberg")
# Needed only by what a configuration uses: KSTAGE_* variables (read by
# pydantic-settings), Avro, a registry, the spark sink, the Iceberg tables kstage writes.
ONLY_IF_USED = ("pydantic_settings", "fastavro", "actors.codecs.avro",
                "actors.codecs.schema_registry", "httpx", "actors.sinks.spark", "actors.tables",
                "actors.sinks.http", "sqlite3", "pyarrow")
# Not needed to check a file that names no TLS file, no spark sink and no unknown name:
# an event loop (a jsonl sink's module used to import asyncio for its writes), TLS
# (loaded only to check ssl.* files), the "did you mean" matcher (only for a near miss).
NOT_FOR_A_PLAIN_FILE = ("asyncio", "ssl", "difflib")

_PROBE = """\
import sys
from service.cli import main
code = main(["validate", "-c", sys.argv[1]])
print(code)
print(" ".join(sorted(sys.modules)))
"""


def imported_by_validate(config: Path, **variables: str) -> set[str]:
    """The modules a ``kstage validate -c CONFIG`` process holds when done (exit 0), in
    an environment without ``KSTAGE_*`` variables but ``variables``."""
    env = {name: value for name, value in os.environ.items()
           if not name.upper().startswith("KSTAGE_")}
    env.update(variables, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(config)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    code, modules = proc.stdout.strip().splitlines()[-2:]
    assert code == "0", proc.stdout + proc.stderr
    return set(modules.split())


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The ``names`` among ``modules``, a package counting with its submodules."""
    return [name for name in names
            if any(m == name or m.startswith(name + ".") for m in modules)]


def test_validate_of_a_json_topic_to_jsonl_imports_only_the_settings_and_checks() -> None:
    modules = imported_by_validate(ROOT / "kstage.yml")
    assert loaded(modules, NEVER + ONLY_IF_USED + NOT_FOR_A_PLAIN_FILE) == []
    assert {"actors.preflight", "processors.json_rows", "settings.loader"} <= modules


def test_kstage_variables_load_the_environment_source() -> None:
    modules = imported_by_validate(ROOT / "kstage.yml", KSTAGE_NAME="from-env")
    assert loaded(modules, ("pydantic_settings",)) == ["pydantic_settings"]


def test_validate_of_a_spark_sink_over_a_registry_typed_topic_imports_no_running_part(
        tmp_path: Path) -> None:
    order = {"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
    with FakeRegistry() as registry:
        registry.register("orders-value", json.dumps(order))
        path = tmp_path / "kstage.yml"
        path.write_text(
            f"name: imports\nschema_registry: {{url: \"{registry.url}\"}}\ngroups:\n"
            "  - topics:\n      - topic: orders\n        format: avro\n"
            "        processor: schema_rows\n        sink:\n          type: spark\n"
            "          table: orders\n          partition_by: [\"day(ts)\"]\n"
            f"spark: {{warehouse: \"{tmp_path / 'wh'}\"}}\n", encoding="utf-8")
        modules = imported_by_validate(path)
        fetched = [r.path for r in registry.requests if "orders-value" in r.path]
    assert fetched, "the partition spec was not checked against the latest schema"
    assert loaded(modules, NEVER) == []
    assert {"actors.sinks.spark.layout_check", "fastavro"} <= modules


_EXIT_PROBE = """\
import atexit
import gc
import sys

atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count()))
sys.argv = ["kstage", "validate", "-c", sys.argv[1]]
from service.cli import entry
entry()
"""


def test_the_command_line_freezes_its_heap_before_the_interpreter_exits() -> None:
    """The interpreter's last collection walks every object the settings models made
    (~20-80 ms of a 0.3 s ``validate``) to free nothing that outlives the process: the
    command line moves them out of its reach once the command returned."""
    env = {name: value for name, value in os.environ.items()
           if not name.upper().startswith("KSTAGE_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-c", _EXIT_PROBE, str(ROOT / "kstage.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    frozen = int(proc.stdout.strip().splitlines()[-1].removeprefix("frozen at exit:"))
    assert frozen > 10_000, proc.stdout
