"""A TCP proxy that injects network faults between Kafka clients and one broker.

``FaultProxy`` listens on a loopback port and forwards every connection to one
upstream broker port.  Faults are set and cleared while tests run, either for
every connection or only for the connections of one Kafka client, identified by
the ``client_id`` in the header of the first request it sends on a connection
(int32 size, int16 api_key, int16 api_version, int32 correlation_id, then the
nullable int16-length client_id string, the same in every request header
version).

Faults (each method takes ``client_id=None``, meaning every connection):

- ``drop()``: close matching connections (FIN) and close new ones at once.
- ``reset()``: the same with a TCP RST (SO_LINGER 0, then close).
- ``blackhole()``: a network cut: bytes are still accepted and read but neither
  forwarded nor answered (they are discarded, so nothing a client gave up on
  reaches the broker later).  New connections are accepted but never reach the
  broker while the cut lasts.  A connection that lost bytes this way can never
  carry a valid Kafka stream again, so ``clear()`` closes it; clients reconnect.
- ``delay(seconds)``: every chunk waits ``seconds`` before it is forwarded, in
  each direction (a request/response round trip gains twice that).
- ``throttle(bytes_per_second)``: each connection forwards at most that many
  bytes per second in each direction.
- ``clear()``: remove the faults (of one client, or all of them).

A rule for a client overrides the rule for every connection field by field
(mode, delay, throttle).  The proxy runs its own event loop on its own thread,
so sync tests and async tests on any loop use it alike; every fault method
returns once the fault is in force (existing connections already closed for
``drop``/``reset``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

_T = TypeVar("_T")

Mode = Literal["drop", "reset", "blackhole"]
_UP, _DOWN = 0, 1  # client -> broker, broker -> client
_HEADER_PREFIX = struct.Struct(">ihhih")  # size, api_key, api_version, correlation_id, client_id length
_READ_CHUNK = 65536
# A client whose first frame does not yield a client_id within this many bytes
# is not Kafka (or not plaintext): forward it as "no client_id".
_MAX_HEADER_BYTES = 65536


@dataclass(frozen=True)
class Fault:
    """The faults in force for a set of connections (None: not set at this level)."""

    mode: Mode | None = None
    delay: float | None = None
    throttle: int | None = None

    def merged_over(self, base: Fault | None) -> Fault:
        """This rule's fields where set, ``base``'s elsewhere."""
        if base is None:
            return self
        return Fault(
            mode=self.mode if self.mode is not None else base.mode,
            delay=self.delay if self.delay is not None else base.delay,
            throttle=self.throttle if self.throttle is not None else base.throttle,
        )


@dataclass(frozen=True)
class ProxyCounters:
    """A snapshot of what went through the proxy since it started."""

    connections: int
    """Connections accepted (including those closed at once by a fault)."""
    active: int
    """Connections open now."""
    refused: int
    """Connections closed by ``drop``/``reset`` (existing or new)."""
    bytes_to_broker: int
    """Bytes forwarded from clients to the broker."""
    bytes_to_client: int
    """Bytes forwarded from the broker to clients."""
    held_bytes: int
    """Bytes read but held back right now (delay or throttle)."""
    blackholed_bytes: int
    """Bytes read and discarded by ``blackhole`` (both directions)."""
    connections_by_client: dict[str | None, int] = field(default_factory=dict)
    """Connections per identified client_id (None: a null client_id)."""


class _Link:
    """One client connection and, once something is to be forwarded, its upstream connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.readers: list[asyncio.StreamReader | None] = [reader, None]
        self.writers: list[asyncio.StreamWriter | None] = [None, writer]  # index = direction written
        self.client_writer = writer
        self.identified = False
        self.client_id: str | None = None
        self.header = bytearray()
        self.queues: tuple[deque[tuple[float, bytes]], deque[tuple[float, bytes]]] = (deque(), deque())
        self.held = [0, 0]
        self.eof = [False, False]  # the side read from has closed: close once its queue drains
        self.cut = False  # bytes were discarded: the stream is broken for good
        self.wake = (asyncio.Event(), asyncio.Event())
        self.room = (asyncio.Event(), asyncio.Event())
        self.tasks: set[asyncio.Task[None]] = set()
        self.closed = False


