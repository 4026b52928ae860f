"""Raw Kafka requests over one TCP connection, for broker tests that need exact versions and fields."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from kafkakit.broker.handlers.base import make, nested
from kafkakit.protocol import decode_response, encode_request, request_class

from tests.brokers import split_address


class RawClient:
    """One TCP connection sending kio requests and reading their responses in order."""

    #: Seconds to wait for each response.
    timeout = 5.0

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._next_id = 0

    @classmethod
    async def connect(cls, broker: Any) -> Any:
        """Connect to ``broker``: a ``"host:port"`` string or anything with ``bootstrap_servers``."""
        bootstrap = broker if isinstance(broker, str) else broker.bootstrap_servers
        host, port = split_address(bootstrap)
        return cls(*await asyncio.open_connection(host, port))

    async def call(self, payload: Any) -> Any:
        self._next_id += 1
        self.writer.write(encode_request(self._next_id, "raw-test", payload))
        (size,) = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), self.timeout))
        body = await asyncio.wait_for(self.reader.readexactly(size), self.timeout)
        correlation_id, response = decode_response(payload.__api_key__, payload.__version__, body)
        assert correlation_id == self._next_id
        return response

    def close(self) -> None:
        self.writer.close()


def req(api_key: int, version: int, **fields: Any) -> Any:
    """A request of ``api_key`` at ``version`` with ``fields`` (kio entity)."""
    return make(request_class(api_key, version), **fields)


def sub(api_key: int, version: int, entity: str, **fields: Any) -> Any:
    """A nested entity (e.g. a topic of a request) of ``api_key`` at ``version``."""
    return make(nested(request_class(api_key, version), entity), **fields)
