"""``spark.appends: pyiceberg`` on a ``rest`` catalog: the pyiceberg ``RestCatalog``
properties ``spark.catalog`` becomes (the same uri, warehouse and S3 store as Spark's
catalog; the OAuth2 secret not among them), ``validate`` accepting it with and without
``oauth2``, and the commit-time fence of the catalog's ``commit_table`` (refused before
anything is sent; otherwise sent asserting ``main`` where the checked metadata has it; a
401/419 answer sent again once with a new token)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import AuthorizationExpiredError, UnauthorizedError
from pyiceberg.table.refs import SnapshotRef, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId

from actors.sinks.spark import iceberg
from actors.sinks.spark.pyiceberg_catalog import missing_modules
from actors.sinks.spark.pyiceberg_rest import _fenced_rest_class, rest_properties
from service.cli import main
from settings import SparkSettings

SECRET = "rest-oauth-secret-31"  # noqa: S105 - a test value, looked for
STREAM = ("g", "events", 0)


def settings(**catalog: Any) -> SparkSettings:
    return SparkSettings.model_validate({
        "appends": "pyiceberg", "warehouse": "s3://lake/wh",
        "catalog": {"type": "rest", "uri": "https://catalog.example.com/iceberg",
                    "s3": {"endpoint": "http://127.0.0.1:9000", "path_style_access": True,
                           "access_key_id": "k", "secret_access_key": "s"}, **catalog}})


def test_the_rest_catalog_is_sparks_uri_warehouse_and_store_without_the_secret() -> None:
    oauth = settings(oauth2={"token_url": "https://idp.example.com/token",
                             "client_id": "kstage", "client_secret": SECRET},
                     properties={"header.X-Tenant": "t1", "io-impl": "x.Y"})
    props = rest_properties(oauth)
    assert props == {"uri": "https://catalog.example.com/iceberg", "warehouse": "s3://lake/wh",
                     "s3.region": "us-east-1", "s3.force-virtual-addressing": "false",
                     "s3.endpoint": "http://127.0.0.1:9000", "s3.access-key-id": "k",
                     "s3.secret-access-key": "s", "header.X-Tenant": "t1"}
    assert SECRET not in str(props)
    # Without oauth2, a login in the properties means the same to pyiceberg.
    plain = rest_properties(settings(properties={"token": "t", "scope": "catalog x"}))
    assert plain["token"] == "t"  # noqa: S105 - a test value
    assert plain["scope"] == "catalog x"
    assert missing_modules(oauth) == []  # no SQLAlchemy needed


@pytest.mark.parametrize("oauth2", [False, True])
def test_validate_accepts_pyiceberg_appends_on_a_rest_catalog(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], oauth2: bool) -> None:
    login = ("    oauth2: {token_url: 'https://idp.example.com/token', client_id: kstage, "
             f"client_secret: {SECRET}}}\n") if oauth2 else ""
    path = tmp_path / "kstage.yml"
    path.write_text("name: lake\nspark:\n  appends: pyiceberg\n  jars: []\n"
                    "  warehouse: s3://lake/wh\n  catalog:\n    type: rest\n"
                    "    uri: https://catalog.example.com/iceberg\n"
                    "    s3: {region: eu-west-1}\n" + login + textwrap.dedent(
                        """\
                        groups:
                          - topics:
                              - {topic: events, processor: gobblin_compaction, format: json,
                                 sink: {type: spark}}
                        """), encoding="utf-8")
    code = main(["validate", "-c", str(path)])
    output = "".join(capsys.readouterr())
    assert code == 0, output
    assert SECRET not in output


def snapshot(snapshot_id: int, parent: int | None, **summary: str) -> Snapshot:
    return Snapshot(snapshot_id=snapshot_id, parent_snapshot_id=parent, sequence_number=1,
                    timestamp_ms=1, manifest_list="s3://lake/m.avro", schema_id=0,
                    summary=Summary(Operation.APPEND, **summary))


def table(recorded: int) -> Any:
    """A table whose main branch records ``STREAM`` at ``recorded``."""
    head = snapshot(7, None, **{iceberg.OFFSETS: iceberg.format_offsets({STREAM: recorded})})
    metadata = SimpleNamespace(
        refs={"main": SnapshotRef(snapshot_id=7, snapshot_ref_type=SnapshotRefType.BRANCH)},
        snapshots=[head], current_snapshot_id=7)
    return SimpleNamespace(metadata=metadata, name=lambda: ("kstage", "stg_events"))


def appending(expect: int) -> tuple[Any, ...]:
    return (AddSnapshotUpdate(snapshot=snapshot(
        8, 7, **{iceberg.EXPECT: iceberg.format_offsets({STREAM: expect}),
                 iceberg.OFFSETS: iceberg.format_offsets({STREAM: expect + 10})})),)


def test_the_rest_catalogs_commit_is_fenced_before_it_is_sent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(RestCatalog, "commit_table",
                        lambda self, tbl, requirements, updates: sent.append(requirements))
    cls = _fenced_rest_class()
    catalog = cls.__new__(cls)  # no server: commit_table alone
    catalog.name, catalog.tokens = "kstage", None
    with pytest.raises(Exception) as refused:
        catalog.commit_table(table(recorded=120), (), appending(expect=100))
    assert iceberg.fence_refusal(refused.value) is not None
    assert "kstage.kstage.stg_events" in str(refused.value) and not sent
    # Where the table holds it: sent, asserting main at the base the fence checked.
    catalog.commit_table(table(recorded=100), (), appending(expect=100))
    assert sent == [(AssertRefSnapshotId(ref="main", snapshot_id=7),)]
    mine = AssertRefSnapshotId(ref="main", snapshot_id=7)
    catalog.commit_table(table(recorded=100), (mine,), appending(expect=100))
    assert sent[-1] == (mine,)


def test_the_rest_catalogs_commit_carries_the_offsets_of_its_base(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The snapshot's kstage.offsets are made again on the base the commit is sent on
    (actors/sinks/spark/carried_offsets.py): computed on an older base without another
    writer's partition, they get its offset from the base's current snapshot."""
    sent: list[Any] = []
    monkeypatch.setattr(RestCatalog, "commit_table",
                        lambda self, tbl, requirements, updates: sent.append(updates))
    cls = _fenced_rest_class()
    catalog = cls.__new__(cls)
    catalog.name, catalog.tokens = "kstage", None
    other = ("g", "other", 0)
    base = table(recorded=100)
    base.metadata.snapshots[0].summary[iceberg.OFFSETS] = iceberg.format_offsets(
        {STREAM: 100, other: 42})
    catalog.commit_table(base, (), appending(expect=100))
    (update,) = sent[-1]
    assert iceberg.parse_offsets(update.snapshot.summary[iceberg.OFFSETS]) == {
        STREAM: 110, other: 42}


