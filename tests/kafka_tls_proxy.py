"""A TLS- (and SASL-) terminating proxy on loopback in front of the plaintext test broker.

The embedded broker's own ``--cert`` listener does not complete a TLS handshake and its
``--authentication`` offers no PLAIN and no way to provision SCRAM users (measured, see
the module docstring of tests/integration/test_kafka_security.py), so this proxy stands
in front of it, with the broker advertising the proxy's address:

- TLS: Python's ``ssl`` server side on memory BIOs (real TLS 1.2/1.3, real certificate
  checks and alerts, optional client certificates), then bytes pass through unchanged.
- SASL: a small, faithful server side of Kafka's SASL exchange (KIP-43/KIP-152):
  ``ApiVersions`` goes to the broker, ``SaslHandshake`` and ``SaslAuthenticate`` v0-v1
  are answered here (not the pre-KIP-152 raw-token exchange after a v0 handshake:
  aiokafka uses SaslAuthenticate whenever the broker lists it, as this one does), with
  PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677, Kafka's 4096 iterations)
  checked against ``users``; a failed login gets
  error 58 (SASL_AUTHENTICATION_FAILED) with Kafka's message, then the connection is
  closed, as Kafka does. Any other request before a successful login closes the
  connection (Kafka's "illegal SASL state"). After the login bytes pass through.

It runs its own event loop in a thread, so blocking test code (``KstageProcess.wait``)
does not stall it. Its mode can change between tests (``configure``); new connections
use the new mode.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import os
import ssl
import struct
import threading
from dataclasses import dataclass, field
from typing import Protocol

_API_VERSIONS, _SASL_HANDSHAKE, _SASL_AUTHENTICATE = 18, 17, 36
_UNSUPPORTED_SASL_MECHANISM, _SASL_AUTHENTICATION_FAILED = 33, 58
_SCRAM_ITERATIONS = 4096
_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


@dataclass
class ProxyMode:
    """What the proxy asks of new connections."""

    ssl_context: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ()  # empty: no SASL
    users: dict[str, str] = field(default_factory=dict)


class SaslFailed(Exception):
    """A login was refused (its message goes to the client like Kafka's)."""


class _Scram:
    """Server side of one SCRAM exchange (RFC 5802, no channel binding)."""

    def __init__(self, mechanism: str, users: dict[str, str]) -> None:
        self._hash = _SCRAM_HASHES[mechanism]
        self._users = users
        self._mechanism = mechanism
        self._step = 0
        self._first_bare = self._server_first = ""
        self._nonce = ""
        self._salted = b""

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self._hash).digest()

    def _fail(self) -> SaslFailed:
        return SaslFailed("Authentication failed during authentication due to invalid "
                          f"credentials with SASL mechanism {self._mechanism}")

    def step(self, token: bytes) -> tuple[bytes, bool]:
        """The server's answer to ``token`` and whether the login is complete."""
        text = token.decode()
        if self._step == 0:
            gs2, _, bare = text.partition(",,")  # "n,," (or "n,a=authzid,,")
            if not gs2.startswith(("n", "y")):
                raise SaslFailed("channel binding is not supported")
            attrs = dict(part.split("=", 1) for part in bare.split(","))
            user = attrs["n"].replace("=2C", ",").replace("=3D", "=")
            password = self._users.get(user)
            salt = hashlib.sha256(user.encode()).digest()[:16]
            # An unknown user gets a made-up salt and fails at the proof, like Kafka.
            self._salted = hashlib.pbkdf2_hmac(self._hash, (password or os.urandom(16).hex())
                                               .encode(), salt, _SCRAM_ITERATIONS)
            self._nonce = attrs["r"] + base64.b64encode(os.urandom(18)).decode()
            self._first_bare = bare
            self._server_first = (f"r={self._nonce},s={base64.b64encode(salt).decode()},"
                                  f"i={_SCRAM_ITERATIONS}")
            self._step = 1
            return self._server_first.encode(), False
        without_proof, _, proof_b64 = text.rpartition(",p=")
        attrs = dict(part.split("=", 1) for part in without_proof.split(","))
        if attrs.get("r") != self._nonce:
            raise self._fail()
        auth = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        client_key = self._hmac(self._salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        signature = self._hmac(stored_key, auth)
        proof = base64.b64decode(proof_b64)
        recovered = bytes(a ^ b for a, b in zip(proof, signature, strict=False))
        if len(proof) != len(signature) or not hmac.compare_digest(
                hashlib.new(self._hash, recovered).digest(), stored_key):
            raise self._fail()
        server_sig = self._hmac(self._hmac(self._salted, b"Server Key"), auth)
        return f"v={base64.b64encode(server_sig).decode()}".encode(), True


def _plain(token: bytes, users: dict[str, str]) -> None:
    parts = token.split(b"\0")
    if len(parts) != 3:
        raise SaslFailed("Authentication failed: invalid SASL/PLAIN request")
    user, password = parts[1].decode(), parts[2].decode()
    expected = users.get(user)
    if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
        raise SaslFailed("Authentication failed: Invalid username or password")


def _string(data: bytes, pos: int) -> tuple[str | None, int]:
    (length,) = struct.unpack_from(">h", data, pos)
    if length < 0:
        return None, pos + 2
    return data[pos + 2:pos + 2 + length].decode(), pos + 2 + length


def _encode_string(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


def _frame(correlation_id: int, body: bytes) -> bytes:
    return struct.pack(">ii", 4 + len(body), correlation_id) + body


class _Writer(Protocol):
    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...
    def write_eof(self) -> None: ...
    def close(self) -> None: ...


class _TlsWriter:
    """Writes through a server-side ``SSLObject`` to the raw connection."""

    def __init__(self, tls: ssl.SSLObject, outgoing: ssl.MemoryBIO,
                 raw: asyncio.StreamWriter) -> None:
        self._tls, self._outgoing, self._raw = tls, outgoing, raw

    def flush(self) -> None:
        if data := self._outgoing.read():
            self._raw.write(data)

    def write(self, data: bytes) -> None:
        self._tls.write(data)
        self.flush()

    async def drain(self) -> None:
        await self._raw.drain()

    def write_eof(self) -> None:
        with contextlib.suppress(ssl.SSLError):
            self._tls.unwrap()
        self.flush()

    def close(self) -> None:
        self._raw.close()


async def _tls_accept(context: ssl.SSLContext, raw_reader: asyncio.StreamReader,
                      raw_writer: asyncio.StreamWriter
                      ) -> tuple[asyncio.StreamReader, _TlsWriter, asyncio.Task[None]] | None:
    """Server side of a TLS handshake on memory BIOs, so that a refused client
    certificate gets its TLS alert (asyncio's own TLS aborts the connection without
    sending it, which no real broker does); None when the handshake failed."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_side=True)
    writer = _TlsWriter(tls, outgoing, raw_writer)
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            writer.flush()
            await raw_writer.drain()
            data = await raw_reader.read(65536)
            if not data:
                return None
            incoming.write(data)
        except ssl.SSLError:
            writer.flush()  # the alert that tells the client why
            with contextlib.suppress(OSError):
                await raw_writer.drain()
            return None
    writer.flush()
    plain = asyncio.StreamReader()

    async def pump() -> None:
        while True:
            try:
                chunk = tls.read(65536)
                if not chunk:
                    plain.feed_eof()
                    return
                plain.feed_data(chunk)
                continue
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                plain.feed_eof()
                return
            except ssl.SSLError as exc:
                plain.set_exception(exc)
                return
            writer.flush()
            data = await raw_reader.read(65536)
            if not data:
                plain.feed_eof()
                return
            incoming.write(data)

    return plain, writer, asyncio.create_task(pump())


class KafkaTlsProxy:
    """Listen on ``127.0.0.1:port`` and forward to ``upstream_port`` (plaintext broker)."""

    def __init__(self, upstream_port: int, port: int) -> None:
        self.upstream_port = upstream_port
        self.port = port
        self.mode = ProxyMode()
        self.failed_logins = 0
        self.logins = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="kafka-tls-proxy")
        self._server: asyncio.Server | None = None

    def configure(self, mode: ProxyMode) -> None:
        self.mode = mode
        self.failed_logins = self.logins = 0

    def start(self) -> KafkaTlsProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for task in tasks:  # every connection handler closes its sockets
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._server is not None:
                await self._server.wait_closed()
        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                      ) -> None:
        mode = self.mode
        client: _Writer = writer
        pump: asyncio.Task[None] | None = None
        try:
            if mode.ssl_context is not None:
                tls = await _tls_accept(mode.ssl_context, reader, writer)
                if tls is None:
                    writer.close()
                    return
                reader, client, pump = tls
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1",
                                                                 self.upstream_port)
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
            writer.close()
            return
        try:
            if mode.mechanisms and not await self._login(mode, reader, client,
                                                         up_reader, up_writer):
                return
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, client))
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (client, up_writer):
                w.close()
            if pump is not None:
                pump.cancel()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: _Writer) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                writer.write_eof()

    async def _login(self, mode: ProxyMode, reader: asyncio.StreamReader,
                     writer: _Writer, up_reader: asyncio.StreamReader,
                     up_writer: asyncio.StreamWriter) -> bool:
        """The SASL exchange; True once logged in, False when the connection must close."""
        mechanism: str | None = None
        scram: _Scram | None = None
        while True:
            request = await _read_frame(reader)
            api_key, version, correlation_id = struct.unpack_from(">hhi", request)
            _, pos = _string(request, 8)  # client_id
            if api_key == _API_VERSIONS:  # allowed before login: the broker answers
                up_writer.write(struct.pack(">i", len(request)) + request)
                await up_writer.drain()
                response = await _read_frame(up_reader)
                writer.write(struct.pack(">i", len(response)) + response)
                await writer.drain()
                continue
            if api_key == _SASL_HANDSHAKE and version <= 1 and mechanism is None:
                requested, _ = _string(request, pos)
                enabled = b"".join(_encode_string(m) for m in mode.mechanisms)
                listed = struct.pack(">i", len(mode.mechanisms)) + enabled
                if requested not in mode.mechanisms:
                    writer.write(_frame(correlation_id,
                                        struct.pack(">h", _UNSUPPORTED_SASL_MECHANISM) + listed))
                    await writer.drain()
                    return False
                mechanism = requested
                if mechanism in _SCRAM_HASHES:
                    scram = _Scram(mechanism, mode.users)
                writer.write(_frame(correlation_id, struct.pack(">h", 0) + listed))
                await writer.drain()
                continue
            if api_key == _SASL_AUTHENTICATE and version <= 1 and mechanism is not None:
                (length,) = struct.unpack_from(">i", request, pos)
                token = request[pos + 4:pos + 4 + length]
                tail = struct.pack(">q", 0) if version >= 1 else b""
                try:
                    if scram is not None:
                        answer, done = scram.step(token)
                    else:
                        _plain(token, mode.users)
                        answer, done = b"", True
                except (SaslFailed, ValueError, KeyError, UnicodeDecodeError) as exc:
                    message = str(exc) if isinstance(exc, SaslFailed) else (
                        "Authentication failed: malformed SASL message")
                    self.failed_logins += 1
                    writer.write(_frame(correlation_id, struct.pack(
                        ">h", _SASL_AUTHENTICATION_FAILED) + _encode_string(message)
                        + struct.pack(">i", 0) + tail))
                    await writer.drain()
                    return False
                writer.write(_frame(correlation_id, struct.pack(">h", 0) + _encode_string(None)
                                    + struct.pack(">i", len(answer)) + answer + tail))
                await writer.drain()
                if done:
                    self.logins += 1
                    return True
                continue
            return False  # anything else before login: close, as Kafka does
