"""Processors for kstage's tests, registered through a dist-info on PYTHONPATH."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import os
import time
from collections.abc import Sequence
from typing import Literal

from pydantic import Field, model_validator

from actors.sinks import Sink, SinkCapabilities, SinkSettingsBase
from processors import (
    Column,
    Message,
    NoOptions,
    PoisonMessage,
    Processor,
    Row,
    decimal_type,
    timestamp_from_millis,
    with_coordinates,
)


class SlowOptions(NoOptions):
    delay_s: float = Field(0.001, ge=0, description="Sleep per message.")


class FlakyOptions(NoOptions):
    fail_times: int = Field(1_000_000, ge=0, description="Failures per offset.")


class MarkerOptions(NoOptions):
    marker: str | None = Field(None, description="File that gets the pid when it blocks.")


class SlowProcessor(Processor):
    """Sleeps ``delay_s`` per message (async), then emits the JSON object as a row."""

    name = "test_slow"
    formats = ("json",)
    options_model = SlowOptions
    options: SlowOptions

    async def transform(self, message: Message) -> Sequence[Row]:
        await asyncio.sleep(self.options.delay_s)
        return [with_coordinates(dict(message.value), message)]


class FlakyProcessor(Processor):
    """Fails for values with ``fail: true``; ``fail_times`` limits how often per offset.

    With ``marker_dir`` set, the attempts are counted in files so a retried message can
    recover (the count survives across attempts within one process).
    """

    name = "test_flaky"
    formats = ("json",)
    options_model = FlakyOptions
    options: FlakyOptions

    def __init__(self, options: dict[str, object] | None = None) -> None:
        super().__init__(options)
        self.attempts: dict[int, int] = {}

    def transform(self, message: Message) -> Sequence[Row]:
        value = message.value
        if not isinstance(value, dict):
            raise PoisonMessage("not an object")
        if value.get("fail"):
            n = self.attempts[message.offset] = self.attempts.get(message.offset, 0) + 1
            if n <= self.options.fail_times:
                raise RuntimeError(f"flaky failure {n} at offset {message.offset}")
        return [with_coordinates(dict(value), message)]


class HangProcessor(Processor):
    """Hangs forever (cancellable) on values with ``hang: true``."""

    name = "test_hang"
    formats = ("json",)
    options_model = MarkerOptions
    options: MarkerOptions

    async def transform(self, message: Message) -> Sequence[Row]:
        if message.value.get("hang"):
            marker = self.options.marker
            if marker:
                with open(marker, "w") as fh:
                    fh.write(str(os.getpid()))
            await asyncio.sleep(3600)
        return [with_coordinates(dict(message.value), message)]


class SavepointProcessor(Processor):
    """Asks for a savepoint on values with ``savepoint: true``."""

    name = "test_savepoint"
    formats = ("json",)

    def transform(self, message: Message) -> Sequence[Row]:
        return [with_coordinates(dict(message.value), message)]

    def wants_savepoint(self, message: Message) -> bool:
        return bool(message.value.get("savepoint"))


class CrashOnStartProcessor(Processor):
    """Its start() always raises: the worker crashes and is restarted, then escalates."""

    name = "test_crash_start"
    formats = ("json",)

    async def start(self) -> None:
        raise ConnectionError("cannot reach the imaginary backend")

    def transform(self, message: Message) -> Sequence[Row]:
        return []


class BlockProcessor(Processor):
    """Blocks the event loop for good (``time.sleep`` in a loop) on values with
    ``block: true``, after writing its pid to ``marker``: a processor doing blocking I/O."""

    name = "test_block"
    formats = ("json",)
    options_model = MarkerOptions
    options: MarkerOptions

    def transform(self, message: Message) -> Sequence[Row]:
        if message.value.get("block"):
            marker = self.options.marker
            if marker:
                with open(marker, "w") as fh:
                    fh.write(str(os.getpid()))
            while True:
                time.sleep(0.05)
        return [with_coordinates(dict(message.value), message)]


class TypedSinkSettings(SinkSettingsBase):
    """``sink: {type: test_typed, dir: DIR}``: a plugin sink's own settings model."""

    type: Literal["test_typed"] = Field("test_typed", description="Sink type.")
    dir: str = Field(min_length=1, description="Output directory.")