@pytest.mark.parametrize("answer", [UnauthorizedError, AuthorizationExpiredError])
def test_a_commit_the_server_refuses_the_token_of_is_sent_again_with_a_new_one(
        monkeypatch: pytest.MonkeyPatch, answer: type[Exception]) -> None:
    """401 (or 419): the server applied nothing; the token is dropped and the commit sent
    once more; refused again, the error is raised."""
    answers: list[Exception | None] = [answer("refused"), None, answer("a"), answer("b")]
    dropped: list[bool] = []

    def commit(self: Any, tbl: Any, requirements: Any, updates: Any) -> str:
        found = answers.pop(0)
        if found is not None:
            raise found
        return "committed"

    monkeypatch.setattr(RestCatalog, "commit_table", commit)
    cls = _fenced_rest_class()
    catalog = cls.__new__(cls)
    catalog.name = "kstage"
    catalog.tokens = SimpleNamespace(refused=lambda: dropped.append(True),
                                     oauth2=SimpleNamespace(token_url="https://idp/t"))  # noqa: S106
    assert catalog.commit_table(table(recorded=100), (), appending(expect=100)) == "committed"
    assert dropped == [True]
    with pytest.raises(answer):
        catalog.commit_table(table(recorded=100), (), appending(expect=100))
    assert dropped == [True, True] and not answers
