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

Security (docs/broker.md "Security"): the broker binds every listener in
``listeners``; SSL listeners wrap connections in TLS (the client certificate's
DN is the principal), and SASL listeners run each connection through
:class:`~kafkakit.broker.security.authenticator.SaslConnection` before any other
request than ApiVersions is served.  The principal reaches handlers through the
session context (:mod:`kafkakit.broker.security.principal`).

Start-up gate: a connection's reader reads nothing until the broker serves requests. A single
node serves once :meth:`Broker.start` has opened its state; a cluster node only once its metadata
image has caught up with the log (:mod:`kafkakit.broker.cluster_mode`), so that it never answers,
authenticates or authorizes from a stale image after a restart. Earlier connections are held,
their requests unanswered, until then (or until the client gives up).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import functools
import logging
import os
import struct
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kafkakit.broker.config import BrokerConfig
from kafkakit.broker.handlers import HANDLERS, unsupported_version_response
from kafkakit.broker.handlers.base import CLIENT_HOST, ApiHandler, CloseConnection, RawResponse, error, make
from kafkakit.broker.log import raise_descriptor_limit
from kafkakit.broker.metrics import BrokerMetrics, ListenerStats, MetricsServer
from kafkakit.broker.security.authenticator import (
    ILLEGAL_SASL_STATE,
    ListenerSecurity,
    SaslConnection,
    SaslReply,
)
from kafkakit.broker.security.credentials import parse_add_scram
from kafkakit.broker.security.listeners import Listener, advertised_endpoints, configured_listeners
from kafkakit.broker.security.principal import SESSION, Session
from kafkakit.broker.security.tls import peer_principal, server_ssl_context
from kafkakit.broker.state import BrokerState
from kafkakit.protocol import (
    ApiKey,
    RequestHeaderInfo,
    decode_request,
    decode_request_header,
    encode_response,
    response_class,
)
from prometheus_client import CollectorRegistry

if TYPE_CHECKING:
    from kafkakit.broker.cluster_mode import ClusterRuntime

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
# Seconds a client may take over its TLS handshake.
TLS_HANDSHAKE_TIMEOUT = 10.0
# What a SASL connection may send before it has authenticated.
_PRE_AUTH_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


_Pending = tuple[RequestHeaderInfo, "asyncio.Future[Any]", Any, float | None]


class _ConnectionClosed(Exception):
    """Raised inside a connection's tasks to end it after its one log line was written."""


