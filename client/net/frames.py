"""Reading Kafka's size-prefixed response frames straight into one reused buffer.

An ``asyncio.BufferedProtocol``: the transport receives into
:meth:`FrameProtocol.get_buffer`'s memory (``recv_into``; TLS transports copy
their plaintext in), and each complete frame is handed to ``on_frame`` as a
read-only memoryview of that buffer, valid only during the call. Against an
``asyncio.StreamReader`` this saves two copies of every response byte (into the
reader's buffer, then out of it as a fresh ``bytes``) and, for fetch responses
of many megabytes, the page faults of a fresh buffer per frame: the buffer
grows to the largest frame seen (bounded by the fetch size limits) and is reused.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_FRAME_BYTES", "FrameError", "FrameProtocol"]

_SIZE = struct.Struct(">i")
#: A response size above this means the stream is broken (or not Kafka).
MAX_FRAME_BYTES = (1 << 31) - 1
# Start small (most responses are tiny); receive at least this much per read.
_INITIAL_BUFFER = 1 << 16
_MIN_READ = 1 << 14
_DOUBLING_LIMIT = 1 << 20
_ROUND = 1 << 20


class FrameError(Exception):
    """The peer sent a frame size no Kafka broker sends (the connection is closed)."""


class FrameProtocol(asyncio.BufferedProtocol):
    """Splits the byte stream into frames; also the write side's flow control (pause/resume)."""

    def __init__(
        self,
        on_frame: Callable[[memoryview], None],
        on_lost: Callable[[BaseException | None], None],
    ) -> None:
        self._on_frame = on_frame
        self._on_lost = on_lost
        self._buffer = bytearray(_INITIAL_BUFFER)
        self._start = 0  # the first byte not yet parsed
        self._end = 0  # the end of the bytes received
        self.transport: asyncio.Transport | None = None
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._lost = False
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- reading -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        buffer = self._buffer
        if len(buffer) - self._end < _MIN_READ or self._needs_more_room():
            buffer = self._make_room()
        return memoryview(buffer)[self._end :]

    def _pending_frame_size(self) -> int:
        """Bytes of the partly received frame at the buffer's start (0 when its size is unknown yet)."""
        if self._end - self._start < 4:
            return 0
        size: int = _SIZE.unpack_from(self._buffer, self._start)[0]
        return size + 4

    def _needs_more_room(self) -> bool:
        return self._start + self._pending_frame_size() > len(self._buffer)

    def _make_room(self) -> bytearray:
        """Move the unparsed tail to the front, into a larger buffer if the frame it starts needs one."""
        pending = self._buffer[self._start : self._end]
        need = max(self._pending_frame_size(), len(pending) + _MIN_READ)
        buffer = self._buffer
        if need > len(buffer):
            # A new buffer, never a resize: a memoryview still held somewhere stays valid. Small
            # ones double; a large frame gets what it needs (rounded up to 1 MiB), not twice that.
            size = 2 * len(buffer) if need <= 2 * len(buffer) <= _DOUBLING_LIMIT else -(-need // _ROUND) * _ROUND
            buffer = self._buffer = bytearray(size)
        buffer[: len(pending)] = pending
        self._start, self._end = 0, len(pending)
        return buffer

    def buffer_updated(self, nbytes: int) -> None:
        self._end += nbytes
        buffer, start, end = self._buffer, self._start, self._end
        view: memoryview | None = None
        try:
            while end - start >= 4:
                (size,) = _SIZE.unpack_from(buffer, start)
                if size < 4 or size > MAX_FRAME_BYTES:
                    raise FrameError(f"invalid response size {size}")
                if end - start - 4 < size:
                    break
                if view is None:
                    view = memoryview(buffer).toreadonly()  # kio's readers take read-only buffers only
                start += 4 + size
                self._start = start
                with view[start - size : start] as frame:
                    self._on_frame(frame)
                if self._lost:
                    return
        except BaseException as exc:
            self._lost = True
            self._on_lost(exc)
            if self.transport is not None:
                self.transport.abort()
            return
        finally:
            if view is not None:
                view.release()
        if start == end:
            self._start = self._end = 0

    def eof_received(self) -> bool:
        return False  # close the transport: the broker hung up

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._lost:
            self._lost = True
            self._on_lost(exc)
        self._wake_writers(exc)
        if not self.closed.done():
            self.closed.set_result(None)

    # -- writing ---------------------------------------------------------------

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_writers(None)

    def _wake_writers(self, exc: BaseException | None) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                if exc is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(exc)

    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its high-water mark."""
        if not self._write_paused or self._lost:
            return
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter
