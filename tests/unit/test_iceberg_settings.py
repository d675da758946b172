"""``spark.catalog`` and ``spark.jars``: what ``kstage validate`` (and ``run``) refuse, with
file, line and key; the Spark configuration a catalog becomes; secrets never printed."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from actors.sinks.spark.catalog import catalog_conf, catalog_uri, qualified, sqlite_file
from actors.sinks.spark.jars import (
    FENCE_CATALOG,
    PINNED,
    fence_dir,
    fence_file_name,
    fetched_names,
    jar_problems,
    pom_path,
    session_jars,
)
from service.cli import main
from settings import SparkSettings

TOPIC = ("  - topics:\n      - {topic: events, processor: gobblin_compaction, format: json,\n"
         "         sink: {type: spark}}\n")


def config(tmp_path: Path, spark: str, topic: str = TOPIC) -> Path:
    """A config with ``spark:`` at line 2 (its keys from line 3) and a spark sink."""
    path = tmp_path / "kstage.yml"
    path.write_text("name: lake\nspark:\n" + textwrap.indent(textwrap.dedent(spark), "  ")
                    + "groups:\n" + topic, encoding="utf-8")
    return path


def validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["validate", "-c", str(path)])
    out, err = capsys.readouterr()
    return code, out + err


@pytest.fixture
def jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A jar directory holding every pinned jar and the fence (empty files of the right
    names)."""
    directory = tmp_path / "jars"
    directory.mkdir()
    for name in fetched_names():
        (directory / name).write_bytes(b"")
    monkeypatch.setenv("KSTAGE_JARS_DIR", str(directory))
    return directory


@pytest.mark.parametrize(("spark", "key", "line", "why"), [
    ("catalog:\n  type: hive\n", "spark.catalog.type", 4, "'jdbc' or 'rest'"),
    ("catalog:\n  uri: jdbc:mysql://h/db\n", "spark.catalog", 3,
     "a jdbc catalog's uri is jdbc:sqlite:PATH or jdbc:postgresql://HOST[:PORT]/DB"),
    ("catalog:\n  uri: 'jdbc:sqlite::memory:'\n", "spark.catalog", 3,
     "an in-memory SQLite catalog loses the tables"),
    ("catalog:\n  type: rest\n", "spark.catalog", 3, "a rest catalog needs its uri"),
    ("catalog:\n  namespace: my-ns\n", "spark.catalog.namespace", 4,
     "'my-ns' is not a SQL identifier"),
    ("warehouse: hdfs://nn/warehouse\n", "spark.warehouse", 3,
     "a warehouse is a local (or shared) path, file://, or s3://bucket/prefix"),
    ("warehouse: s3://Bad_Bucket/x\n", "spark.warehouse", 3, "is not s3://bucket[/prefix]"),
    ("warehouse: s3://bucket/tables\n", "spark", 2, "set spark.catalog.uri"),
    ("warehouse: s3://bucket/tables\ncatalog: {uri: 'jdbc:postgresql://db/cat'}\n", "spark",
     2, "set spark.catalog.s3"),
    ("catalog:\n  s3: {endpoint: 'http://127.0.0.1:9000', access_key_id: k}\n",
     "spark.catalog.s3", 4, "set access_key_id and secret_access_key together"),
    ("warehouse: ./a\ncatalog: {warehouse: ./b}\n", "spark", 2,
     "spark.warehouse ('./a') and spark.catalog.warehouse ('./b') differ"),
    ("jars: [/nowhere/iceberg.jar]\n", "spark.jars", 3,
     "/nowhere/iceberg.jar: no such jar file"),
    ("jars: ['local:/opt/jars/iceberg.jar']\n", "spark.jars", 3,
     "no kstage-iceberg-fence-*.jar listed: the catalog's commit fence"),
    ("appends: arrow\n", "spark.appends", 3, "'spark' or 'pyiceberg'"),
    ("appends: pyiceberg\ncatalog: {type: rest, uri: 'http://127.0.0.1:8181', properties: "
     "{catalog-impl: com.example.MyCatalog}}\n", "spark", 2,
     "appends: pyiceberg opens the rest catalog of spark.catalog.type itself, not the "
     "catalog class that spark.catalog.properties' catalog-impl names"),
    ("appends: pyiceberg\nstaging_write_options: {compression-codec: zstd}\n", "spark", 2,
     "staging_write_options are Spark write options, which appends: pyiceberg does not use"),
    ("flush_rest_ratio: -1\n", "spark.flush_rest_ratio", 3,
     "greater than or equal to 0"),
    ("flush_rest_ratio: lots\n", "spark.flush_rest_ratio", 3, "a valid number"),
    ("freshness_target_s: 0\n", "spark.freshness_target_s", 3, "greater than 0"),
    ("freshness_target_s: 8\n", "spark", 2, "spark.freshness_target_s (8) is above "
     "spark.flush_max_interval_s (5), the longest a row waits"),
    ("max_commits_per_s: 0\n", "spark.max_commits_per_s", 3, "greater than 0"),
    ("max_commits_per_s: 5000\n", "spark.max_commits_per_s", 3,
     "less than or equal to 1000"),
    ("flush_idle_s: 0\n", "spark.flush_idle_s", 3, "greater than 0"),
])
def test_a_bad_catalog_or_jar_setting_is_named_with_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], jars: Path, spark: str, key: str,
        line: int, why: str) -> None:
    path = config(tmp_path, spark)
    code, output = validate(path, capsys)
    assert code == 2, output
    assert f"{path}: {key} (line {line}): " in output, output
    assert why in output, output