class _Connection:
    """One client connection: reader task, writer task, the queue of pending responses."""

    def __init__(
        self,
        state: BrokerState,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        security: ListenerSecurity,
        metrics: BrokerMetrics | None = None,
        serving: asyncio.Event | None = None,
    ) -> None:
        self._state = state
        # Set once the broker serves requests (the start-up gate); None: at once.
        self._serving = serving
        # None unless metrics_port is set: the request path then skips every metrics step.
        self._metrics = metrics
        self._stats: ListenerStats | None = (
            None if metrics is None else metrics.listener(security.listener.name)
        )
        self._reader = reader
        self._writer = writer
        self._security = security
        self._sasl = (
            SaslConnection(security, state.scram_credentials.lookup) if security.listener.uses_sasl else None
        )
        # (header, response future, request, perf_counter() when read or None when not measured)
        self._pending: asyncio.Queue[_Pending] = asyncio.Queue(MAX_IN_FLIGHT)
        self._handler_tasks: set[asyncio.Task[Any]] = set()
        peer = writer.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._max_frame = state.config.socket_request_max_bytes
        # After a SaslHandshake v0 the client sends bare SASL tokens, not requests (before KIP-152).
        self._raw_sasl_tokens = False
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
        # Handler tasks copy this context: group members are described with their host, as in Kafka,
        # and every handler learns the principal from the session.
        host = self._peer.rpartition(":")[0]
        CLIENT_HOST.set("/" + host)
        listener = self._security.listener
        SESSION.set(Session(peer_principal(self._writer.get_extra_info("ssl_object")), host, listener.name))
        if self._serving is not None:
            await self._serving.wait()  # nothing is read (the client's requests wait) until then
        with contextlib.suppress(_ConnectionClosed, ConnectionError):
            while True:
                body = await self._read_frame(min_size=1 if self._raw_sasl_tokens else MIN_FRAME_BYTES)
                if body is None:
                    return
                stats = self._stats
                if stats is not None:
                    stats.received_bytes += len(body) + 4
                if self._raw_sasl_tokens:
                    assert self._sasl is not None
                    await self._raw_sasl_token(self._sasl, body)
                    continue
                header, request, spec = self._decode(body)
                started = None if stats is None else time.perf_counter()
                if self._sasl is not None and not await self._sasl_step(self._sasl, header, request, started):
                    continue
                task = asyncio.create_task(self._handle(spec, header, request))
                self._handler_tasks.add(task)
                task.add_done_callback(self._handler_tasks.discard)
                await self._pending.put((header, task, request, started))

    # -- SASL ----------------------------------------------------------------

    async def _sasl_step(
        self, sasl: SaslConnection, header: RequestHeaderInfo, request: Any, started: float | None
    ) -> bool:
        """Handle SASL requests in order, before anything read after them; True: dispatch as usual."""
        api_key = header.api_key
        if api_key == ApiKey.SASL_HANDSHAKE and request is not None:
            reply = sasl.handshake(str(request.mechanism))
            self._raw_sasl_tokens = header.api_version == 0 and not reply.failed
            await self._answer_sasl(header, request, reply, sasl, started)
            return False
        if api_key == ApiKey.SASL_AUTHENTICATE and request is not None:
            reply = sasl.authenticate(bytes(request.auth_bytes))
            if not reply.failed and sasl.authenticated and not sasl.in_progress:
                assert sasl.principal is not None
                SESSION.set(dataclasses.replace(SESSION.get(), principal=sasl.principal))
                self._count_login(sasl, True)
            await self._answer_sasl(header, request, reply, sasl, started)
            return False
        if not sasl.authenticated and api_key not in _PRE_AUTH_APIS:
            self._drop(f"api {api_key} v{header.api_version} before SASL authentication")
        if sasl.authenticated and not sasl.in_progress and sasl.expired():
            self._drop(f"SASL session of {sasl.principal} expired (KIP-368: re-authentication required)")
        return True

    async def _raw_sasl_token(self, sasl: SaslConnection, token: bytes) -> None:
        """One bare token of a SaslHandshake v0 exchange; a failure closes at once (v0 has no error reply)."""
        reply = sasl.authenticate(token)
        if reply.failed:
            self._count_login(sasl, False)
            await asyncio.sleep(self._security.failed_auth_delay_ms / 1000)
            self._drop(f"SASL authentication failed ({sasl.mechanism}, handshake v0): {reply.error_message}")
        self._writer.write(_INT32.pack(len(reply.auth_bytes)) + reply.auth_bytes)
        if sasl.authenticated and not sasl.in_progress:
            self._raw_sasl_tokens = False
            assert sasl.principal is not None
            SESSION.set(dataclasses.replace(SESSION.get(), principal=sasl.principal))
            self._count_login(sasl, True)

    def _count_login(self, sasl: SaslConnection, succeeded: bool) -> None:
        if self._metrics is not None:
            # Only an enabled mechanism is ever recorded on the connection: a bounded label.
            self._metrics.authentication(self._security.listener.name, sasl.mechanism or "NONE", succeeded)

    async def _answer_sasl(
        self,
        header: RequestHeaderInfo,
        request: Any,
        reply: SaslReply,
        sasl: SaslConnection,
        started: float | None,
    ) -> None:
        response = _sasl_response(header, reply)
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(response)
        await self._pending.put((header, done, request, started))
        if not reply.failed or (sasl.authenticated and reply.error_code == ILLEGAL_SASL_STATE):
            return  # an out-of-order SASL request on a live session is answered, not punished
        self._count_login(sasl, False)
        # Kafka answers a failed login, waits connection.failed.authentication.delay.ms (slowing
        # down guessing), then closes; nothing else is read from this connection meanwhile.
        reason = f"SASL authentication failed ({sasl.mechanism or 'no mechanism'}): {reply.error_message}"
        closing = asyncio.ensure_future(self._close_after(self._security.failed_auth_delay_ms / 1000, reason))
        self._handler_tasks.add(closing)
        await self._pending.put((header, closing, request, None))  # the same request: counted once
        await asyncio.Event().wait()  # until the writer ends the connection

    @staticmethod
    async def _close_after(delay: float, reason: str) -> CloseConnection:
        await asyncio.sleep(delay)
        return CloseConnection(reason)

    async def _read_frame(self, min_size: int = MIN_FRAME_BYTES) -> bytes | None:
        try:
            size_bytes = await self._reader.readexactly(4)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                self._drop(f"connection closed inside a frame's size ({len(exc.partial)} of 4 bytes)")
            return None
        (size,) = _INT32.unpack(size_bytes)
        if size > self._max_frame:
            self._drop(f"frame of {size} bytes exceeds socket_request_max_bytes ({self._max_frame})")
        if size < min_size:
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
                header, task, request, started = await self._pending.get()
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
                    if started is not None:
                        self._measured(header, request, response, started, 0)
                    continue
                if isinstance(response, CloseConnection):
                    if started is not None:
                        self._measured(header, request, response, started, 0)
                    self._drop(response.reason)
                sent = await self._send(header.correlation_id, response)
                if started is not None:
                    self._measured(header, request, response, started, sent)

    def _measured(
        self, header: RequestHeaderInfo, request: Any, response: Any, started: float, sent: int
    ) -> None:
        assert self._metrics is not None and self._stats is not None
        self._stats.sent_bytes += sent
        self._metrics.request_done(header, request, response, time.perf_counter() - started)

    async def _send(self, correlation_id: int, response: Any) -> int:
        """Write one response; returns its size on the wire."""
        if isinstance(response, RawResponse):
            sent = await self._send_raw(correlation_id, response)
        else:
            data = encode_response(correlation_id, response)
            self._writer.write(data)
            sent = len(data)
        await self._writer.drain()
        return sent

    async def _send_raw(self, correlation_id: int, response: RawResponse) -> int:
        tag = b"\0" if response.flexible_header else b""
        size = 4 + len(tag) + response.body_size()
        writer = self._writer
        writer.write(_SIZE_AND_CORRELATION.pack(size, correlation_id) + tag)
        loop = asyncio.get_running_loop()
        # TLS needs the bytes in Python: asyncio's sendfile fallback would read from the segment
        # file's shared position (it seeks only for a non-zero offset), so read with pread instead.
        tls = writer.get_extra_info("ssl_object") is not None
        for part in response.parts:
            if isinstance(part, bytes):
                writer.write(part)
            elif tls or part.length < SENDFILE_MIN_BYTES:
                writer.write(part.read_bytes())
            else:
                # Zero copy: the kernel moves segment bytes straight to the socket.
                await writer.drain()
                await loop.sendfile(writer.transport, part.file, part.position, part.length)
        return 4 + size

    def _drop(self, reason: str) -> Any:
        """Log the one line for a connection we close, and unwind its task."""
        log.warning("closing connection from %s: %s", self._peer, reason)
        raise _ConnectionClosed(reason)


