"""A TCP proxy on loopback that can take a server down, slow it, or cut the network to it:
the faults of a server behind it (the S3 server, a catalog database, a broker) without
losing the server's state.

:class:`TcpProxy` forwards every connection to ``target`` (``host, port``) on its own
event loop in a thread, so blocking test code does not stall it.

* :meth:`TcpProxy.down`: the server is unreachable: the listening socket is closed (new
  connections are refused) and open connections are reset. :meth:`TcpProxy.up` listens
  again on the same port.
* :meth:`TcpProxy.cut`: a network partition: forwarding stops both ways and nothing is
  closed. Connections stay established, requests get no answer, new connections are
  accepted but reach nothing. What was sent meanwhile is delivered after
  :meth:`TcpProxy.heal`, as TCP's retransmissions deliver it once a partition ends (a
  request the client gave up on can still reach the server late).
* :attr:`TcpProxy.delay_s`: every chunk of bytes, either way, waits this long before it
  is passed on (a slow server or link); 0: none.

Counters (``connections``, ``bytes_up``) show that traffic went through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from concurrent.futures import Future
from typing import Any

_CHUNK = 64 * 1024


class TcpProxy:
    """A loopback TCP proxy in front of ``target``, listening on ``port`` (0: any free
    one); a context manager."""

    def __init__(self, target: tuple[str, int], *, port: int = 0,
                 delay_s: float = 0.0) -> None:
        self.target = target
        self.delay_s = delay_s
        self.connections = 0
        self.bytes_up = 0
        self.port = port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy",
                                        daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._open: asyncio.Event | None = None  # set: forwarding; clear: cut

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self, coro: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout=30)

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.heal()
        self.down()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def up(self) -> None:
        """Listen (on the port it had before, if any)."""
        self._run(self._listen())

    def down(self) -> None:
        """Refuse new connections and reset the open ones."""
        self._run(self._close())

    @property
    def is_cut(self) -> bool:
        return self._open is not None and not self._open.is_set()

    def cut(self) -> None:
        """Stop forwarding, both ways, closing nothing: nothing passes until :meth:`heal`."""
        self._run(self._set_open(False))

    def heal(self) -> None:
        """Forward again, what was held first."""
        self._run(self._set_open(True))

    async def _set_open(self, value: bool) -> None:
        if self._open is None:
            self._open = asyncio.Event()
            self._open.set()
        if value:
            self._open.set()
        else:
            self._open.clear()

    async def _listen(self) -> None:
        await self._set_open(not self.is_cut)
        if self._server is not None:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        self._server = await asyncio.start_server(self._serve, sock=sock)

    async def _close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            transport = writer.transport
            with contextlib.suppress(OSError):
                sock = transport.get_extra_info("socket")
                if sock is not None:  # RST, not FIN: the peer sees a reset connection
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    b"\x01\x00\x00\x00\x00\x00\x00\x00")
            transport.abort()
        self._writers.clear()
        if server is not None:
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     ) -> None:
        self.connections += 1
        assert self._open is not None
        await self._open.wait()  # accepted, but it reaches the server only when healed
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pipe(reader, up_writer, count=True),
                                 self._pipe(up_reader, writer, count=False))
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                    count: bool) -> None:
        opened = self._open
        assert opened is not None
        try:
            while True:
                await opened.wait()
                chunk = await reader.read(_CHUNK)
                await opened.wait()  # read just before a cut: held until the heal
                if not chunk:
                    break
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                if count:
                    self.bytes_up += len(chunk)
                writer.write(chunk)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (OSError, asyncio.IncompleteReadError):
            writer.transport.abort()
