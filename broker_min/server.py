"""The listener: frames, per-connection response ordering, dispatch, and the :class:`Broker` facade.

Each connection runs two tasks.  The reader reads size-prefixed frames, decodes
the header and body, and starts one task per request (so a long-poll Fetch does
not hold up the requests pipelined behind it); it queues that task.  The writer
awaits the queued tasks in order and writes their responses, so answers leave
in request order whatever order the handlers finish in.  Tasks start in the
order requests arrive and run until their first ``await``, which is what keeps
pipelined Produce appends in order (see handlers/produce.py).

A bad frame, a body that does not decode, or a handler that raises closes only
its own connection, with one log line (a traceback for handler bugs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
from pathlib import Path
from types import TracebackType
from typing import Any

from kafkakit.broker.config import BrokerConfig
from kafkakit.broker.handlers import HANDLERS, unsupported_version_response
from kafkakit.broker.handlers.base import ApiHandler, CloseConnection, RawResponse
from kafkakit.broker.handlers.groups import CLIENT_HOST
from kafkakit.broker.state import BrokerState
from kafkakit.protocol import RequestHeaderInfo, decode_request, decode_request_header, encode_response

log = logging.getLogger("kafkakit.broker")

_INT32 = struct.Struct(">i")
_SIZE_AND_CORRELATION = struct.Struct(">ii")
# api key, api version, correlation id and the client id's length: the least a v1+ header holds.
MIN_FRAME_BYTES = 10
# Requests a connection may have in flight before the reader stops reading (TCP pushes back).
MAX_IN_FLIGHT = 64
# Slices below this are cheaper to read and write than to hand to sendfile, which
# first waits for the transport's buffer to drain.
SENDFILE_MIN_BYTES = 16 * 1024
# Seconds a closing connection may take to flush what was already written.
CLOSE_TIMEOUT = 1.0


class _ConnectionClosed(Exception):
    """Raised inside a connection's tasks to end it after its one log line was written."""


