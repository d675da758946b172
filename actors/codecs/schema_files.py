"""A read-only schema registry over a directory of ``.avsc`` files (``url: file://DIR``).

This module is responsible for serving writer schemas without a registry server (air-gapped
deployments, replays of archived topics, tests), through the same read interface as
:class:`actors.codecs.schema_registry.SchemaRegistryClient`.

The directory holds the schema files and an index, ``DIR/index.json``, that maps each
schema id (the one in the messages' wire-format header) to its subject and file::

    {
      "1": {"subject": "events-value", "file": "Event.avsc"},
      "2": {"subject": "events-value", "file": "v2/Event.avsc", "version": 2},
      "7": {"subject": "audit-value", "file": "Audit.avsc"}
    }

* keys are the ids as strings: decimal for ``id_type`` int/long, 32 hex digits for
  ``uuid`` (dashes and upper case are accepted and normalised to lowercase hex);
* ``subject`` (required) groups the ids into subjects for :meth:`~FileSchemaRegistry.latest`;
* ``file`` (required) is relative to ``DIR`` and must stay inside it;
* ``version`` (optional) numbers the subject's versions; by default an entry is version
  N when it is the subject's N-th entry in file order.

A relative ``DIR`` (``file://schemas``) is relative to the working directory. The index
and every file are read and checked as JSON in :meth:`~FileSchemaRegistry.start`, so a
broken directory fails at startup (RegistryRequestError), never on the first message.
An id missing from the index raises SchemaNotFound, like a 404 from a registry.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from actors.codecs.schema_registry import (
    IdType,
    RegistryRequestError,
    SchemaId,
    SchemaNotFound,
    SchemaVersion,
    normalize_schema_id,
)

logger = logging.getLogger(__name__)

INDEX_FILE = "index.json"


class FileSchemaRegistry:
    """Schemas from ``.avsc`` files listed in ``DIR/index.json`` (see the module docs).

    Args:
        directory: the directory holding ``index.json`` and the schema files.
        id_type: ``int``, ``long`` or ``uuid``: how the index keys are read.
    """

    def __init__(self, directory: str | Path, *, id_type: IdType = "int") -> None:
        self.directory = Path(directory)
        self.id_type: IdType = id_type
        self._schemas: dict[SchemaId, str] | None = None
        self._subjects: dict[str, dict[int, SchemaId]] = {}  # subject -> version -> id
        self._closed = False

    def __repr__(self) -> str:
        state = "CLOSED" if self._closed else "RUNNING" if self._schemas is not None else "INIT"
        return f"<FileSchemaRegistry {state} {str(self.directory)!r} id_type={self.id_type}>"

    async def start(self) -> None:
        """Read and check the index and every schema file (in a thread)."""
        if self._schemas is not None or self._closed:
            raise RuntimeError("file schema registry already started or closed")
        schemas, self._subjects = await asyncio.to_thread(self._load)
        self._schemas = schemas
        logger.info(
            "file schema registry %s: %d schemas, %d subjects",
            self.directory,
            len(schemas),
            len(self._subjects),
        )

    async def close(self) -> None:
        """Forget the schemas (idempotent)."""
        self._closed = True
        self._schemas = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _loaded(self) -> dict[SchemaId, str]:
        if self._schemas is None:
            raise RuntimeError("file schema registry is not running; start() it")
        return self._schemas

    async def get_schema(self, schema_id: int | str) -> str:
        """The schema text of an id; SchemaNotFound when the index does not list it."""
        key = normalize_schema_id(schema_id, self.id_type)
        try:
            return self._loaded()[key]
        except KeyError:
            raise SchemaNotFound(
                f"schema id {key} is not in {self.directory / INDEX_FILE}", schema_id=key
            ) from None

    async def latest(self, subject: str) -> SchemaVersion:
        """``(id, version, schema)`` of the subject's highest version."""
        version = max(await self.versions(subject))
        schema_id = self._subjects[subject][version]
        return SchemaVersion(schema_id, version, self._loaded()[schema_id])

    async def subjects(self) -> list[str]:
        self._loaded()
        return sorted(self._subjects)

    async def versions(self, subject: str) -> list[int]:
        self._loaded()
        if subject not in self._subjects:
            raise SchemaNotFound(
                f"subject {subject!r} is not in {self.directory / INDEX_FILE}", error_code=40401
            )
        return sorted(self._subjects[subject])

    # ------------------------------------------------------------------ loading

    def _load(self) -> tuple[dict[SchemaId, str], dict[str, dict[int, SchemaId]]]:
        index_path = self.directory / INDEX_FILE
        index = _read_json(index_path)
        if not isinstance(index, dict):
            raise _bad(index_path, "expected a JSON object of id -> {subject, file}")
        root = self.directory.resolve()
        schemas: dict[SchemaId, str] = {}
        subjects: dict[str, dict[int, SchemaId]] = {}
        for raw_id, entry in index.items():
            where = f"entry {raw_id!r}"
            try:
                key = normalize_schema_id(raw_id, self.id_type)
            except SchemaNotFound:
                raise _bad(index_path, f"{where}: not a {self.id_type} id") from None
            if key in schemas:
                raise _bad(index_path, f"{where}: id {key} is listed twice")
            if not isinstance(entry, dict):
                raise _bad(index_path, f"{where}: expected {{subject, file[, version]}}")
            subject, file, version = entry.get("subject"), entry.get("file"), entry.get("version")
            if not isinstance(subject, str) or not isinstance(file, str):
                raise _bad(index_path, f"{where}: 'subject' and 'file' must be strings")
            path = (root / file).resolve()
            if not path.is_relative_to(root):
                raise _bad(index_path, f"{where}: file {file!r} is outside the directory")
            versions = subjects.setdefault(subject, {})
            if version is None:
                version = len(versions) + 1
            if not isinstance(version, int) or isinstance(version, bool) or version < 1:
                raise _bad(index_path, f"{where}: 'version' must be a positive int")
            if version in versions:
                raise _bad(index_path, f"{where}: version {version} of {subject!r} is taken")
            _read_json(path)  # a broken schema fails at startup
            schemas[key] = path.read_text(encoding="utf-8")
            versions[version] = key
        return schemas, subjects


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _bad(path, f"cannot read: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise _bad(path, f"not valid JSON: {exc}") from exc


def _bad(path: Path, problem: str) -> RegistryRequestError:
    return RegistryRequestError(f"file schema registry: {path}: {problem}")
