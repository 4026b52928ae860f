"""Frames, headers and the (api key, version) -> schema cache."""

from __future__ import annotations

import enum
import io
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

_INT32 = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhi")


class ApiKey(enum.IntEnum):
    """The API keys kafkakit speaks."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


@cache
def request_class(api_key: int, version: int) -> Any:
    """kio's request class for ``api_key`` at ``version`` (KeyError-like kio error if unknown)."""
    return load_request_schema(api_key, version)


@cache
def response_class(api_key: int, version: int) -> Any:
    """kio's response class for ``api_key`` at ``version``."""
    return load_response_schema(api_key, version)


def preload(api_key: int, version: int) -> None:
    """Load the request and response classes of ``api_key`` at ``version`` and build their
    serialisers now, not on the first request: kio builds its message classes on first use,
    which took the producer's first Produce request 20-50 ms."""
    request_cls = request_class(api_key, version)
    _writer(request_cls.__header_schema__)
    _writer(request_cls)
    response_cls = response_class(api_key, version)
    _reader(response_cls.__header_schema__)
    _reader(response_cls)


_WRITERS: dict[type, Callable[[Any, Any], None]] = {}
_READERS: dict[type, Callable[[Any, int], tuple[Any, int]]] = {}


def _writer(cls: type) -> Callable[[Any, Any], None]:
    writer = _WRITERS.get(cls)
    if writer is None:
        writer = _WRITERS[cls] = entity_writer(cls)
    return writer


def _reader(cls: type) -> Callable[[Any, int], tuple[Any, int]]:
    reader = _READERS.get(cls)
    if reader is None:
        reader = _READERS[cls] = entity_reader(cls)
    return reader


#: Byte strings at least this long (record batches) stay chunks of their own in a request frame.
CHUNK_BY_REFERENCE = 1 << 16


class _FrameWriter:
    """What kio writes a request into: small fields are gathered, large byte strings kept by reference.

    A produce request's record batches are its bulk. Copied into one frame buffer,
    every megabyte would be copied once more into fresh memory, whose page faults
    cost more than the copy on a VM; written as chunks of their own, they go to the
    socket from the batch encoder's own bytes.
    """

    __slots__ = ("chunks", "size", "_small")

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0
        self._small = io.BytesIO()

    def write(self, data: bytes) -> int:
        size = len(data)
        self.size += size
        if size >= CHUNK_BY_REFERENCE:
            if self._small.tell():
                self.chunks.append(self._small.getvalue())
                self._small = io.BytesIO()
            self.chunks.append(data)
        else:
            self._small.write(data)
        return size

    def frame(self) -> list[bytes]:
        """The chunks, the first one starting with the frame's size."""
        if self._small.tell() or not self.chunks:
            self.chunks.append(self._small.getvalue())
        self.chunks[0] = _INT32.pack(self.size) + self.chunks[0]
        return self.chunks


def encode_request_chunks(correlation_id: int, client_id: str | None, payload: Any) -> list[bytes]:
    """:func:`encode_request` as chunks to write in order, large byte fields not copied (see _FrameWriter)."""
    cls = type(payload)
    header_cls = cls.__header_schema__
    out = _FrameWriter()
    header = header_cls(
        request_api_key=cls.__api_key__,
        request_api_version=cls.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    _writer(header_cls)(out, header)
    _writer(cls)(out, payload)
    return out.frame()


def encode_request(correlation_id: int, client_id: str | None, payload: Any) -> bytes:
    """Serialise ``payload`` (a kio request object) into a complete size-prefixed frame."""
    return b"".join(encode_request_chunks(correlation_id, client_id, payload))


def decode_response(api_key: int, version: int, frame: bytes | memoryview) -> tuple[int, Any]:
    """Decode a response frame body (without the size prefix) into (correlation id, kio object)."""
    cls = response_class(api_key, version)
    header_cls = cls.__header_schema__
    header, offset = _reader(header_cls)(frame, 0)
    payload, _ = _reader(cls)(frame, offset)
    return header.correlation_id, payload


@dataclass(frozen=True, slots=True)
class RequestHeaderInfo:
    """The part of a request header that every version shares, plus where the body starts."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def decode_request_header(frame: bytes | memoryview) -> RequestHeaderInfo:
    """Read the request header of a frame body.

    The header version follows from the request's own flexibility, which needs the
    api key and version first; those and the correlation id sit at fixed offsets in
    every header version, which is why they are read by hand here.
    """
    api_key, api_version, correlation_id = _HEADER_FIXED.unpack_from(frame, 0)
    try:
        cls = request_class(api_key, api_version)
    except Exception:
        # Unknown to kio: the caller answers with an error; client_id still parses
        # as a v1 header (INT16 length), which is all we need.
        (n,) = struct.unpack_from(">h", frame, 8)
        client_id = None if n < 0 else bytes(frame[10 : 10 + n]).decode("utf-8", "replace")
        return RequestHeaderInfo(api_key, api_version, correlation_id, client_id, 10 + max(n, 0))
    header_cls = cls.__header_schema__
    header, offset = _reader(header_cls)(frame, 0)
    return RequestHeaderInfo(api_key, api_version, correlation_id, header.client_id, offset)


def decode_request(header: RequestHeaderInfo, frame: bytes | memoryview) -> Any:
    """Decode the request body that follows ``header`` in ``frame``."""
    cls = request_class(header.api_key, header.api_version)
    payload, _ = _reader(cls)(frame, header.body_offset)
    return payload


def encode_response(correlation_id: int, payload: Any) -> bytes:
    """Serialise a kio response object into a complete size-prefixed frame."""
    cls = type(payload)
    header_cls = cls.__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    _writer(header_cls)(buf, header_cls(correlation_id=correlation_id))
    _writer(cls)(buf, payload)
    data = buf.getbuffer()
    _INT32.pack_into(data, 0, len(data) - 4)
    del data
    return buf.getvalue()
