"""The schema registry's errors (added under :mod:`processors.errors`)::

    ProcessorError
    └── SchemaRegistryError         root of this module's errors (status_code, error_code)
        ├── RegistryUnavailable     transport errors, 429, 5xx after the retries: retriable
        ├── RegistryRequestError    any other 4xx (401, 403, 422, ...) or a malformed answer
        ├── SchemaNotFound          404 for an id/subject/version; also a PoisonMessage
        └── SchemaNotFoundYet       404 for an id still inside its retry window: retriable
                                    (raised by :meth:`actors.codecs.avro.AvroDecoder.fetch`)
"""

from __future__ import annotations

from typing import Any

from actors.codecs.schema_registry.schemas import SchemaId
from processors.errors import PoisonMessage, ProcessorError


class SchemaRegistryError(ProcessorError):
    """Root of the schema registry errors.

    Attributes:
        status_code: HTTP status of the answer, if there was one.
        error_code: the registry's ``error_code`` (e.g. 40403), if the body had one.
    """

    def __init__(
        self, message: str, *, status_code: int | None = None, error_code: int | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.error_code = error_code


class RegistryUnavailable(SchemaRegistryError):
    """No registry URL answered usefully (transport error, 429, 5xx) within the retries."""

    retriable = True


class RegistryRequestError(SchemaRegistryError):
    """The registry refused the request (4xx other than 404/429) or answered nonsense."""


class SchemaNotFound(SchemaRegistryError, PoisonMessage):
    """The schema id (or subject, version) does not exist; the message names it.

    ``schema_id`` (also in ``details``) is the id, or the subject, that was not found.
    """

    def __init__(self, message: str, *, schema_id: SchemaId | None = None, **codes: Any) -> None:
        super().__init__(message, **codes)
        self.schema_id = schema_id
        self.details = {"schema_id": schema_id}  # for the dead-letter line


class SchemaNotFoundYet(SchemaRegistryError):
    """A 404 for a schema id inside its ``not_found_retry_s`` window: retry, not poison.

    A registry answers 404 for ids that exist while it (re)loads them (Karapace for
    ~5 s after a restart, a follower lagging its leader), and an id a producer used is
    almost never truly unknown. ``schema_id`` is the id; ``waited_s`` the seconds since
    its first 404; ``remaining_s`` the seconds left before it counts as poison.
    """

    retriable = True

    def __init__(self, message: str, *, schema_id: SchemaId, waited_s: float,
                 remaining_s: float, **codes: Any) -> None:
        super().__init__(message, **codes)
        self.schema_id = schema_id
        self.waited_s = waited_s
        self.remaining_s = remaining_s
