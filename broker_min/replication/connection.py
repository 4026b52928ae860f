"""One plain TCP connection from a follower to a leader, speaking kio requests one at a time.

A follower sends one request and waits for its answer (OffsetForLeaderEpoch, then
long-polling Fetches), so there is nothing to pipeline: a connection is a
correlation counter and a stream.  A request that fails or times out leaves the
stream in an unknown state, so the caller closes the connection and opens a new
one.  Inter-broker TLS/SASL is not supported yet: the inter-broker listener must
be PLAINTEXT.
"""

from __future__ import annotations

import asyncio
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
