"""What every handler module shares: the handler record, hand-encoded responses, kio helpers.

A handler is ``async def handle_x(state, header, request) -> response | None``:
``request`` is the decoded kio object (or whatever the handler's own decoder
returned), and the response is a kio response object, a :class:`RawResponse`
for bodies encoded by hand (zero-copy Fetch, legacy Produce), ``None`` when the
request gets no answer (acks=0 Produce), or :class:`CloseConnection`.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from kafkakit.protocol import RequestHeaderInfo
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

#: The client's address as Kafka shows it ("/127.0.0.1"), for DescribeGroups, share-group
#: members and the stored group metadata.  The server sets it per connection; handlers only read it.
CLIENT_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("kafkakit_client_host", default="")

NO_THROTTLE = datetime.timedelta(0)
# Kafka's "authorized operations were not requested" marker.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


class FileSliceLike(Protocol):
    """A byte range of a segment file, as the log hands it out for Fetch."""

    @property
    def file(self) -> BinaryIO: ...
    @property
    def position(self) -> int: ...
    @property
    def length(self) -> int: ...
    def read_bytes(self) -> bytes: ...


@dataclass(slots=True)
class RawResponse:
    """A response body encoded by hand: byte strings and file slices, written in order.

    The server prepends the size and the response header (v1, with its empty
    tagged-field byte, when ``flexible_header``) and sends file slices with
    ``loop.sendfile`` so record data never passes through Python.
    """

    parts: Sequence[bytes | FileSliceLike]
    flexible_header: bool

    def body_size(self) -> int:
        """Bytes of the body (everything after the response header)."""
        return sum(len(p) if isinstance(p, bytes) else p.length for p in self.parts)


@dataclass(frozen=True, slots=True)
class CloseConnection:
    """Answer a request by closing its connection (Kafka does this for a failed acks=0 Produce)."""

    reason: str


Response = Any  # a kio response object | RawResponse | CloseConnection | None
Handler = Callable[["BrokerState", RequestHeaderInfo, Any], Awaitable[Response]]
Decoder = Callable[[RequestHeaderInfo, bytes], Any]


@dataclass(frozen=True, slots=True)
class ApiHandler:
    """One API: its advertised version range, its handler and an optional custom decoder.

    ``decode`` replaces kio's decoding, for versions kio has no schema for
    (Produce v0-2).
    """

    api_key: int
    min_version: int
    max_version: int
    handle: Handler
    decode: Decoder | None = None


def error(code: int) -> ErrorCode:
    """kio wants :class:`ErrorCode` members, not ints."""
    return ErrorCode(code)


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def make(cls: type, **values: Any) -> Any:
    """Instantiate a kio entity, dropping the values its version does not have.

    One handler serves many versions whose classes differ only in which fields
    exist; passing the superset keeps the handlers free of version branches.
    """
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def has_field(cls: type, name: str) -> bool:
    """Whether this version's kio class has the field ``name``."""
    return name in _field_names(cls)


def nested(owner: type, name: str) -> type:
    """The nested entity class ``name`` defined next to ``owner`` (same API version)."""
    cls: type = getattr(sys.modules[owner.__module__], name)
    return cls
