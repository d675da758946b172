"""One type tree (:mod:`processors.column_types`): every tree renders to the type string
that parses back to it (backticked names, NOT NULL fields, any depth), and the trees the
Avro type map and the evolution rules make are that tree's nodes."""

from __future__ import annotations

from fastavro import parse_schema
from hypothesis import given, settings
from hypothesis import strategies as st

from processors import column_types as ct
from processors.avro_columns import avro_columns
from processors.type_evolution import fit

flats = st.sampled_from(ct.FLAT_TYPES).map(ct.Flat)
decimals = st.integers(1, ct.MAX_DECIMAL_PRECISION).flatmap(
    lambda p: st.integers(0, p).map(lambda s: ct.DecimalType(p, s)))
keys = flats | decimals
# plain names, and names that need backticks: spaces, punctuation, backticks, ':', '>'
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True) | st.text(
    st.sampled_from("ab `:<>,.- \u00e9"), min_size=1, max_size=6)


def structs(inner: st.SearchStrategy[ct.TypeNode]) -> st.SearchStrategy[ct.Struct]:
    fields = st.lists(st.tuples(names, inner, st.booleans()), min_size=1, max_size=4,
                      unique_by=lambda f: f[0])
    return fields.map(lambda fs: ct.Struct(tuple(ct.Field(*f) for f in fs)))


trees = st.recursive(
    flats | decimals,
    lambda inner: inner.map(ct.Array) | st.tuples(keys, inner).map(lambda kv: ct.Map(*kv))
    | structs(inner),
    max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(trees)
def test_every_tree_renders_to_the_string_that_parses_back_to_it(tree: ct.TypeNode) -> None:
    text = ct.type_string(tree)
    assert ct.parse_type(text) == tree
    assert ct.type_string(ct.parse_type(text)) == text  # canonical: one string a tree


def test_backticks_and_not_null_round_trip() -> None:
    inner = ct.Struct((ct.Field("x:y", ct.Map(ct.DecimalType(9, 2), ct.Flat("date"))),))
    tree = ct.Struct((ct.Field("order id", ct.Flat("long"), False),
                      ct.Field("a`b", ct.Array(inner)), ct.Field("ok", ct.Flat("int"))))
    text = ct.type_string(tree)
    assert text == ("struct<`order id`:long NOT NULL,`a``b`:array<struct<`x:y`:"
                    "map<decimal(9,2),date>>>,ok:int>")
    assert ct.parse_type(text) == tree


def test_the_avro_map_and_the_evolution_rules_make_column_types_nodes() -> None:
    schema = parse_schema({"type": "record", "name": "R", "fields": [
        {"name": "s", "type": {"type": "record", "name": "S", "fields": [
            {"name": "q", "type": "int"}]}},
        {"name": "m", "type": {"type": "map", "values": {
            "type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 1}}}]})
    columns, _ = avro_columns(schema)
    s = ct.Struct((ct.Field("q", ct.Flat("int"), False),))
    m = ct.Map(ct.Flat("string"), ct.DecimalType(5, 1))
    assert columns == (ct.Field("s", s), ct.Field("m", m))
    wider = (ct.Field("s", ct.parse_type("struct<q:long,r:string>")), ct.Field("m", m))
    table, changes = fit(columns, wider)
    assert table == (ct.Field("s", ct.parse_type("struct<q:long,r:string>")), ct.Field("m", m))
    assert [(c.kind, c.path, c.type) for c in changes] == [
        ("widen", ("s", "q"), ct.Flat("long")), ("add", ("s", "r"), ct.Flat("string"))]