def test_missing_fetched_jars_say_what_to_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], jars: Path) -> None:
    (jars / PINNED[0].file_name).unlink()
    code, output = validate(config(tmp_path, "master: local[1]\n"), capsys)
    assert code == 2, output
    assert "kstage.yml: spark.jars (line 2): the Iceberg jars are not fetched" in output
    assert PINNED[0].file_name in output and str(jars) in output
    assert "run `kstage jars fetch`" in output
    # The fence jar is one of them: one built from other sources is not it.
    (jars / PINNED[0].file_name).write_bytes(b"")
    (jars / fence_file_name()).rename(jars / "kstage-iceberg-fence-0000000000000000.jar")
    code, output = validate(config(tmp_path, "master: local[1]\n"), capsys)
    assert code == 2 and fence_file_name() in output, output
    # A configuration without a spark sink does not need them.
    plain = config(tmp_path, "master: local[1]\n", topic="  - topics:\n      - {topic: "
                   "events, processor: json_rows, format: json, sink: {type: 'null'}}\n")
    code, output = validate(plain, capsys)
    assert code == 0, output


def test_a_good_catalog_validates_and_its_secrets_stay_out_of_the_output(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], jars: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S3_SECRET", "s3-secret-value")
    spark = ("warehouse: s3://kstage-lake/tables\ncatalog:\n"
             "  uri: jdbc:postgresql://db:5432/cat?user=kstage&password=pg-secret-value\n"
             "  s3: {endpoint: 'http://127.0.0.1:9000', path_style_access: true,\n"
             "       access_key_id: key-id-value, secret_access_key: '${S3_SECRET}'}\n"
             "  properties: {flags: x}\n"
             "  namespace: raw\n"
             "  batch: 5\n")  # a typo: the output names the key, never the secrets
    code, output = validate(config(tmp_path, spark), capsys)
    assert code == 2 and "spark.catalog.batch" in output, output
    for secret in ("pg-secret-value", "s3-secret-value", "key-id-value"):
        assert secret not in output
    good = config(tmp_path, spark.replace("  batch: 5\n", ""))
    assert validate(good, capsys)[0] == 0


