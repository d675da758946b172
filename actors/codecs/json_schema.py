"""JSON values in the Confluent wire format, checked against their writer JSON Schema.

Wire format: the header of :mod:`~actors.codecs.by_id` (magic byte ``0``, the schema id),
then the value as UTF-8 JSON text (what confluent-kafka's ``JSONSerializer`` writes). A
processor gets the parsed JSON, as for ``format: json``.

With ``validate_schema: true`` (the default) every value is validated against the
writer schema of its id (the ``jsonschema`` library, the draft the schema's ``$schema``
names, draft 2020-12 without one; ``references`` are fetched from the registry and
resolved by their ``name``, the ``$ref`` URL the schema uses), as Confluent's
``JSONDeserializer`` does: a value the schema refuses is poison, dead-lettered with the
failing path. ``false`` only parses the JSON (the schema id must still exist).

Validation is bounded when the decoder has a sandbox (the worker's, ``dlq replay``'s):
:meth:`JsonSchemaDecoder.screen` validates a batch's values in a child process, each
within ``validate_budget_s`` (:mod:`actors.codecs.sandbox`), and :meth:`decode` then only
parses. Without one (tools, tests) :meth:`decode` validates inline.

Poison (the dead-letter line names the schema id): a schema that is not a valid JSON
Schema, a body that is not JSON, a value its schema refuses, a value whose validation
took more than its budget.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import validators
from jsonschema.exceptions import SchemaError, best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from actors.codecs.by_id import SchemaIdDecoder, poison
from actors.codecs.references import RegisteredSource, fetch_references
from actors.codecs.sandbox import OVER_BUDGET, Validator
from processors.errors import PoisonMessage
from processors.json_schema_columns import JsonWriterSchema
from processors.jsonfast import loads


@dataclass(frozen=True, slots=True)
class _Checked:
    """What an id's values are validated with: the validator (inline; None with
    ``validate_schema: false``), the schema's texts (for the sandbox's child) and the
    parsed schema (for a processor that reads writer schemas)."""

    validator: Any
    texts: tuple[str, dict[str, str]]
    schema: JsonWriterSchema


class JsonSchemaDecoder(SchemaIdDecoder):
    """Decodes wire-format JSON with writer JSON Schemas from a registry, cached by id.

    Args:
        source: the registry server's client (schemas with types and references).
        validate: validate each value against its writer schema.
        sandbox: validate off the event loop, within a budget (:meth:`screen`); None:
            inline, in :meth:`decode`.
        id_type, not_found_retry_s, clock: as :class:`~actors.codecs.by_id.SchemaIdDecoder`.
    """

    format_name = "JSON Schema"

    def __init__(self, source: RegisteredSource, id_type: str = "int", *,
                 validate: bool = True, not_found_retry_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic,
                 sandbox: Validator | None = None) -> None:
        super().__init__(source, id_type, not_found_retry_s=not_found_retry_s, clock=clock)
        self.validate = validate
        self.sandbox = sandbox if validate else None

    async def build(self, id_bytes: bytes, schema_id: int | str) -> Any:
        registered = await self._source.get_registered(schema_id)
        if registered.schema_type != "JSON":
            raise PoisonMessage(f"schema id {schema_id} is a {registered.schema_type} schema, "
                                "not JSON (the topic's format is json_schema)")
        texts: dict[str, str] = {}
        await fetch_references(self._source, registered.references, texts)
        validator = (_validator(schema_id, registered.schema, texts) if self.validate
                     else None)
        try:  # validated already, unless validate_schema: false
            parsed = json.loads(registered.schema)
        except ValueError:
            parsed = {}  # values still parse; a table has no columns from it
        return _Checked(validator, (registered.schema, texts), JsonWriterSchema(parsed))

    def writer_and_id(self, raw: bytes) -> tuple[Any, int | str]:
        """The parsed writer schema (:class:`~processors.json_schema_columns.JsonWriterSchema`)
        of a value and its id."""
        id_bytes, checked = self.writer(raw)
        return checked.schema, self.schema_id(id_bytes)

    async def screen(self, raws: Sequence[bytes | None], where: Sequence[str]
                     ) -> dict[int, PoisonMessage]:
        """Validate the values of a batch in the sandbox (one request per schema id):
        the poison among them by index (``where``: their coordinates, for errors)."""
        if self.sandbox is None:
            return {}
        end = self._end
        groups: dict[bytes, list[int]] = {}
        for k, raw in enumerate(raws):
            if raw is not None and isinstance(self._schemas.get(raw[1:end]), _Checked):
                groups.setdefault(raw[1:end], []).append(k)
        found: dict[int, PoisonMessage] = {}
        for id_bytes, indexes in groups.items():
            checked, sid = self._schemas[id_bytes], self.schema_id(id_bytes)
            verdicts = await self.sandbox.validate(
                id_bytes, checked.texts, [raws[k][end:] for k in indexes])  # type: ignore[index]
            for k, verdict in zip(indexes, verdicts, strict=True):
                if verdict is OVER_BUDGET:
                    found[k] = poison(
                        f"JSON Schema validation of {where[k]} (schema id {sid}) took more "
                        f"than its budget of {self.sandbox.budget_s:g}s (validate_budget_s): "
                        "the value is not decoded", raws[k], sid)
                elif verdict is not None:
                    found[k] = poison(f"value not valid for its JSON Schema (schema id {sid}) "
                                      f"at {verdict}", raws[k], sid)
        return found

    async def close(self) -> None:
        if self.sandbox is not None:
            await self.sandbox.close()

    def decode(self, raw: bytes | None) -> Any:
        """Decode (and validate) one value; raises PoisonMessage for every bad input."""
        if raw is None:
            return None
        id_bytes, validator = self.writer(raw)
        sid = self.schema_id(id_bytes)
        try:
            value = loads(raw[self._end:])
            error = (None if validator.validator is None or self.sandbox is not None
                     else best_match(validator.validator.iter_errors(value)))
        except ValueError as exc:
            raise poison(f"the body is not JSON (schema id {sid}): {exc}", raw, sid) from exc
        except RecursionError as exc:  # nesting deeper than the interpreter's limit
            raise poison(f"the body is JSON nested too deeply (schema id {sid})", raw,
                         sid) from exc
        if error is not None:
            raise poison(f"value not valid for its JSON Schema (schema id {sid}) at "
                         f"{error.json_path}: {error.message[:300]}", raw, sid)
        return value


def _validator(schema_id: int | str, text: str, references: dict[str, str]) -> Any:
    """The jsonschema validator of a schema text; PoisonMessage for a bad schema."""
    try:
        schema = json.loads(text)
        resources = [(name, Resource.from_contents(json.loads(body),
                                                   default_specification=DRAFT202012))
                     for name, body in references.items()]
        cls = validators.validator_for(schema, default=validators.Draft202012Validator)
        cls.check_schema(schema)
    except (ValueError, SchemaError) as exc:
        raise PoisonMessage(f"writer schema id {schema_id} is not a valid JSON Schema: "
                            f"{str(exc)[:300]}") from exc
    except Exception as exc:  # referencing raises its own kinds for bad resources
        raise PoisonMessage(f"writer schema id {schema_id}'s references are not valid "
                            f"JSON Schemas: {exc}") from exc
    registry: Registry[Any] = Registry().with_resources(resources)
    return cls(schema, registry=registry)