class _Connection:
    """One client connection: reader task, writer task, the queue of pending responses."""

    def __init__(
        self, state: BrokerState, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self._state = state
        self._reader = reader
        self._writer = writer
        self._pending: asyncio.Queue[tuple[RequestHeaderInfo, asyncio.Task[Any]]] = asyncio.Queue(
            MAX_IN_FLIGHT
        )
        self._handler_tasks: set[asyncio.Task[Any]] = set()
        peer = writer.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._max_frame = state.config.socket_request_max_bytes
        self._tasks: tuple[asyncio.Task[None], ...] = ()

    async def serve(self) -> None:
        """Run until the client leaves, sends something bad, or :meth:`abort` is called."""
        self._tasks = (
            asyncio.create_task(self._read_requests()),
            asyncio.create_task(self._write_responses()),
        )
        try:
            await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (*self._tasks, *self._handler_tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, *self._handler_tasks, return_exceptions=True)
            self._writer.close()
            try:
                # A peer that stopped reading would keep a graceful close waiting forever.
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation.
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await self._writer.wait_closed()
            except Exception:
                self._writer.transport.abort()

    def abort(self) -> None:
        """End the connection (broker shutdown); :meth:`serve` then returns normally."""
        for task in self._tasks:
            task.cancel()

    # -- reading -------------------------------------------------------------

    async def _read_requests(self) -> None:
        # Handler tasks copy this context: group members are described with their host, as in Kafka.
        CLIENT_HOST.set("/" + self._peer.rpartition(":")[0])
        with contextlib.suppress(_ConnectionClosed, ConnectionError):
            while True:
                body = await self._read_frame()
                if body is None:
                    return
                header, request, spec = self._decode(body)
                task = asyncio.create_task(self._handle(spec, header, request))
                self._handler_tasks.add(task)
                task.add_done_callback(self._handler_tasks.discard)
                await self._pending.put((header, task))

    async def _read_frame(self) -> bytes | None:
        try:
            size_bytes = await self._reader.readexactly(4)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                self._drop(f"connection closed inside a frame's size ({len(exc.partial)} of 4 bytes)")
            return None
        (size,) = _INT32.unpack(size_bytes)
        if size > self._max_frame:
            self._drop(f"frame of {size} bytes exceeds socket_request_max_bytes ({self._max_frame})")
        if size < MIN_FRAME_BYTES:
            self._drop(f"frame of {size} bytes is shorter than a request header")
        try:
            return await self._reader.readexactly(size)
        except asyncio.IncompleteReadError as exc:
            self._drop(f"connection closed inside a frame ({len(exc.partial)} of {size} bytes)")
        return None  # unreachable: _drop raises

    def _decode(self, body: bytes) -> tuple[RequestHeaderInfo, Any, ApiHandler | None]:
        try:
            header = decode_request_header(body)
        except Exception as exc:
            self._drop(f"undecodable request header ({exc.__class__.__name__}: {exc})")
        spec = HANDLERS.get(header.api_key)
        if spec is None or not spec.min_version <= header.api_version <= spec.max_version:
            return header, None, None
        try:
            request = spec.decode(header, body) if spec.decode else decode_request(header, body)
        except Exception as exc:
            self._drop(
                f"undecodable api {header.api_key} v{header.api_version} request "
                f"({exc.__class__.__name__}: {exc})"
            )
        return header, request, spec

    # -- handling ------------------------------------------------------------

    async def _handle(self, spec: ApiHandler | None, header: RequestHeaderInfo, request: Any) -> Any:
        if spec is None:
            answer = unsupported_version_response(header)
            if answer is None:
                return CloseConnection(
                    f"unsupported api {header.api_key} v{header.api_version} (client {header.client_id!r})"
                )
            return answer
        return await spec.handle(self._state, header, request)

    # -- writing -------------------------------------------------------------

    async def _write_responses(self) -> None:
        with contextlib.suppress(_ConnectionClosed, ConnectionError):
            while True:
                header, task = await self._pending.get()
                try:
                    response = await task
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception(
                        "closing connection from %s: api %d v%d handler failed",
                        self._peer,
                        header.api_key,
                        header.api_version,
                    )
                    return
                if response is None:
                    continue
                if isinstance(response, CloseConnection):
                    self._drop(response.reason)
                await self._send(header.correlation_id, response)

    async def _send(self, correlation_id: int, response: Any) -> None:
        if isinstance(response, RawResponse):
            await self._send_raw(correlation_id, response)
        else:
            self._writer.write(encode_response(correlation_id, response))
        await self._writer.drain()

    async def _send_raw(self, correlation_id: int, response: RawResponse) -> None:
        tag = b"\0" if response.flexible_header else b""
        size = 4 + len(tag) + response.body_size()
        writer = self._writer
        writer.write(_SIZE_AND_CORRELATION.pack(size, correlation_id) + tag)
        loop = asyncio.get_running_loop()
        for part in response.parts:
            if isinstance(part, bytes):
                writer.write(part)
            elif part.length < SENDFILE_MIN_BYTES:
                writer.write(part.read_bytes())
            else:
                # Zero copy: the kernel moves segment bytes straight to the socket.
                await writer.drain()
                await loop.sendfile(writer.transport, part.file, part.position, part.length)

    def _drop(self, reason: str) -> Any:
        """Log the one line for a connection we close, and unwind its task."""
        log.warning("closing connection from %s: %s", self._peer, reason)
        raise _ConnectionClosed(reason)


class Broker:
    """A single-node Kafka broker (node id 1) on one listener.

    ``Broker(data_dir, host="127.0.0.1", port=0, **config)``; settings are
    :class:`~kafkakit.broker.config.BrokerConfig` fields (``log_segment_bytes=...``)
    and are validated here, so bad ones raise ``KafkaConfigError`` before anything
    starts.  Use ``async with Broker(tmp) as broker:`` or ``await start()`` /
    ``await stop()``; ``bootstrap_servers`` is ``"host:port"`` once started.
    """

    def __init__(
        self, data_dir: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 0, **config: Any
    ):
        self.config = BrokerConfig.from_kwargs(**config)
        self.data_dir = Path(data_dir)
        self.host = host
        self._requested_port = port
        self._port: int | None = None
        self._server: asyncio.Server | None = None
        self._state: BrokerState | None = None
        self._connections: set[_Connection] = set()

    @property
    def state(self) -> BrokerState:
        """The running broker's topic registry, logs and coordinators."""
        if self._state is None:
            raise RuntimeError("broker is not started")
        return self._state

    @property
    def port(self) -> int:
        """The port the listener is bound to (known after :meth:`start`)."""
        if self._port is None:
            raise RuntimeError("broker is not started")
        return self._port

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for clients, after :meth:`start`."""
        return f"{self.state.advertised_host}:{self.port}"

    async def start(self) -> None:
        """Open the data directory (recovering logs if needed) and start listening."""
        if self._server is not None:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        state = BrokerState(self.data_dir, self.config)
        try:
            self._server = await asyncio.start_server(self._on_connection, self.host, self._requested_port)
        except BaseException:
            state.close()
            raise
        self._port = self._server.sockets[0].getsockname()[1]
        state.set_listener(self.config.advertised_host or self.host, self._port)
        self._state = state
        state.start_background_tasks()

    async def stop(self) -> None:
        """Stop listening, drop every connection, and close the logs cleanly."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        # Aborting (not cancelling) the connection tasks lets them end normally,
        # which asyncio's stream callback expects.
        for connection in list(self._connections):
            connection.abort()
        while self._connections:
            await asyncio.sleep(0.001)
        with contextlib.suppress(Exception):
            await server.wait_closed()
        if self._state is not None:
            await self._state.stop_background_tasks()
            self._state.close()
        self._state = None
        self._port = None

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def serve_forever(self) -> None:
        """Start if needed and serve until cancelled."""
        await self.start()
        assert self._server is not None
        await self._server.serve_forever()

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._state is None:
            writer.close()
            return
        connection = _Connection(self._state, reader, writer)
        self._connections.add(connection)
        try:
            await connection.serve()
        finally:
            self._connections.discard(connection)
