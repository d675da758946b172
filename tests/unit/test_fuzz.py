"""Fuzzing (hypothesis): bad input gets its classified error, never an unclassified crash
and never a hang.

* the JSON value and key decoders: a value or :class:`PoisonMessage`;
* the Confluent (4-byte id) and WhereHows (8-byte, 16-byte) Avro framings: a value or
  :class:`PoisonMessage` (a schema id the registry does not know included);
* the settings loader, from random YAML text, random structures of real setting names
  and random ``KSTAGE_*`` variables: a :class:`Settings` or a :class:`SettingsError`;
* the HTTP sink's URL template: a template is accepted or refused with ``ValueError``
  (what ``validate`` reports), and an accepted one renders any row to a string or
  refuses the row with its row error; no row value changes the rendered URL's origin
  (scheme, host, port) or escapes the literal path before the first field.

Each test runs ~200 examples, so they stay in ``make test``. No example has a deadline:
a time limit inside the suite fails on a loaded machine, not on slow code (it did, at
14 s for a YAML text of a few hundred nested ``[`` under a load of 9). That the work is
bounded is asserted on input far past any limit instead (``DEEP`` nesting below), and
pytest's global timeout catches a real hang.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from actors.codecs.avro import ID_SIZES, AvroDecoder, encode
from actors.codecs.schema_registry import SchemaNotFound
from actors.decoding import DECODERS, KEY_DECODERS
from actors.sinks.http.url_template import RowError, UrlTemplate
from processors.errors import PoisonMessage
from settings import ConfigFileError, Settings, SettingsError, load_settings

FUZZ = settings(max_examples=200, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])

DEEP = 100_000  # nesting far beyond Python's recursion limit


# --- JSON ------------------------------------------------------------------------------

json_text = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
).map(json.dumps)


def _mutated(text: str, cut: int, junk: bytes) -> bytes:
    raw = text.encode()
    cut = cut % (len(raw) + 1)
    return raw[:cut] + junk + raw[cut:]


json_input = (st.binary(max_size=200)
              | json_text.map(str.encode)
              | st.builds(_mutated, json_text, st.integers(0, 1000), st.binary(max_size=4))
              | st.sampled_from([b"\xef\xbb\xbf{}", "{}".encode("utf-16"), b" {} ", b"1" * 5000]))


@FUZZ
@given(json_input)
@example(b"[" * DEEP)
@example(b'{"a":' * DEEP)
@example(b"\xef\xbb\xbf" + b"[" * DEEP)
def test_json_decoders_classify_every_input(raw: bytes) -> None:
    for decode in (DECODERS["json"], KEY_DECODERS["json"], KEY_DECODERS["string"]):
        try:
            decode(raw)
        except PoisonMessage:
            pass


# --- Avro framings (Confluent int id, WhereHows long and uuid ids) ---------------------

SCHEMA = {"type": "record", "name": "R", "fields": [
    {"name": "s", "type": "string"},
    {"name": "n", "type": ["null", "long"]},
    {"name": "a", "type": {"type": "array", "items": "int"}},
    {"name": "m", "type": {"type": "map", "values": "bytes"}},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y"]}},
    {"name": "f", "type": {"type": "fixed", "name": "F", "size": 2}},
    {"name": "d", "type": "double"},
]}
RECORD = {"s": "x", "n": 5, "a": [1, 2], "m": {"k": b"v"}, "e": "Y", "f": b"ab", "d": 1.5}
KNOWN_ID = {"int": 7, "long": 7, "uuid": "0123456789abcdef0123456789abcdef"}
BROKEN_ID = {"int": 8, "long": 8, "uuid": "f" * 32}


class _Registry:
    """Knows KNOWN_ID; BROKEN_ID's schema does not parse; any other id is not found."""

    def __init__(self, id_type: str) -> None:
        self.id_type = id_type

    async def get_schema(self, schema_id: int | str) -> str:
        if schema_id == KNOWN_ID[self.id_type]:
            return json.dumps(SCHEMA)
        if schema_id == BROKEN_ID[self.id_type]:
            return '{"type": "record", "name": "R", "fields": [{"name": "x"'
        raise SchemaNotFound(f"schema {schema_id} not found", schema_id=schema_id)


def _framed(id_type: str, body: bytes, mutation: tuple[int, int] | None) -> bytes:
    valid = encode(SCHEMA, KNOWN_ID[id_type], RECORD, id_type)
    raw = valid[:1 + ID_SIZES[id_type]] + body if body else valid
    if mutation is not None:
        at, byte = mutation
        at %= len(raw)
        raw = raw[:at] + bytes([byte]) + raw[at + 1:]
    return raw


