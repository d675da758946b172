"""The HTTP sink: rows become JSON requests to an HTTP API, acknowledged only on a 2xx.

A module per concern, each documenting its part: :mod:`.settings` (a topic's ``sink``
mapping, ``type: http`` plus the keys of :class:`HttpSinkSettings`, validated when the
configuration is loaded), :mod:`.url_template` (the ``url``'s row fields, rendered per
row), :mod:`.request` (a request's rows, its idempotency key, its JSON body),
:mod:`.client` (the client's headers, credentials and TLS) and :mod:`.sink`
(:class:`HttpSink`, its writes). The names the registry and callers use are re-exported
here; the entry point ``actors.sinks.http:HttpSink`` names this package.

Guarantees and rules, per :meth:`HttpSink.write` call (the rows of ONE partition, in
offset order):

* requests are sent one after the other, in row order, so a receiver sees the events of
  one partition in order. Concurrency across partitions is the caller's job:
  :attr:`HttpSink.capabilities` tell it how many writes may run at once (the
  connection pool is sized to match; extra writes wait for a connection);
* without ``batch`` each row is one request whose body is the row as a JSON object; with
  ``batch``, consecutive rows with the same rendered URL go as one JSON array of at most
  ``max_events`` rows. ``batch.max_interval_s`` is for the caller, which decides how long
  rows may wait before they are written (exposed as :attr:`HttpSink.max_interval_s`);
* every request carries ``Idempotency-Key: {topic}-{partition}-{first}-{last}`` (the
  offsets of its first and last row), so a replay after a crash sends the same key for
  the same event. When one message gave several rows and a request holds only some of
  them, the row's index within its message is appended (``{first}.{i}-{last}.{j}``).
  With ``batch``, keys repeat only if the replayed write is cut the same way: receivers
  that must dedupe per event should use ``_topic/_partition/_offset`` of the body;
* transport errors (timeouts included), 5xx and the statuses of ``retry_statuses`` are
  retried with capped exponential backoff and full jitter, honouring ``Retry-After``
  (capped at ``max_backoff_s``); after ``max_retries`` retries
  :class:`~actors.errors.SinkError` is raised (retriable: the caller retries the whole
  write, forever; nothing is acked, nothing dead-lettered). For 401, 403 and 407 it is
  :class:`~actors.errors.SinkAuthError`: credentials are not a fact about the event, and
  the worker is reported not ready at once. Every failed attempt is reported to
  :attr:`Sink.health <actors.sinks.Sink.health>` as it happens;
* ``retry_statuses`` defaults to :data:`RETRY_STATUSES`: answers about the request
  rather than the event (credentials, 404 of the endpoint, timeouts, conflicts, too
  large, too early, too many). 404 is retried because with a fixed URL it means the
  endpoint is missing (a deploy window, a wrong route): dead-lettering would empty the
  stream into the file. Where the URL names the event's own resource and 404 means "no
  such entity", leave 404 out of ``retry_statuses`` to dead-letter those events;
* a 413 for a request of several rows (``batch``) splits it in two halves, sent one
  after the other (each may split again), before a single row's 413 counts as above;
* redirects are never followed (no request, no credentials go to the ``Location``): a
  301, 302, 303, 307 or 308 is retried by default like a 404 (with a fixed URL it means
  the endpoint moved: a configuration problem, shown in ``/readyz`` with the ``Location``
  without its query); left out of ``retry_statuses``, it dead-letters like below;
* a TLS failure (the server's certificate not trusted, our client certificate missing
  or refused) is retried like an outage, never dead-lettered, and reported as
  :class:`~actors.errors.SinkAuthError` (not ready at once), naming the ``tls`` settings;
* any other answer (other 3xx and 4xx) refuses the request for good: its rows go to
  :meth:`Sink.refuse <actors.sinks.base.Sink.refuse>` with the status and the first KB
  of the body (for a redirect, where it pointed), and the next request is sent. A row
  whose URL cannot be rendered (missing or null field, a value making an empty or dot path
  segment: see :class:`.url_template.UrlTemplate`) is refused the same way, with status
  0 (never sent);
* ``write`` returns once every request got a 2xx or was handed to the failure handler.

Secrets (auth, secret-looking headers) are only read to build the client; they never
appear in logs, reprs or exception messages (echoed back by a server, they are masked).
"""

from actors.sinks.http.settings import (
    RETRY_STATUSES,
    HttpAuth,
    HttpBasicAuth,
    HttpBatch,
    HttpSinkSettings,
    HttpTls,
)
from actors.sinks.http.sink import AUTH_STATUSES, BODY_HEAD_BYTES, HttpSink

__all__ = [
    "AUTH_STATUSES",
    "BODY_HEAD_BYTES",
    "RETRY_STATUSES",
    "HttpAuth",
    "HttpBasicAuth",
    "HttpBatch",
    "HttpSink",
    "HttpSinkSettings",
    "HttpTls",
]