class TypedSink(Sink):
    """A plugin sink that writes typed tables (needs the processor's columns)."""

    type = "test_typed"
    settings_model = TypedSinkSettings
    capabilities = SinkCapabilities(needs_columns=True)

    def __init__(self, settings: TypedSinkSettings) -> None:
        self.settings = settings

    async def write(self, rows: Sequence[Row]) -> None:
        return None


class BadTableProcessor(Processor):
    """Declares a staging table name that is not a SQL identifier."""

    name = "test_bad_table"
    formats = ("json",)
    table = "stg-events v2"

    def transform(self, message: Message) -> Sequence[Row]:
        return [with_coordinates(dict(message.value), message)]


class PickyProcessor(Processor):
    """Checks its options in ``__init__`` without a model: a ValueError for odd ``n``."""

    name = "test_picky"
    formats = ("json",)

    def __init__(self, options: dict[str, object] | None = None) -> None:
        n = (options or {}).get("n", 0)
        if not isinstance(n, int) or n % 2:
            raise ValueError(f"n must be an even integer, got {n!r}")
        super().__init__({})

    def transform(self, message: Message) -> Sequence[Row]:
        return []


class KeyedOptions(NoOptions):
    key: list[str] = Field(min_length=1, description="The natural key's columns.")
    columns: list[str] = Field(min_length=1, description="The row's columns.")

    @model_validator(mode="after")
    def _key_in_columns(self) -> KeyedOptions:
        missing = [k for k in self.key if k not in self.columns]
        if missing:
            raise ValueError(f"key column(s) {', '.join(missing)} are not among the columns "
                             f"({', '.join(self.columns)})")
        return self


class KeyedProcessor(Processor):
    """Options with a list of key columns named ``key`` (issue 33: no secret)."""

    name = "test_keyed"
    formats = ("json",)
    options_model = KeyedOptions

    def transform(self, message: Message) -> Sequence[Row]:
        return [with_coordinates(dict(message.value), message)]


class UnkeyedProcessor(Processor):
    """Typed columns and a table, but no natural key (a JDBC upsert cannot use it)."""

    name = "test_unkeyed"
    formats = ("json",)
    table = "stg_unkeyed"
    columns = (Column("id"),)

    def transform(self, message: Message) -> Sequence[Row]:
        return [with_coordinates({"id": str(message.value)}, message)]


class VersionsProcessor(Processor):
    """Rows of versioned values under a nullable two-column key (the merge's tests):
    a JSON object ``{k1, k2, v, n}`` gives one row of those columns."""

    name = "test_versions"
    formats = ("json",)
    table = "stg_versions"
    key = ("k1", "k2")
    columns = (Column("k1"), Column("k2", "long"), Column("v"), Column("n", "long"))

    def transform(self, message: Message) -> Sequence[Row]:
        value = dict(message.value)
        return [with_coordinates({c.name: value.get(c.name) for c in self.columns}, message)]


class PaymentsProcessor(Processor):
    """Money and time columns: a JSON payment ``{id, amount, paid_ms}`` (``amount`` a
    string of digits, parsed exactly; ``paid_ms`` epoch milliseconds) gives one row with
    ``amount`` a ``decimal(12,2)`` and ``paid_at`` a ``timestamp``. A payment whose
    ``amount`` is a JSON number is passed on as the float it decoded to, so that the table
    sinks refuse it (a float for a decimal) and dead-letter the row."""

    name = "test_payments"
    formats = ("json",)
    table = "stg_payments"
    key = ("id",)
    columns = (Column("id", nullable=False), Column("amount", decimal_type(12, 2)),
               Column("paid_at", "timestamp"))

    def transform(self, message: Message) -> Sequence[Row]:
        value = message.value
        amount = value.get("amount")
        if isinstance(amount, str):
            try:
                amount = decimal.Decimal(amount)
            except decimal.InvalidOperation:
                raise PoisonMessage(f"amount {amount!r} is not a number") from None
        paid = value.get("paid_ms")
        return [with_coordinates({
            "id": value["id"], "amount": amount,
            "paid_at": None if paid is None else timestamp_from_millis(paid)}, message)]