def _avro_input(id_type: str) -> st.SearchStrategy[bytes]:
    return (st.binary(max_size=40)
            | st.builds(_framed, st.just(id_type), st.binary(max_size=60),
                        st.none() | st.tuples(st.integers(0, 200), st.integers(0, 255)))
            | st.builds(lambda cut: _framed(id_type, b"", None)[:cut], st.integers(0, 60))
            | st.binary(max_size=30).map(
                lambda b: bytes(1) + _id(id_type, BROKEN_ID[id_type]) + b))


def _id(id_type: str, schema_id: int | str) -> bytes:
    if id_type == "uuid":
        return bytes.fromhex(str(schema_id))
    return int(schema_id).to_bytes(ID_SIZES[id_type], "big")


def _decode_avro(id_type: str, raw: bytes) -> None:
    decoder = AvroDecoder(_Registry(id_type), id_type)

    async def fetch_all() -> None:
        for id_bytes in decoder.missing([raw]):
            await decoder.fetch(id_bytes)

    asyncio.run(fetch_all())
    try:
        decoder.decode(raw)
    except PoisonMessage:
        pass


@FUZZ
@given(_avro_input("int"))
@example(bytes(1) + (7).to_bytes(4, "big") + b"\x02x\x00" + b"\xff" * 10)  # huge array count
def test_confluent_framing_classifies_every_input(raw: bytes) -> None:
    _decode_avro("int", raw)


@FUZZ
@given(st.sampled_from(["long", "uuid"]).flatmap(lambda t: st.tuples(st.just(t),
                                                                      _avro_input(t))))
def test_wherehows_framings_classify_every_input(case: tuple[str, bytes]) -> None:
    _decode_avro(*case)


# --- settings loader -------------------------------------------------------------------

def _load_text(text: str, environ: dict[str, str] | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kstage.yml"
        path.write_text(text, encoding="utf-8")
        try:
            loaded = load_settings(path, environ or {})
        except SettingsError:
            return
        assert isinstance(loaded, Settings)


yaml_chars = st.lists(st.sampled_from(
    list("abkz019 -:[]{},#&*!|>'\"\\%@`?$\t\n.~=_") + ["\n  ", "${", "}", "$$", "<<: ", "&a ",
                                                     "*a", "!!int ", "!!str ", "name", "groups"]),
    max_size=60).map("".join)


@FUZZ
@given(st.text(max_size=200) | yaml_chars)
@example("a: &a [*a]\n")  # a recursive alias
@example("name: a\x1fb\n")  # a control character: PyYAML's reader refuses it
@example("?\n")  # a null key
@example("1: x\n")
@example("[" * 10_000)
@example("name: " + "{a: " * 5_000)
@example("name: ${A:-${B}}\n")
def test_the_loader_classifies_random_yaml_text(text: str) -> None:
    _load_text(text, {"A": "1", "B": "x"})


SETTING_NAMES = ["name", "kafka", "bootstrap", "consumer_config", "sasl.password",
                 "supervisor", "max_restarts", "shutdown_grace_s", "service", "http_port",
                 "http_host", "groups", "topics", "topic", "processor", "json_rows", "sink",
                 "type", "jsonl", "http", "jdbc", "url", "password", "auth", "bearer",
                 "headers", "path", "failure", "mode", "commit", "options", "spark", "conf",
                 "schema_registry", "basic_auth", "bearer_token", "id_type", "merge",
                 "interval_s", "<<", "format", "avro", "batch_size", "properties"]
scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats()
           | st.sampled_from(SETTING_NAMES) | st.text(max_size=12))
structures = st.recursive(
    scalars,
    lambda inner: (st.lists(inner, max_size=3)
                   | st.dictionaries(st.sampled_from(SETTING_NAMES) | st.text(max_size=6),
                                     inner, max_size=4)),
    max_leaves=25,
)


@FUZZ
@given(st.dictionaries(st.sampled_from(SETTING_NAMES), structures, max_size=5))
def test_the_loader_classifies_random_structures(data: dict[str, Any]) -> None:
    _load_text(yaml.safe_dump(data, allow_unicode=True))


env_names = st.sampled_from(
    ["KSTAGE_NAME", "KSTAGE_KAFKA", "KSTAGE_KAFKA__BOOTSTRAP", "KSTAGE_KAFKA__CONSUMER_CONFIG",
     "KSTAGE_GROUPS", "KSTAGE_SUPERVISOR__MAX_RESTARTS", "KSTAGE_SERVICE__HTTP_PORT",
     "KSTAGE_SCHEMA_REGISTRY", "KSTAGE_SCHEMA_REGISTRY__BEARER_TOKEN", "KSTAGE_SPARK__CONF",
     "KSTAGE_SPARK", "KSTAGE_MERGE__INTERVAL_S", "KSTAGE_BOGUS"])
env_values = (st.text(max_size=40) | structures.map(json.dumps)
              | st.just("[" * 10_000) | st.just('{"a":' * 10_000))


