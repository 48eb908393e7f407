"""A TCP proxy on 127.0.0.1 between the grouper and the API server that cuts connections on demand
(``cut()``: every open connection is reset — watches included), to test watches that break."""

from __future__ import annotations

import asyncio
import threading
from typing import Any


class CuttingProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.cuts = 0
        self.connections = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="proxy", daemon=True)

    def start(self) -> CuttingProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        self._writers -= {writer, up_writer}

    def cut(self) -> None:
        """Reset every open connection (the client sees its watch and requests break)."""
        def _cut() -> None:
            for w in list(self._writers):
                transport: Any = w.transport
                transport.abort()
            self._writers.clear()

        self._loop.call_soon_threadsafe(_cut)
        self.cuts += 1

    def stop(self) -> None:
        async def _stop() -> None:
            if self._server is not None:
                self._server.close()
        asyncio.run_coroutine_threadsafe(_stop(), self._loop).result(5)
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