def test_the_catalog_becomes_spark_conf(tmp_path: Path) -> None:
    local = SparkSettings(warehouse=str(tmp_path / "wh"))
    conf = catalog_conf(local)
    assert conf["spark.sql.catalog.kstage"] == "org.apache.iceberg.spark.SparkCatalog"
    # The catalog is the commit fence wrapping the configured type (never both keys:
    # Iceberg refuses a catalog with `type` and `catalog-impl`).
    assert conf["spark.sql.catalog.kstage.catalog-impl"] == FENCE_CATALOG
    assert conf["spark.sql.catalog.kstage.kstage.delegate-type"] == "jdbc"
    assert "spark.sql.catalog.kstage.type" not in conf
    # A catalog class of the operator's is wrapped too, not put in the fence's place.
    custom = catalog_conf(SparkSettings(warehouse=str(tmp_path / "wh"), catalog={
        "properties": {"catalog-impl": "com.example.MyCatalog"}}))
    assert custom["spark.sql.catalog.kstage.catalog-impl"] == FENCE_CATALOG
    assert custom["spark.sql.catalog.kstage.kstage.delegate-impl"] == "com.example.MyCatalog"
    assert "spark.sql.catalog.kstage.kstage.delegate-type" not in custom
    assert conf["spark.sql.catalog.kstage.uri"] == (
        f"jdbc:sqlite:{tmp_path / 'wh' / 'catalog.db'}?journal_mode=WAL&busy_timeout=30000")
    assert conf["spark.sql.defaultCatalog"] == "kstage"
    assert conf["spark.sql.catalog.kstage.default-namespace"] == "kstage"
    assert sqlite_file(local) == tmp_path / "wh" / "catalog.db"
    assert qualified(local, "stg_x") == "`kstage`.`kstage`.`stg_x`"
    remote = SparkSettings(warehouse="s3://lake/t", catalog={
        "name": "lake", "uri": "jdbc:postgresql://db/cat", "user": "u", "password": "p",
        "namespace": "raw", "s3": {"endpoint": "http://127.0.0.1:9000", "region": "eu-west-1",
                                   "path_style_access": True, "access_key_id": "a",
                                   "secret_access_key": "b"}})
    conf = catalog_conf(remote)
    assert conf["spark.sql.catalog.lake.warehouse"] == "s3://lake/t"
    assert conf["spark.sql.catalog.lake.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf["spark.sql.catalog.lake.s3.path-style-access"] == "true"
    assert conf["spark.sql.catalog.lake.client.region"] == "eu-west-1"
    assert (conf["spark.sql.catalog.lake.jdbc.user"],
            conf["spark.sql.catalog.lake.jdbc.password"]) == ("u", "p")
    assert catalog_uri(remote) == "jdbc:postgresql://db/cat" and sqlite_file(remote) is None
    assert "p" not in repr(remote.catalog.password)


def test_the_pinned_jars_are_the_poms(tmp_path: Path, jars: Path) -> None:
    """One pin, two readers: pom.xml (for mvn) and PINNED (checksums, file names)."""
    import xml.etree.ElementTree as ET  # our own file

    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.parse(pom_path()).getroot()  # noqa: S314 - our own file
    declared = [tuple(d.find(f"m:{k}", ns).text for k in ("groupId", "artifactId", "version"))
                for d in root.iterfind("m:dependencies/m:dependency", ns)]
    assert declared == [(j.group, j.artifact, j.version) for j in PINNED]
    assert jar_problems(SparkSettings()) == []
    assert jar_problems(SparkSettings(jars=[])) == []  # the cluster's Spark has them
    assert session_jars(SparkSettings()) == [str(jars / n) for n in fetched_names()]
    listed = SparkSettings(jars=[str(jars / n) for n in fetched_names()])
    assert jar_problems(listed) == []
    # The fence compiles against the Iceberg runtime Spark loads: the same version.
    fence = ET.parse(fence_dir() / "pom.xml").getroot()  # noqa: S314 - our own file
    [(group, artifact, version, scope), hadoop] = [
        tuple(d.find(f"m:{k}", ns).text for k in ("groupId", "artifactId", "version", "scope"))
        for d in fence.iterfind("m:dependencies/m:dependency", ns)]
    runtime = PINNED[0]
    assert (group, artifact, version, scope) == (runtime.group, runtime.artifact,
                                                 runtime.version, "provided")
    # And against the Hadoop client API PySpark ships (ResolvingFileIO's Configuration).
    import pyspark

    assert hadoop[:2] == ("org.apache.hadoop", "hadoop-client-api") and hadoop[3] == "provided"
    shipped = Path(pyspark.__file__).parent / "jars" / f"hadoop-client-api-{hadoop[2]}.jar"
    assert shipped.is_file(), sorted(shipped.parent.glob("hadoop-client-api-*"))


@pytest.mark.parametrize("value", ["-1", "21", "two", "1.5", ""])
def test_metadata_read_retries_outside_0_to_20_is_refused_naming_the_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], jars: Path, value: str) -> None:
    spark = f"catalog:\n  properties: {{kstage.metadata-read-retries: '{value}'}}\n"
    code, output = validate(config(tmp_path, spark), capsys)
    assert code == 2 and "spark.catalog.properties" in output, output
    assert "kstage.metadata-read-retries is a whole number from 0 to 20" in output, output
    for good in ("0", "1", "20"):
        path = config(tmp_path, spark.replace(f"'{value}'", f"'{good}'"))
        assert validate(path, capsys)[0] == 0