@FUZZ
@given(st.dictionaries(env_names, env_values, max_size=4))
@example({"KSTAGE_KAFKA": "[" * 10_000})
def test_the_loader_classifies_random_environment(environ: dict[str, str]) -> None:
    _load_text("name: fuzz\n", {k: v.replace("\x00", "") for k, v in environ.items()})


# --- HTTP sink URL template ------------------------------------------------------------

template_text = (st.text(max_size=60)
                 | st.builds(lambda a, b: f"https://api.example.com/{a}{{{b}}}",
                             st.text(max_size=20), st.text(max_size=20))
                 | st.sampled_from(["https://{host}/x", "https://api.example.com{path}",
                                    "http://h/{a:>5}", "http://h/{a!r}", "http://h/{0}",
                                    "http://h/{a.b}", "http://h/{a[0]}", "http://h/{",
                                    "http://h/}", "http://u@h/{a}", "ftp://h/{a}"]))
row_values = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
              | st.lists(st.integers(), max_size=3)
              | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@FUZZ
@given(template_text, st.dictionaries(st.sampled_from(["a", "b", "host", "path", "x"])
                                      | st.text(max_size=5), row_values, max_size=4))
def test_the_url_template_classifies_every_template_and_row(template: str,
                                                            row: dict[str, Any]) -> None:
    try:
        compiled = UrlTemplate(template)
    except ValueError:
        return
    try:
        assert isinstance(compiled.render(row), str)
    except RowError:
        pass



origins = st.sampled_from(["https://api.example.com", "http://127.0.0.1:8080",
                           "https://api.example.com:8443", "http://h"])
# the literal path before the first field; empty: the field touches the host (refused)
heads = st.from_regex(r"(/[a-z0-9/-]{0,8})?", fullmatch=True)
# literal text after a field: any characters a template may hold, '/' '?' '.' included
literals = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="{}#"),
                   max_size=6)
hostile_values = (row_values | st.sampled_from(["..", ".", "", "/", "//evil.com", "@evil.com",
                                                "evil.com:1", ".evil.com", "%2e%2e", "?a#c"])
                  | st.text(st.sampled_from("./?#@:%\\ab"), max_size=8))


@FUZZ
@given(origins, heads, st.lists(st.tuples(st.sampled_from(["a", "b"]), literals), min_size=1,
                                max_size=4),
       st.dictionaries(st.sampled_from(["a", "b"]), hostile_values, max_size=2))
def test_no_row_value_changes_the_origin_or_leaves_the_path(
        origin: str, head: str, fields: list[tuple[str, str]], row: dict[str, Any]) -> None:
    """The template's scheme, host and port are its own: whatever the row holds, the
    rendered URL (as httpx will send it) has that origin and keeps the literal path that
    precedes the first field; or the template, or the row, is refused."""
    template = origin + head + "".join(f"{{{name}}}{text}" for name, text in fields)
    try:
        compiled = UrlTemplate(template)
    except ValueError:
        return
    try:
        url = httpx.URL(compiled.render(row))
    except RowError:
        return
    expected = httpx.URL(origin + head)
    assert (url.scheme, url.host, url.port) == (expected.scheme, expected.host, expected.port)
    assert url.raw_path.startswith(expected.raw_path.split(b"?")[0])


# --- what the fuzzing found, as plain regression tests --------------------------------

@pytest.mark.timeout(60)
def test_an_alias_bomb_is_refused_not_expanded(tmp_path: Path) -> None:
    """Eight levels of ten aliases (10^8 values, "billion laughs"): the loader walked every
    expanded value and hung; now a ConfigFileError names the limit."""
    lines = ["a0: &a0 [" + ", ".join(["x"] * 10) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    path = tmp_path / "kstage.yml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigFileError, match="expands to more than 100000 keys and items"):
        load_settings(path, {})


@pytest.mark.parametrize(("text", "message"), [
    ("name: a\x1fb\n", "invalid YAML: unacceptable character #x001f"),
    ("?\n", ":1: a top-level key is not a setting name"),
    ("name: x\n1: y\n", ":2: a top-level key is not a setting name"),
])
def test_unusual_yaml_is_a_config_file_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "kstage.yml"
    path.write_text(text)
    with pytest.raises(ConfigFileError, match=message):
        load_settings(path, {})


def test_deeply_nested_json_is_poison_and_settings_errors() -> None:
    with pytest.raises(PoisonMessage, match="nested deeper"):
        DECODERS["json"](b"[" * DEEP)
    with pytest.raises(PoisonMessage, match="key is not decodable JSON"):
        KEY_DECODERS["json"](b"{\"a\":" * DEEP)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kstage.yml"
        path.write_text("name: x\n")
        with pytest.raises(SettingsError, match="nested too deeply"):
            load_settings(path, {"KSTAGE_KAFKA": "[" * DEEP})
