"""The quorum's network: a small Kafka-protocol server per node and per-peer client connections.

:class:`RaftServer` accepts Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch (of the
metadata partition) and ApiVersions frames and hands the first four to a
:class:`~.node.RaftNode`. It answers each request as soon as it is ready,
matched by correlation id, rather than in request order: a long-polling Fetch
must not hold back a Vote on the same connection, and the quorum's own clients
match by correlation id. (When the broker routes these APIs from its controller
listener, that listener keeps Kafka's in-order rule.)

:class:`RaftPeers` keeps one connection per peer, connects lazily, reconnects
after a failure, and times out each request.

Extra APIs: a :class:`RaftServer` may also serve a table of other APIs (``api_key ->
(min_version, max_version, handler(version, request) -> response)``), e.g. the
controller's (:mod:`kafkakit.broker.controller.rpc`); they are listed in ApiVersions
and decoded with kio. A key in neither table, or a version outside its range, still
closes the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kafkakit.protocol import decode_request, decode_request_header, encode_response
from kafkakit.protocol.build import make_response

from ..peer_connection import PipelinedConnection
from . import messages as m
from .config import Voter
from .node import RaftNode

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")
MAX_FRAME_BYTES = 100 << 20
_API_VERSIONS_MAX = 3

#: An extra API's handler: ``await handler(api_version, decoded_request)`` -> a kio response.
ApiHandler = Callable[[int, Any], Awaitable[Any]]
#: An extra API: (min version, max version, handler).
ExtraApi = tuple[int, int, ApiHandler]


class RaftServer:
    """A listener that speaks the quorum APIs for one node, plus an optional table of extra APIs."""

    def __init__(
        self, node: RaftNode, host: str, port: int, apis: Mapping[int, ExtraApi] | None = None
    ) -> None:
        self.node = node
        self.host = host
        self.port = port
        self.apis: dict[int, ExtraApi] = {}
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        if apis:
            self.add_apis(apis)

    def add_apis(self, apis: Mapping[int, ExtraApi]) -> None:
        """Serve ``apis`` too (they may not reuse the quorum's keys or ApiVersions)."""
        taken = set(apis) & (set(m.VERSIONS) | {m.API_VERSIONS})
        if taken:
            raise ValueError(f"api keys {sorted(taken)} belong to the quorum")
        self.apis.update(apis)

    async def start(self) -> None:
        """Listen (port 0 picks a free one; :attr:`port` is then the real one)."""
        self._server = await asyncio.start_server(
            self._on_connection, self.host, self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and drop every open connection."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._connections):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            while True:
                size = _SIZE.unpack(await reader.readexactly(4))[0]
                if not 8 <= size <= MAX_FRAME_BYTES:
                    return
                body = await reader.readexactly(size)
                task = asyncio.create_task(self._answer(body, writer))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._connections.discard(writer)
            writer.transport.abort()

    async def _answer(self, body: bytes, writer: asyncio.StreamWriter) -> None:
        header = decode_request_header(body)
        try:
            response = await self._dispatch(header.api_key, header.api_version, body, header)
        except Exception:
            log.exception("raft server: request %d v%d failed", header.api_key, header.api_version)
            writer.transport.abort()
            return
        if response is None:
            writer.transport.abort()
            return
        writer.write(encode_response(header.correlation_id, response))
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    async def _dispatch(self, api_key: int, version: int, body: bytes, header: Any) -> Any:
        if api_key == m.API_VERSIONS:
            keys = [{"api_key": m.API_VERSIONS, "min_version": 0, "max_version": _API_VERSIONS_MAX}]
            ranges = {k: (v, v) for k, v in m.VERSIONS.items()}
            ranges.update({k: (low, high) for k, (low, high, _) in self.apis.items()})
            keys += [
                {"api_key": k, "min_version": low, "max_version": high}
                for k, (low, high) in sorted(ranges.items())
            ]
            if version > _API_VERSIONS_MAX:
                return make_response(m.API_VERSIONS, 0, error_code=35, api_keys=keys)
            return make_response(m.API_VERSIONS, version, error_code=0, api_keys=keys, throttle_time=0)
        extra = self.apis.get(api_key)
        if extra is not None:
            low, high, handler = extra
            if not low <= version <= high:
                return None
            return await handler(version, decode_request(header, body))
        if m.VERSIONS.get(api_key) != version:
            return None  # an API or version the quorum does not speak: close, as Kafka does
        return await self.node.handle(api_key, decode_request(header, body))


class RaftPeers:
    """The client side of the transport (implements :class:`~.node.Transport`)."""

    def __init__(self, voters: Mapping[int, Voter]) -> None:
        self.voters = dict(voters)
        self._connections: dict[int, PipelinedConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}
        self._closed = False

    async def send(self, peer_id: int, request: Any, timeout: float) -> Any:
        """Send ``request`` to ``peer_id`` and return its response, within ``timeout`` seconds."""
        if self._closed:
            raise ConnectionRefusedError("raft transport is closed")
        async with asyncio.timeout(timeout):
            connection = await self._connection(peer_id)
            return await connection.request(request)

    async def _connection(self, peer_id: int) -> PipelinedConnection:
        lock = self._connecting.setdefault(peer_id, asyncio.Lock())
        async with lock:
            connection = self._connections.get(peer_id)
            if connection is not None and connection.alive:
                return connection
            voter = self.voters[peer_id]
            reader, writer = await asyncio.open_connection(voter.host, voter.port)
            if self._closed:
                writer.transport.abort()
                raise ConnectionRefusedError("raft transport is closed")
            connection = self._connections[peer_id] = PipelinedConnection(reader, writer, "kafkakit-raft")
            return connection

    async def close(self) -> None:
        """Drop every connection; later sends fail until :meth:`reopen`."""
        self._closed = True
        connections = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)

    def reopen(self) -> None:
        """Allow sends again after :meth:`close` (a healed partition in tests)."""
        self._closed = False


class RaftEndpoint:
    """A node with its own listener and peer connections: what a standalone quorum member runs."""

    def __init__(
        self,
        node: RaftNode,
        peers: RaftPeers,
        host: str,
        port: int,
        apis: Mapping[int, ExtraApi] | None = None,
    ) -> None:
        self.node = node
        self.peers = peers
        self.server = RaftServer(node, host, port, apis)

    async def start(self) -> None:
        """Listen, then start the node's driver."""
        await self.server.start()
        self.node.start()

    async def isolate(self) -> None:
        """Cut this node off the network (listener closed, connections dropped); the node keeps running."""
        await self.server.close()
        await self.peers.close()

    async def heal(self) -> None:
        """Reconnect an isolated node: listen on the same port again and allow sends."""
        self.peers.reopen()
        await self.server.start()

    async def stop(self, graceful: bool = True) -> None:
        """Stop the node (a graceful leader resigns first), then the network."""
        if graceful:
            await self.node.resign()
        await self.server.close()
        await self.peers.close()
        await self.node.stop(graceful=False)