class FaultProxy:
    """A loopback TCP proxy in front of ``upstream_host:upstream_port`` that injects faults.

    ``start()`` binds ``listen_port`` (0: a free port, see ``.port``) and runs the
    proxy on a background thread; ``close()`` stops it and closes every connection.
    """

    def __init__(
        self,
        upstream_port: int,
        *,
        upstream_host: str = "127.0.0.1",
        host: str = "127.0.0.1",
        listen_port: int = 0,
        max_held: int = 4 << 20,
        name: str = "fault-proxy",
    ) -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.host = host
        self.port = listen_port
        self.max_held = max_held
        self.name = name
        self._rules: dict[str | None, Fault] = {}
        self._links: set[_Link] = set()
        self._counts = {"connections": 0, "refused": 0, "to_broker": 0, "to_client": 0, "blackholed": 0}
        self._by_client: dict[str | None, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def address(self) -> str:
        """``host:port`` clients connect to."""
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        """Start the proxy thread and listen; returns once the port accepts connections."""
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        ready = threading.Event()
        loop = asyncio.new_event_loop()
        self._loop = loop

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        ready.wait()
        self._call(self._listen)

    def close(self) -> None:
        """Stop listening, close every connection and end the thread (idempotent)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or loop.is_closed():
            return
        with contextlib.suppress(Exception):
            self._call(self._shutdown)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._thread = None

    def move(self, upstream_port: int | None = None) -> int:
        """Listen on a new free port instead (connections to the old one are closed, new ones refused).

        With ``upstream_port``, forward to that broker port from now on.  Faults and
        counters are kept.  Returns the new port.
        """

        async def do() -> None:
            await self._stop_listening()
            for link in list(self._links):
                self._close_link(link, rst=False)
            if upstream_port is not None:
                self.upstream_port = upstream_port
            self.port = 0
            await self._listen()

        self._call(do)
        return self.port

    def set_upstream(self, upstream_port: int) -> None:
        """Forward new connections to ``upstream_port`` (existing ones keep their broker)."""
        self.upstream_port = upstream_port

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ faults

    def drop(self, client_id: str | None = None) -> None:
        """Close matching connections (FIN) and close new ones as soon as they are identified."""
        self._set(client_id, mode="drop")

    def reset(self, client_id: str | None = None) -> None:
        """Like ``drop`` but with a TCP RST (SO_LINGER 0, then close)."""
        self._set(client_id, mode="reset")

    def blackhole(self, client_id: str | None = None) -> None:
        """Read but never forward or answer: a network cut (cut connections close on ``clear``)."""
        self._set(client_id, mode="blackhole")

    def delay(self, seconds: float, client_id: str | None = None) -> None:
        """Hold every chunk ``seconds`` before forwarding it, in each direction."""
        if seconds < 0:
            raise ValueError(f"delay must be >= 0, got {seconds}")
        self._set(client_id, delay=float(seconds))

    def throttle(self, bytes_per_second: int, client_id: str | None = None) -> None:
        """Forward at most ``bytes_per_second`` per connection and direction."""
        if bytes_per_second <= 0:
            raise ValueError(f"throttle must be positive, got {bytes_per_second}")
        self._set(client_id, throttle=int(bytes_per_second))

    def clear(self, client_id: str | None = None) -> None:
        """Remove every fault (``client_id=None``) or only that client's rule."""

        async def do() -> None:
            if client_id is None:
                self._rules.clear()
            else:
                self._rules.pop(client_id, None)
            self._wake_all()

        self._call(do)

    def fault_for(self, client_id: str | None) -> Fault:
        """The fault a connection of ``client_id`` gets now (``Fault()`` when none)."""
        rule = self._rules.get(client_id) if client_id is not None else None
        base = self._rules.get(None)
        merged = rule.merged_over(base) if rule is not None else base
        return merged if merged is not None else Fault()

    def counters(self) -> ProxyCounters:
        """A consistent snapshot of the counters."""

        async def snapshot() -> ProxyCounters:
            return ProxyCounters(
                connections=self._counts["connections"],
                active=len(self._links),
                refused=self._counts["refused"],
                bytes_to_broker=self._counts["to_broker"],
                bytes_to_client=self._counts["to_client"],
                held_bytes=sum(sum(link.held) for link in self._links),
                blackholed_bytes=self._counts["blackholed"],
                connections_by_client=dict(self._by_client),
            )

        return self._call(snapshot)

    def _set(self, client_id: str | None, **changes: Any) -> None:
        async def do() -> None:
            self._rules[client_id] = replace(self._rules.get(client_id, Fault()), **changes)
            for link in list(self._links):
                if not self._matches(link, client_id):
                    continue
                mode = self._fault_of(link).mode
                if mode in ("drop", "reset"):
                    self._counts["refused"] += 1
                    self._close_link(link, rst=mode == "reset")
            self._wake_all()

        self._call(do)

    # ------------------------------------------------------------------ loop side

    def _call(self, fn: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        """Run ``fn()`` on the proxy's loop and wait for its result."""
        loop = self._loop
        if loop is None or loop.is_closed():
            raise RuntimeError(f"{self.name} is not running")
        return asyncio.run_coroutine_threadsafe(fn(), loop).result(timeout=30)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _shutdown(self) -> None:
        await self._stop_listening()
        tasks = [t for link in list(self._links) for t in link.tasks]
        for link in list(self._links):
            self._close_link(link, rst=False)
        if tasks:
            await asyncio.wait(tasks, timeout=5)

    def _matches(self, link: _Link, client_id: str | None) -> bool:
        return client_id is None or (link.identified and link.client_id == client_id)

    def _fault_of(self, link: _Link) -> Fault:
        if not link.identified:
            return self._rules.get(None) or Fault()
        return self.fault_for(link.client_id)

    def _wake_all(self) -> None:
        for link in self._links:
            for event in (*link.wake, *link.room):
                event.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(reader, writer)
        self._counts["connections"] += 1
        self._links.add(link)
        mode = self._fault_of(link).mode
        if mode in ("drop", "reset"):  # a fault on every connection refuses new ones at once
            self._counts["refused"] += 1
            self._close_link(link, rst=mode == "reset")
            return
        self._spawn(link, self._read(link, _UP))
        self._spawn(link, self._write(link, _UP))

    def _spawn(self, link: _Link, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        link.tasks.add(task)
        task.add_done_callback(link.tasks.discard)

    def _close_link(self, link: _Link, *, rst: bool) -> None:
        if link.closed:
            return
        link.closed = True
        self._links.discard(link)
        if rst:
            sock = link.client_writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            link.client_writer.transport.abort()
        else:
            link.client_writer.close()
        upstream = link.writers[_UP]
        if upstream is not None:
            upstream.close()
        current = asyncio.current_task()
        for task in list(link.tasks):
            if task is not current:
                task.cancel()

    def _identify(self, link: _Link, data: bytes) -> None:
        link.header += data
        if len(link.header) < _HEADER_PREFIX.size and len(link.header) < _MAX_HEADER_BYTES:
            return
        client_id: str | None = None
        if len(link.header) >= _HEADER_PREFIX.size:
            *_, length = _HEADER_PREFIX.unpack_from(link.header, 0)
            end = _HEADER_PREFIX.size + max(length, 0)
            if len(link.header) < end and len(link.header) < _MAX_HEADER_BYTES:
                return
            if length >= 0:
                client_id = bytes(link.header[_HEADER_PREFIX.size : end]).decode("utf-8", "replace")
        link.identified, link.client_id, link.header = True, client_id, bytearray()
        self._by_client[client_id] = self._by_client.get(client_id, 0) + 1
        mode = self._fault_of(link).mode
        if mode in ("drop", "reset"):
            self._counts["refused"] += 1
            self._close_link(link, rst=mode == "reset")

    async def _read(self, link: _Link, direction: int) -> None:
        """Read one side into the link's queue for the other side's writer."""
        reader = link.readers[direction]
        assert reader is not None
        loop = asyncio.get_running_loop()
        try:
            while not link.closed:
                while link.held[direction] >= self.max_held and not link.closed:
                    link.room[direction].clear()
                    await link.room[direction].wait()
                data = await reader.read(_READ_CHUNK)
                if not data:
                    link.eof[direction] = True
                    link.wake[direction].set()
                    return
                if direction == _UP and not link.identified:
                    self._identify(link, data)
                    if link.closed:
                        return
                delay = self._fault_of(link).delay or 0.0
                link.queues[direction].append((loop.time() + delay, data))
                link.held[direction] += len(data)
                link.wake[direction].set()
        except (OSError, asyncio.IncompleteReadError):
            pass
        self._close_link(link, rst=False)

    def _discard_if_cut(self, link: _Link, direction: int) -> bool:
        """Under a blackhole, drop what is queued in ``direction``; True when the link is cut."""
        if self._fault_of(link).mode != "blackhole":
            return False
        queue = link.queues[direction]
        while queue:
            _, data = queue.popleft()
            link.held[direction] -= len(data)
            self._counts["blackholed"] += len(data)
            link.cut = True
        link.room[direction].set()
        return True

    async def _write(self, link: _Link, direction: int) -> None:
        """Forward the queue of ``direction`` as faults allow."""
        queue = link.queues[direction]
        loop = asyncio.get_running_loop()
        try:
            while not link.closed:
                if direction == _UP and not link.identified:
                    cut = False  # nothing to forward before the client is known
                else:
                    cut = self._discard_if_cut(link, direction)
                    if link.cut and not cut:
                        break  # the blackhole was cleared: this stream lost bytes, close it
                if not queue and link.eof[direction]:
                    break
                if not queue or cut or (direction == _UP and not link.identified):
                    link.wake[direction].clear()
                    await link.wake[direction].wait()
                    continue
                ready_at, data = queue[0]
                if ready_at > loop.time():
                    await asyncio.sleep(ready_at - loop.time())
                    continue  # the fault may have changed meanwhile
                queue.popleft()
                link.held[direction] -= len(data)
                link.room[direction].set()
                writer = link.writers[direction]
                if writer is None:  # first bytes for the broker: connect now, not at accept
                    writer = await self._connect(link)
                    if writer is None:
                        return
                await self._send(link, writer, data, direction)
        except (OSError, asyncio.IncompleteReadError):
            pass
        self._close_link(link, rst=False)

    async def _connect(self, link: _Link) -> asyncio.StreamWriter | None:
        try:
            reader, writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        except OSError:  # the broker is down: the client sees its connection closed
            self._close_link(link, rst=False)
            return None
        if link.closed:
            writer.close()
            return None
        link.readers[_DOWN], link.writers[_UP] = reader, writer
        self._spawn(link, self._read(link, _DOWN))
        self._spawn(link, self._write(link, _DOWN))
        return writer

    async def _send(self, link: _Link, writer: asyncio.StreamWriter, data: bytes, direction: int) -> None:
        counter = "to_broker" if direction == _UP else "to_client"
        view = memoryview(data)
        while view:
            rate = self._fault_of(link).throttle
            piece = view if rate is None else view[: max(1, rate // 20)]
            writer.write(piece)
            await writer.drain()
            self._counts[counter] += len(piece)
            view = view[len(piece) :]
            if rate is not None:
                await asyncio.sleep(len(piece) / rate)