def _sasl_response(header: RequestHeaderInfo, reply: SaslReply) -> Any:
    cls = response_class(header.api_key, header.api_version)
    return make(
        cls,
        error_code=error(reply.error_code),
        error_message=reply.error_message,
        mechanisms=reply.mechanisms,
        auth_bytes=reply.auth_bytes,
        session_lifetime=datetime.timedelta(milliseconds=reply.session_lifetime_ms),
    )


class Broker:
    """A single-node Kafka broker (node id 1) on one listener.

    ``Broker(data_dir, host="127.0.0.1", port=0, **config)``; settings are
    :class:`~kafkakit.broker.config.BrokerConfig` fields (``log_segment_bytes=...``)
    and are validated here, so bad ones raise ``KafkaConfigError`` before anything
    starts.  Use ``async with Broker(tmp) as broker:`` or ``await start()`` /
    ``await stop()``; ``bootstrap_servers`` is ``"host:port"`` once started.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        add_scram: Iterable[str] = (),
        **config: Any,
    ):
        self.config = BrokerConfig.from_kwargs(**config)
        self._cluster: ClusterRuntime | None = None
        # kafka-storage's --add-scram entries, applied to the credential store at start.
        self._add_scram = [parse_add_scram(spec) for spec in add_scram]
        self.data_dir = Path(data_dir)
        self.host = host
        self._requested_port = port
        # Parsed now so that a bad listener setting fails here, before anything starts.
        self._listeners = configured_listeners(self.config, host, port)
        self._security = {lst.name: ListenerSecurity.build(self.config, lst) for lst in self._listeners}
        self._ssl = {lst.name: server_ssl_context(self.config, lst) for lst in self._listeners if lst.uses_ssl}
        self._servers: dict[str, asyncio.Server] = {}
        self._bound: list[Listener] = []
        self._state: BrokerState | None = None
        # The start-up gate: connections are accepted at once but served only once it is set.
        self._serving = asyncio.Event()
        self._closing = False
        self._connections: set[_Connection] = set()
        # Built only when metrics_port is set, so that a broker without it has no instrumentation.
        self._metrics: BrokerMetrics | None = None
        self._metrics_server: MetricsServer | None = None
        if self.config.metrics_port is not None:
            self._metrics = BrokerMetrics(lambda: self._state)

    @property
    def state(self) -> BrokerState:
        """The running broker's topic registry, logs and coordinators."""
        if self._state is None:
            raise RuntimeError("broker is not started")
        return self._state

    @property
    def port(self) -> int:
        """The port of the first listener (known after :meth:`start`)."""
        if not self._bound:
            raise RuntimeError("broker is not started")
        return self._bound[0].port

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of the first listener, for clients, after :meth:`start`."""
        return self.listener_address(self._listeners[0].name)

    @property
    def metrics_address(self) -> str | None:
        """``host:port`` of the Prometheus endpoint (``http://<it>/metrics``) once started;
        None when ``metrics_port`` is not set."""
        if self._metrics is None:
            return None
        if self._metrics_server is None:
            raise RuntimeError("broker is not started")
        host, port = self._metrics_server.address
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def metrics_registry(self) -> CollectorRegistry | None:
        """This broker's own Prometheus registry (e.g. for ``generate_latest``); None without metrics."""
        return None if self._metrics is None else self._metrics.registry

    def listener_address(self, name: str) -> str:
        """The advertised ``host:port`` of listener ``name`` (e.g. ``"SASL_SSL"``), after :meth:`start`."""
        host, port = self.state.listener_endpoints[name.upper()]
        return f"{host}:{port}"

    async def start(self) -> None:
        """Open the data directory (recovering logs if needed) and start every listener."""
        if self._servers:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        raise_descriptor_limit()  # thousands of partitions need thousands of descriptors
        state = BrokerState(self.data_dir, self.config)
        for entry in self._add_scram:
            state.scram_credentials.add(entry)
        self._serving = asyncio.Event()
        self._closing = False
        try:
            if self._metrics is not None and self.config.metrics_port is not None:
                self._metrics_server = MetricsServer(self._metrics.registry)
                await self._metrics_server.start(self.host, self.config.metrics_port)
            for listener in self._listeners:
                server = await asyncio.start_server(
                    functools.partial(self._on_connection, state, self._security[listener.name]),
                    listener.host,
                    listener.port,
                    ssl=self._ssl.get(listener.name),
                    ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT if listener.uses_ssl else None,
                )
                self._servers[listener.name] = server
                bound_port = server.sockets[0].getsockname()[1]
                self._bound.append(dataclasses.replace(listener, port=bound_port))
        except BaseException:
            await self._close_servers()
            state.close()
            raise
        if self._metrics_server is not None:
            log.info("kafkakit broker metrics on http://%s/metrics", self.metrics_address)
        state.set_listeners(advertised_endpoints(self.config, self._bound))
        state.set_listener_protocols({lst.name: lst.security_protocol for lst in self._bound})
        if self.config.cluster_mode:
            from kafkakit.broker.cluster_mode import ClusterRuntime  # only cluster nodes need it

            # Serve requests once the image has caught up with the metadata log, not before.
            self._cluster = ClusterRuntime(state, self.config, self.data_dir, on_caught_up=self._serving.set)
            try:
                await self._cluster.start()
            except BaseException:
                await self._cluster.stop(graceful=False)
                await self._close_servers()
                state.close()
                raise
        self._state = state
        state.start_background_tasks()
        if self._cluster is None:
            self._serving.set()

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Cluster mode: wait until this node has caught up with the metadata log (it serves
        requests from then on) and is unfenced (a node alone cannot get there: the quorum needs
        a majority). Immediate on one node."""
        if self._cluster is not None:
            await self._cluster.wait_ready(timeout)

    @property
    def cluster(self) -> ClusterRuntime | None:
        """The quorum, controller and replica manager of a cluster node; None on a single node."""
        return self._cluster

    async def _close_servers(self) -> None:
        self._closing = True
        for connection in list(self._connections):
            connection.abort()  # a failed start: connections held at the gate end too
        servers, self._servers = self._servers, {}
        self._bound = []
        metrics_server, self._metrics_server = self._metrics_server, None
        if metrics_server is not None:
            await metrics_server.stop()
        for server in servers.values():
            server.close()
        for server in servers.values():
            with contextlib.suppress(Exception):
                await server.wait_closed()

    async def stop(self, *, graceful: bool = True) -> None:
        """Stop listening, drop every connection, and close the logs cleanly.

        A cluster node first makes a controlled shutdown when ``graceful`` (the controller
        moves its leaderships to other replicas), then leaves the quorum."""
        if not self._servers:
            return
        if self._cluster is not None:
            await self._cluster.stop(graceful=graceful)
            self._cluster = None
        self._closing = True
        for server in self._servers.values():
            server.close()
        # Aborting (not cancelling) the connection tasks lets them end normally,
        # which asyncio's stream callback expects.
        for connection in list(self._connections):
            connection.abort()
        while self._connections:
            await asyncio.sleep(0.001)
        await self._close_servers()
        if self._state is not None:
            await self._state.stop_background_tasks()
            self._state.close()
        self._state = None

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
        await asyncio.gather(*(server.serve_forever() for server in self._servers.values()))

    async def _on_connection(
        self,
        state: BrokerState,
        security: ListenerSecurity,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        if self._closing:
            writer.close()
            return
        connection = _Connection(state, reader, writer, security, self._metrics, self._serving)
        stats = None if self._metrics is None else self._metrics.listener(security.listener.name)
        if stats is not None:
            stats.connections_created += 1
        self._connections.add(connection)
        try:
            await connection.serve()
        finally:
            self._connections.discard(connection)
            if stats is not None:
                stats.connections_closed += 1
