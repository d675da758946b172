"""A TCP proxy on loopback that can cut the network between a client and a server.

:meth:`TcpProxy.cut` stops forwarding in both directions without closing anything, as a
network partition does: connections stay established, requests get no answer, new
connections are accepted but reach nothing, and the sender's kernel buffers fill. What
was sent meanwhile is delivered after :meth:`TcpProxy.heal`, as TCP's retransmissions
deliver it once a partition ends (a request the client gave up on can still reach the
server late). It runs its own event loop in a thread, so blocking test code does not
stall it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from service.broker import free_port


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``127.0.0.1:target_port``; a context manager."""

    def __init__(self, target_port: int, port: int | None = None) -> None:
        self.target_port = target_port
        self.port = port or free_port()
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._open = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    @property
    def is_cut(self) -> bool:
        return not self._open.is_set()

    def cut(self) -> None:
        """Stop forwarding: nothing passes until :meth:`heal`."""
        self._loop.call_soon_threadsafe(self._open.clear)

    def heal(self) -> None:
        """Forward again, what was held first."""
        self._loop.call_soon_threadsafe(self._open.set)

    async def _start(self) -> None:
        self._open.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coro: object) -> None:
        task: asyncio.Task[None] = self._loop.create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, client_r: asyncio.StreamReader,
                      client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        await self._open.wait()  # accepted, but it reaches the server only when healed
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_w.close()
            return
        self._spawn(self._pump(client_r, server_w))
        self._spawn(self._pump(server_r, client_w))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await self._open.wait()
                data = await reader.read(65536)
                await self._open.wait()  # read just before a cut: held until the heal
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