class ShopOrdersProcessor(Processor):
    """Typed columns from a registry format's decoded dict: a shop order (Protobuf
    ``shop.Order`` of tests/proto_files.py, or a JSON Schema object of the same shape)
    ``{id, status, lines, total: {currency, units}, placed_at}`` gives one row: the enum's
    name, the number of lines, the nested money (``units`` an int64), ``placed_at`` (RFC
    3339 text, as the Protobuf ``Timestamp`` decodes) a ``timestamp``."""

    name = "test_shop_orders"
    formats = ("protobuf", "json_schema")
    table = "stg_shop_orders"
    key = ("id",)
    columns = (Column("id", nullable=False), Column("status"), Column("lines", "int"),
               Column("currency"), Column("units", "long"), Column("placed_at", "timestamp"))

    def transform(self, message: Message) -> Sequence[Row]:
        value = message.value
        total = value.get("total") or {}
        placed = value.get("placed_at")
        try:
            placed_at = None if placed is None else dt.datetime.fromisoformat(placed)
        except (TypeError, ValueError):
            raise PoisonMessage(f"placed_at {placed!r} is not RFC 3339 text") from None
        return [with_coordinates({
            "id": value["id"], "status": value.get("status"),
            "lines": len(value.get("lines") or []), "currency": total.get("currency"),
            "units": total.get("units"), "placed_at": placed_at}, message)]


class LeakyOptions(NoOptions):
    api_token: str = Field("", description="A credential (a secret by its name).")


class LeakyProcessor(Processor):
    """Fails for values with ``fail: true`` with an error that quotes ``api_token``, as a
    client library's error may quote the credentials it was given."""

    name = "test_leaky"
    formats = ("json",)
    options_model = LeakyOptions
    options: LeakyOptions

    def transform(self, message: Message) -> Sequence[Row]:
        if message.value.get("fail"):
            raise PermissionError(f"backend refused token {self.options.api_token!r}")
        return [with_coordinates(dict(message.value), message)]


NESTED_COLUMNS = (
    Column("id", nullable=False), Column("f", "float"), Column("d", "date"),
    Column("n", "timestamp_ntz"),
    Column("order", "struct<id:long NOT NULL,lines:array<struct<sku:string,qty:int NOT NULL>>,"
                    "placed:date,`unit price`:decimal(9,2)>"),
    Column("tags", "map<string,array<struct<at:timestamp_ntz,raw:binary,when:timestamp>>>"),
    Column("xs", "array<long>"))


def _typed(value: object) -> object:
    """A JSON value with its tagged objects made typed: ``{"$date": iso}`` a date,
    ``{"$ntz": iso}`` a naive datetime, ``{"$ts": iso}`` an aware one, ``{"$dec": text}``
    a Decimal, ``{"$hex": text}`` bytes; anything else as it is (so a test can give a
    value that does not fit its column)."""
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (tag, text), = value.items()
        makers = {"$date": dt.date.fromisoformat, "$ntz": dt.datetime.fromisoformat,
                  "$ts": dt.datetime.fromisoformat, "$dec": decimal.Decimal,
                  "$hex": bytes.fromhex}
        if tag in makers:
            return makers[tag](text)
    return {k: _typed(v) for k, v in value.items()}


class NestedTypesProcessor(Processor):
    """Every column type of issue 34 (float, date, timestamp_ntz, struct, array, map, a
    struct inside an array inside a map): a JSON object with those keys gives one row,
    its tagged values made typed (:func:`_typed`), the others passed on as they are."""

    name = "test_nested"
    formats = ("json",)
    table = "stg_nested"
    columns = NESTED_COLUMNS

    def transform(self, message: Message) -> Sequence[Row]:
        typed = _typed(message.value)
        assert isinstance(typed, dict)
        return [with_coordinates(typed, message)]
