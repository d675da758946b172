"""The values a processor may give ``timestamp`` and ``decimal(P,S)`` columns (see
processors.base.ColumnType): what is taken, what it becomes, and what is refused, with a
reason naming the column (the row is then dead-lettered by its sink)."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pytest

from actors.sinks.table.columns import COORDINATES
from actors.sinks.table.rows import check, check_rows, record_batch
from processors import testing
from processors.base import Column, decimal_type, timestamp_from_millis
from tests.doc_blocks import run_block

MONEY = Column("amount", "decimal(7,2)")
AT = Column("at", "timestamp")
PLUS2 = dt.timezone(dt.timedelta(hours=2))


@pytest.mark.parametrize(("given", "stored"), [
    (Decimal("1.5"), Decimal("1.50")), (Decimal("12345.67"), Decimal("12345.67")),
    (Decimal("-0.10"), Decimal("-0.10")), (Decimal("1.500"), Decimal("1.50")),
    (7, Decimal("7.00")), (Decimal("0"), Decimal("0.00")), (None, None)])
def test_a_decimal_takes_decimals_and_ints_at_its_scale(given: object, stored: object) -> None:
    out = check(given, MONEY)
    assert out == stored and (out is None or str(out) == str(stored))


@pytest.mark.parametrize(("given", "why"), [
    (1.5, "is a float, not a decimal(7,2)"),
    ("1.50", "(str) is not a decimal(7,2)"),
    (True, "(bool) is not a decimal(7,2)"),
    (Decimal("NaN"), "is not a finite number"),
    (Decimal("Infinity"), "is not a finite number"),
    (Decimal("1.005"), "more than 2 digit(s) after the point of decimal(7,2); it is refused, "
                       "not rounded"),
    (Decimal("123456.7"), "more than 5 digit(s) before the point"),
    (100000, "more than 5 digit(s) before the point"),
    (Decimal("1E+30"), "more than 5 digit(s) before the point"),
    (Decimal("1E-30"), "more than 2 digit(s) after the point")])
def test_a_decimal_refuses_floats_strings_and_what_it_would_round(given: object,
                                                                  why: str) -> None:
    with pytest.raises(ValueError) as caught:
        check(given, MONEY)
    assert why in str(caught.value)


def test_a_timestamp_takes_aware_datetimes_as_their_utc_instant() -> None:
    out = check(dt.datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=PLUS2), AT)
    assert out == dt.datetime(2026, 3, 1, 10, 0, 0, 123456, tzinfo=dt.UTC)
    assert out.utcoffset() == dt.timedelta(0)
    assert timestamp_from_millis(1_700_000_000_123) == dt.datetime(
        2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)


@pytest.mark.parametrize(("given", "why"), [
    (dt.datetime(2026, 3, 1), "has no time zone"),
    (1_700_000_000_000, "(int) is not a timestamp"),
    ("2026-03-01T00:00:00Z", "(str) is not a timestamp"),
    (dt.date(2026, 3, 1), "(date) is not a timestamp")])
def test_a_timestamp_refuses_naive_datetimes_numbers_and_strings(given: object,
                                                                 why: str) -> None:
    with pytest.raises(ValueError) as caught:
        check(given, AT)
    assert why in str(caught.value)


def test_a_refused_value_names_the_table_the_coordinates_and_the_column() -> None:
    rows = [{"amount": Decimal("2.25"), "at": None, "_topic": "t", "_partition": 0,
             "_offset": 1},
            {"amount": 2.25, "at": None, "_topic": "t", "_partition": 0, "_offset": 2}]
    good, bad = check_rows(rows, [MONEY, AT], "table s.pay")
    assert good == [(Decimal("2.25"), None)]
    assert bad == [(rows[1], "table s.pay: row at topic 't' partition 0 offset 2: column "
                             "'amount': value 2.25 is a float, not a decimal(7,2): a float is "
                             "not the amount it was meant to be; give a decimal.Decimal (or an "
                             "int)")]


def test_arrow_carries_them_exactly() -> None:
    rows = [{"amount": Decimal("99999.99"), "at": dt.datetime(2026, 1, 1, 1, tzinfo=PLUS2)},
            {"amount": -3, "at": None},
            {"amount": Decimal("0.001"), "at": None},  # refused: not rounded to 0.00
            {"amount": Decimal("1"), "at": dt.datetime(2026, 1, 1)}]  # refused: naive
    batch, rejected = record_batch(rows, [MONEY, AT], "t")
    assert [str(f.type) for f in batch.schema] == ["decimal128(7, 2)", "timestamp[us, tz=UTC]"]
    assert batch.column(0).to_pylist() == [Decimal("99999.99"), Decimal("-3.00")]
    assert batch.column(1).to_pylist()[0] == dt.datetime(2025, 12, 31, 23, tzinfo=dt.UTC)
    assert [r for r, _ in rejected] == rows[2:]
    # a batch that fits goes the column-wise way, converted too
    fine, none = record_batch(rows[:2], [MONEY, AT], "t")
    assert none == [] and fine.column(0).to_pylist() == [Decimal("99999.99"), Decimal("-3.00")]


def test_rows_that_are_mappings_but_not_dicts_are_gathered_too() -> None:
    """The column gather maps ``dict.get`` over the rows; a processor's row may be any
    mapping (a dict subclass, a MappingProxyType) and a missing key is a null."""
    from types import MappingProxyType

    class Row(dict[str, object]):
        pass

    name = Column("name", "string", True)
    rows = [Row(name="a"), MappingProxyType({"name": "b"}), {}]
    batch, rejected = record_batch(rows, [name], "t")  # type: ignore[arg-type]
    assert rejected == [] and batch.column(0).to_pylist() == ["a", "b", None]


@pytest.mark.parametrize("bad", ["decimal(0,0)", "decimal(39,1)", "decimal(4,5)",
                                 "decimal(4, 2)", "decimal", "money", "timestamptz"])
def test_a_column_of_no_type_is_refused_when_declared(bad: str) -> None:
    with pytest.raises(ValueError,
                       match=re.escape(f"column 'x': type '{bad}' is not a column type: ")):
        Column("x", bad)
    assert decimal_type(38, 0) == "decimal(38,0)"
    with pytest.raises(ValueError, match="decimal.39,2. is not a decimal type"):
        decimal_type(39, 2)


def test_the_plugin_guides_money_and_time_example_gives_rows_that_fit() -> None:
    """docs/plugins.md's Payments processor runs, and its rows fit its columns."""
    payments = run_block("docs/plugins.md", "class Payments(Processor)")["Payments"]()
    rows = payments.transform(testing.message(
        {"id": "p1", "amount": "12.34", "paid_ms": 1_700_000_000_123}, offset=5))
    good, bad = check_rows(rows, (*payments.columns, *COORDINATES), "stg_payments")
    assert bad == []
    assert good[0][:3] == ("p1", Decimal("12.34"), dt.datetime(2023, 11, 14, 22, 13, 20, 123000,
                                                               tzinfo=dt.UTC))
