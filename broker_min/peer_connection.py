"""Client connections from one broker_min node to another, speaking kio requests.

Two shapes, for two kinds of traffic:

- :class:`BrokerConnection` sends one request at a time and waits for its answer: a
  follower's fetcher (OffsetForLeaderEpoch, then long-polling Fetches) and the
  transaction coordinator's WriteTxnMarkers have nothing to pipeline, so a
  connection is a correlation counter and a stream.  A request that fails or times
  out leaves the stream in an unknown state: the connection is marked broken and the
  caller opens a new one.
- :class:`PipelinedConnection` has many requests in flight, answered in any order
  and matched by correlation id (the Raft quorum and the controller channel).

Both are plain TCP: inter-broker and controller listeners must be PLAINTEXT
(TLS/SASL between nodes is not supported yet).  This module sits below the
replication, coordinator and quorum layers and imports none of them.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from typing import Any

from kafkakit.protocol import decode_response, encode_request

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 512 << 20


class BrokerConnection:
    """A client connection to another broker (see the module docstring)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        self._reader = reader
        self._writer = writer
        self._client_id = client_id
        self._correlation = 0
        self.broken = False

    @classmethod
    async def open(cls, host: str, port: int, client_id: str, timeout: float) -> BrokerConnection:
        """Connect within ``timeout`` seconds."""
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, client_id)

    async def request(self, payload: Any, timeout: float) -> Any:
        """Send a kio request and return the decoded response, within ``timeout`` seconds."""
        if self.broken:
            raise ConnectionResetError("connection is closed")
        self._correlation += 1
        correlation_id = self._correlation
        self.broken = True  # until the answer is in: a failure midway leaves the stream unusable
        async with asyncio.timeout(timeout):
            self._writer.write(encode_request(correlation_id, self._client_id, payload))
            await self._writer.drain()
            (size,) = _SIZE.unpack(await self._reader.readexactly(4))
            if not 4 <= size <= MAX_RESPONSE_BYTES:
                raise ConnectionResetError(f"bad response frame size {size}")
            body = await self._reader.readexactly(size)
        answered, response = decode_response(int(payload.__api_key__), int(payload.__version__), body)
        if answered != correlation_id:
            raise ConnectionResetError(f"response {answered} to request {correlation_id}")
        self.broken = False
        return response

    def close(self) -> None:
        """Drop the connection at once."""
        self.broken = True
        self._writer.transport.abort()


class PipelinedConnection:
    """One client connection to a peer: requests pipelined, responses matched by correlation id.

    For the quorum, where a long-polling Fetch must not hold back a Vote: each
    request waits for its own answer, and a late answer to a request that timed
    out is dropped.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        self.reader = reader
        self.writer = writer
        self.client_id = client_id
        self.pending: dict[int, tuple[int, int, asyncio.Future[Any]]] = {}
        self.correlation = itertools.count(1)
        self.reader_task = asyncio.create_task(self._read())

    @property
    def alive(self) -> bool:
        return not self.reader_task.done() and not self.writer.is_closing()

    async def _read(self) -> None:
        error: BaseException = ConnectionResetError("connection to peer closed")
        try:
            while True:
                size = _SIZE.unpack(await self.reader.readexactly(4))[0]
                body = await self.reader.readexactly(size)
                (correlation_id,) = _SIZE.unpack_from(body, 0)
                entry = self.pending.pop(correlation_id, None)
                if entry is None:
                    continue  # the request timed out; a late answer is dropped
                api_key, version, future = entry
                if not future.done():
                    future.set_result(decode_response(api_key, version, body)[1])
        except (asyncio.IncompleteReadError, OSError) as exc:
            error = ConnectionResetError(f"connection to peer lost: {exc!r}")
        except asyncio.CancelledError:
            pass
        finally:
            for _, _, future in self.pending.values():
                if not future.done():
                    future.set_exception(error)
            self.pending.clear()
            self.writer.transport.abort()

    async def request(self, request: Any) -> Any:
        cls = type(request)
        correlation_id = next(self.correlation)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[correlation_id] = (int(cls.__api_key__), int(cls.__version__), future)
        try:
            self.writer.write(encode_request(correlation_id, self.client_id, request))
            await self.writer.drain()
            return await future
        finally:
            self.pending.pop(correlation_id, None)

    async def close(self) -> None:
        self.reader_task.cancel()
        await asyncio.gather(self.reader_task, return_exceptions=True)


__all__ = ["BrokerConnection", "PipelinedConnection"]
